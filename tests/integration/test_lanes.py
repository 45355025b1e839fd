"""Through tritonserver: two in-process lanes of four sequences serve 16 concurrent greedy requests,
each with the output it has alone; both lanes serve, and the per-lane metrics show it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.clients import grpc_stream, scrape, series
from tests.integration.conftest import Server, start_server, stop_server, wait_ready
from tests.integration.test_scheduling import document, ids_request, run_concurrently

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lanes_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, srv = start_server(tmp_path_factory.mktemp("triton_lanes") / "server.log",
                             "dtype=float32", "data_parallel_size=2", "max_num_seqs=4")
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)


def test_two_lanes_serve_concurrent_requests_exactly(lanes_server: Server, chat_ids: Any) -> None:
    assert "topology: 2 in-process lanes x 4 sequences" in lanes_server.log_text()
    requests = [ids_request(chat_ids(document(3, seed=s)), 24) for s in range(16)]
    alone = [grpc_stream(lanes_server.grpc, "tt_llm", r, timeout=300).ids() for r in requests]
    before = scrape(lanes_server.metrics)
    together = run_concurrently(lanes_server, requests)
    assert [r.ids() for r in together] == alone
    # Least-loaded assignment: 8 per lane when all 16 arrive before any finishes; a request that
    # finishes while the client threads still send (a loaded machine) lets its lane take one more.
    # Each lane has 4 seats, so the first 8 arrivals always split 4/4.
    successes = [series("vllm:request_success_total", finished_reason="length", lane=lane) for lane in "01"]
    deadline = time.monotonic() + 10
    while True:  # the last responses may reach the client before the metrics update
        after = scrape(lanes_server.metrics)
        served = [after[name] - before.get(name, 0.0) for name in successes]
        if sum(served) == 16 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sum(served) == 16 and min(served) >= 4, served
    for lane, count in zip("01", served, strict=True):
        generated = after[series("vllm:generation_tokens_total", lane=lane)] - before.get(
            series("vllm:generation_tokens_total", lane=lane), 0)
        assert generated == count * 24
        assert after[series("tt:steps_total", mode="decode", lane=lane)] > 0
        assert after[series("vllm:num_requests_running", lane=lane)] == 0
