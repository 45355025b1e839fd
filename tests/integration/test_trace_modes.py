"""Through tritonserver: greedy fp32 outputs are the same with every step eager (trace_mode=none),
with decode traced (the default server), and with every step traced plus async decode overlap;
the step counters show which executor ran."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.conftest import CHAT_PROMPTS
from tests.integration.clients import grpc_stream, scrape, series, wait_for_metrics
from tests.integration.conftest import Server, start_server, stop_server, wait_ready

pytestmark = pytest.mark.integration
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    settings = {"eager": ("trace_mode=none",), "traced_async": ("trace_mode=all", "async_scheduling=true")}
    started = {name: start_server(tmp_path_factory.mktemp(name) / "server.log", "dtype=float32", *extra)
               for name, extra in settings.items()}
    try:
        for proc, srv in started.values():
            wait_ready(proc, srv)
        yield {name: srv for name, (_, srv) in started.items()}
    finally:
        for proc, _ in started.values():
            stop_server(proc)


def greedy_ids(server: Server, ids: list[int]) -> list[int]:
    result = grpc_stream(server.grpc, "tt_llm", {"input_ids": np.array(ids, dtype=np.int32),
                                                 "max_tokens": np.array([MAX_TOKENS], dtype=np.int32),
                                                 "stream": np.array([True])})
    assert result.error is None
    return result.ids()


def test_outputs_equal_across_trace_modes_and_async(server: Server, servers: dict[str, Server],
                                                     chat_ids: Any, hf_greedy: Any) -> None:
    eager, traced = servers["eager"], servers["traced_async"]
    before = {name: scrape(srv.metrics) for name, srv in servers.items()}
    steps = ran_past_eos = 0
    for prompt in CHAT_PROMPTS:  # one at a time: every run batches it alone
        ids = chat_ids(prompt)
        expected = hf_greedy(tuple(ids), MAX_TOKENS)
        assert greedy_ids(eager, ids) == expected, prompt
        assert greedy_ids(server, ids) == expected, prompt
        assert greedy_ids(traced, ids) == expected, prompt
        steps += len(expected)  # one prefill, then a decode step per further token
        ran_past_eos += len(expected) < MAX_TOKENS  # async ran one step ahead, past the EOS
    want = {series("tt:eager_steps_total"): steps, series("tt:trace_replays_total"): 0}
    assert wait_for_metrics(eager.metrics, want, before["eager"]) == want
    # Each request ran ahead of the host and drained once, at its EOS or its last token; a
    # length finish is foreseen, an EOS is not: the step already in flight then ran for nothing.
    assert 0 < ran_past_eos < len(CHAT_PROMPTS)
    want = {series("tt:eager_steps_total"): 0, series("tt:trace_replays_total"): steps + ran_past_eos,
            series("tt:async_decode_drains_total"): len(CHAT_PROMPTS)}
    assert wait_for_metrics(traced.metrics, want, before["traced_async"]) == want
