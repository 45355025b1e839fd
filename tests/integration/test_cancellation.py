"""Through tritonserver: cancelled gRPC streams abort their requests and free their KV, while
the other streams finish with outputs identical to running alone."""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.clients import grpc_stream, idle_scrape, infer_input, scrape, series, wait_for_metrics
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration
N, MAX_TOKENS, CANCEL_AFTER = 16, 40, 3


def inputs(ids: list[int]) -> dict[str, np.ndarray]:
    params = f'{{"temperature": 0, "max_tokens": {MAX_TOKENS}, "ignore_eos": true}}'
    return {"input_ids": np.array(ids, dtype=np.int32), "stream": np.array([True]),
            "sampling_parameters": np.array([params.encode()], dtype=np.object_)}


def stream_and_maybe_cancel(url: str, tensors: dict[str, np.ndarray], cancel: bool) -> list[int]:
    events: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    request = [infer_input(name, value) for name, value in tensors.items()]
    client.async_stream_infer("tt_llm", request, enable_empty_final_response=True)
    ids: list[int] = []
    try:
        while True:
            result, error = events.get(timeout=300)
            assert error is None, error
            ids.extend(int(t) for t in result.as_numpy("output_ids"))
            if cancel and len(ids) >= CANCEL_AFTER:
                client.stop_stream(cancel_requests=True)
                return ids
            if result.get_response().parameters["triton_final_response"].bool_param:
                return ids
    finally:
        client.stop_stream()
        client.close()


def test_cancelled_streams_free_their_kv_and_others_are_unaffected(server: Server, chat_ids: Any) -> None:
    prompts = [chat_ids(f"Tell me a fact about the number {i}.") for i in range(N)]
    keep = range(0, N, 2)
    alone = {i: grpc_stream(server.grpc, "tt_llm", inputs(prompts[i]), timeout=300).ids() for i in keep}
    before = idle_scrape(server.metrics)
    results: dict[int, list[int]] = {}

    def run(i: int) -> None:
        results[i] = stream_and_maybe_cancel(server.grpc, inputs(prompts[i]), cancel=i % 2 == 1)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in keep:
        assert results[i] == alone[i], f"stream {i} changed"
        assert len(results[i]) == MAX_TOKENS
    for i in range(1, N, 2):
        assert CANCEL_AFTER <= len(results[i]) < MAX_TOKENS
    expected = {series("vllm:request_success_total", finished_reason="abort"): 8,
                series("vllm:request_success_total", finished_reason="length"): 8}
    assert wait_for_metrics(server.metrics, expected, before, timeout=30) == expected
    after = scrape(server.metrics)
    assert after[series("vllm:kv_cache_usage_perc")] == 0
    assert after[series("vllm:num_requests_running")] == 0
    assert after[series("vllm:num_requests_waiting")] == 0
