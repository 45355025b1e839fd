"""Through tritonserver: logprobs requests take the host path (the metric counts it) while plain
requests keep their exact outputs, and both schemas return logprobs."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pytest

from tests.conftest import CHAT_PROMPTS
from tests.integration.clients import StreamResult, grpc_stream, http_generate, idle_scrape, s, series
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration

MAX_TOKENS = 12


def plain(i: int) -> dict[str, np.ndarray]:
    params = {"temperature": 0.8, "top_p": 0.9, "seed": 100 + i, "max_tokens": MAX_TOKENS, "ignore_eos": True}
    return {"text_input": s(CHAT_PROMPTS[i]), "sampling_parameters": s(json.dumps(params)),
            "stream": np.array([True])}


def with_logprobs() -> dict[str, np.ndarray]:
    params = {"temperature": 0, "max_tokens": MAX_TOKENS, "ignore_eos": True, "logprobs": 2}
    return {"text_input": s(CHAT_PROMPTS[3]), "sampling_parameters": s(json.dumps(params)),
            "stream": np.array([True]), "return_logprobs": np.array([True]),
            "return_cumulative_logprob": np.array([True])}


def concurrently(server: Server, requests: list[dict[str, np.ndarray]]) -> list[StreamResult]:
    results: list[StreamResult | None] = [None] * len(requests)

    def run(i: int) -> None:
        results[i] = grpc_stream(server.grpc, "tt_llm", requests[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None and r.error is None for r in results)
    return [r for r in results if r is not None]


def test_mixed_batch_takes_the_host_path_and_plain_outputs_stay_the_same(server: Server) -> None:
    alone = [r.text() for r in concurrently(server, [plain(i) for i in range(3)])]
    fallbacks = series("tt:host_sampling_fallbacks_total")
    before = idle_scrape(server.metrics).get(fallbacks, 0.0)
    mixed = concurrently(server, [plain(i) for i in range(3)] + [with_logprobs()])
    assert [r.text() for r in mixed[:3]] == alone
    assert all("logprobs" not in response for r in mixed[:3] for response in r.responses)
    # exactly the steps holding the logprobs request sampled on the host: its prefill and 11 decodes
    # (idle_scrape: the last step's report reaches the metrics after its response)
    assert idle_scrape(server.metrics)[fallbacks] - before == MAX_TOKENS

    positions = [p for response in mixed[3].responses
                 for p in json.loads(response["logprobs"].reshape(-1)[0].decode("utf-8"))]
    assert len(positions) == MAX_TOKENS
    total = 0.0
    for position in positions:
        sampled = next(iter(position.values()))  # the sampled token comes first
        assert sampled["rank"] == 1 and sampled["logprob"] <= 0  # greedy: the most likely token
        assert len(position) == 2
        assert all(set(e) == {"logprob", "rank", "decoded_token"} for e in position.values())
        total += sampled["logprob"]
    final = mixed[3].responses[-1]["cumulative_logprob"].reshape(-1)[0]
    assert final == pytest.approx(total, abs=1e-3)


def test_ensemble_returns_trt_llm_log_probs(server: Server, chat_text: Any) -> None:
    body: dict[str, Any] = {"text_input": chat_text(CHAT_PROMPTS[0]), "max_tokens": 6, "top_k": 5, "seed": 3}
    asked = http_generate(server.http, "ensemble", {**body, "return_log_probs": True})
    assert asked["status"] == 200, asked
    log_probs = asked["output_log_probs"]
    assert len(log_probs) == 6 and all(v < 0 for v in log_probs)
    assert asked["cum_log_probs"] == pytest.approx(sum(log_probs), abs=1e-3)  # a one-element tensor
    plain_run = http_generate(server.http, "ensemble", body)
    assert plain_run["text_output"] == asked["text_output"]  # the same seeded tokens on either path
    assert plain_run["output_log_probs"] == [0.0] * 6 and plain_run["cum_log_probs"] == 0.0
