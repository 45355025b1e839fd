"""Through tritonserver: chunked prefill interleaves with decoding streams, and KV pressure
(preemption by recompute) never changes outputs. Greedy, fp32, prefix caching off so every
request really computes its whole prompt."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.conftest import CHAT_PROMPTS
from tests.integration.clients import StreamResult, grpc_stream
from tests.integration.conftest import Server, start_server, stop_server, wait_ready

pytestmark = pytest.mark.integration

ANIMALS = ["fox", "owl", "otter", "heron", "lynx", "badger", "wren", "seal", "moth", "newt"]
PLACES = ["valley", "harbour", "forest", "meadow", "canyon", "island", "marsh", "ridge"]


def document(n_facts: int, seed: int) -> str:
    facts = [f"Fact {i}: the {ANIMALS[(i * 7 + seed) % 10]} was seen near the "
             f"{PLACES[(i * 3 + seed) % 8]} on day {(i * 13 + seed) % 31 + 1}." for i in range(n_facts)]
    return " ".join(facts) + " Which animal was seen most often? Answer in one sentence."


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # 96 blocks of 16 = 1536 KV tokens; one 1280-token request fits, busy workloads do not.
    proc, srv = start_server(tmp_path_factory.mktemp("triton_small") / "server.log",
                             "dtype=float32", "max_num_batched_tokens=64", "max_model_len=1280",
                             "num_kv_blocks=96", "enable_prefix_caching=false")
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)


def ids_request(ids: list[int], max_tokens: int) -> dict[str, np.ndarray]:
    return {"input_ids": np.array(ids, dtype=np.int32), "stream": np.array([True]),
            "sampling_parameters": np.array(
                [f'{{"temperature": 0, "max_tokens": {max_tokens}, "ignore_eos": true}}'.encode()],
                dtype=np.object_)}


def run_concurrently(server: Server, requests: list[dict[str, np.ndarray]]) -> list[StreamResult]:
    results: list[StreamResult | None] = [None] * len(requests)

    def run(i: int) -> None:
        results[i] = grpc_stream(server.grpc, "tt_llm", requests[i], timeout=300)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None and r.error is None for r in results), [r and r.error for r in results]
    return [r for r in results if r is not None]


def test_long_prompt_chunks_interleave_with_decoding_streams(small_server: Server, chat_ids: Any) -> None:
    shorts = [chat_ids(p) for p in CHAT_PROMPTS]
    long_ids = chat_ids(document(52, seed=1))
    assert 900 <= len(long_ids) <= 1100, len(long_ids)
    short_req = [ids_request(ids, 64) for ids in shorts]
    long_req = ids_request(long_ids, 16)
    alone = [grpc_stream(small_server.grpc, "tt_llm", r, timeout=300).ids() for r in [*short_req, long_req]]

    started = threading.Semaphore(0)
    short_results: list[StreamResult | None] = [None] * len(shorts)

    def run_short(i: int) -> None:
        fired = []

        def first() -> None:
            if not fired:
                fired.append(True)
                started.release()
        short_results[i] = grpc_stream(small_server.grpc, "tt_llm", short_req[i], 300, first)

    threads = [threading.Thread(target=run_short, args=(i,)) for i in range(len(shorts))]
    for t in threads:
        t.start()
    for _ in shorts:
        assert started.acquire(timeout=120)  # all four are decoding
    sent = time.monotonic()
    long_result = grpc_stream(small_server.grpc, "tt_llm", long_req, timeout=300)
    for t in threads:
        t.join()
    results = [*short_results, long_result]
    assert all(r is not None and r.error is None for r in results)
    assert [r.ids() for r in results if r is not None] == alone
    # ~16 prefill chunks of 64 tokens: with one decode step after each, every short stream
    # receives tokens while the long prompt is still being prefilled.
    first_long = long_result.times[0]
    for r in short_results:
        assert r is not None
        # Count tokens, not responses: a response may carry several tokens of one character.
        during = sum(resp["output_ids"].size for t, resp in zip(r.times, r.responses, strict=True)
                     if sent < t < first_long)
        assert during >= 8, f"a short stream got only {during} tokens during the long prefill"


def test_kv_pressure_preempts_and_outputs_stay_identical(small_server: Server, chat_ids: Any) -> None:
    requests = [ids_request(chat_ids(document(20, seed=s)), 48) for s in range(6)]
    alone = [grpc_stream(small_server.grpc, "tt_llm", r, timeout=300).ids() for r in requests]
    preemptions_before = small_server.log_text().count("by recompute")
    together = run_concurrently(small_server, requests)
    assert [r.ids() for r in together] == alone
    assert small_server.log_text().count("by recompute") > preemptions_before
