"""Through tritonserver: two in-process lanes of four sequences serve 16 concurrent greedy requests,
each with the output it has alone; both lanes serve, and the per-lane metrics show it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.clients import grpc_stream, idle_scrape, scrape, series, wait_for_metrics
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
    before = idle_scrape(lanes_server.metrics)  # the last request alone is counted before it
    together = run_concurrently(lanes_server, requests)
    assert [r.ids() for r in together] == alone
    # 16 requests, least-loaded assignment: 8 per lane, 4 running and 4 waiting in each.
    done = {series("vllm:request_success_total", finished_reason="length", lane=lane): 8 for lane in "01"}
    assert wait_for_metrics(lanes_server.metrics, done, before) == done
    after = scrape(lanes_server.metrics)
    for lane in "01":
        generated = after[series("vllm:generation_tokens_total", lane=lane)] - before.get(
            series("vllm:generation_tokens_total", lane=lane), 0)
        assert generated == 8 * 24
        assert after[series("tt:steps_total", mode="decode", lane=lane)] > 0
        assert after[series("vllm:num_requests_running", lane=lane)] == 0
