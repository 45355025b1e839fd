"""Through tritonserver: each kind of bad input (the corpus of bad_input_corpus.py) gets one clear
error naming the problem, while good requests run on unaffected and the server stays ready."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import requests

from tests.integration.bad_input_corpus import FRONT_CASES, TRITON_CASES, front_problem, i32, triton_problem
from tests.integration.clients import grpc_stream, s
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration


def test_the_corpus_has_sixty_kinds() -> None:
    kinds = [c[0] for c in TRITON_CASES] + [c.kind for c in FRONT_CASES]
    assert len(set(kinds)) == len(kinds) >= 60


def test_bad_inputs_get_clear_errors_while_good_requests_run(server: Server, chat_ids: Any) -> None:
    assert server.openai is not None
    good_prompts = [chat_ids(f"Write a sentence about the colour {c}.") for c in ("red", "green", "blue")]
    good_inputs = [{"input_ids": np.array(ids, dtype=np.int32), "stream": np.array([True]),
                    "max_tokens": np.array([48], dtype=np.int32)} for ids in good_prompts]
    alone = [grpc_stream(server.grpc, "tt_llm", x).ids() for x in good_inputs]
    good: dict[int, list[int]] = {}

    def run_good(i: int) -> None:
        good[i] = grpc_stream(server.grpc, "tt_llm", good_inputs[i], timeout=300).ids()

    threads = [threading.Thread(target=run_good, args=(i,)) for i in range(len(good_inputs))]
    for t in threads:
        t.start()
    served = requests.get(f"{server.openai}/models", timeout=10).json()["data"][0]["id"]
    problems = [p for case in TRITON_CASES if (p := triton_problem(server.grpc, case))]
    problems += [p for case in FRONT_CASES if (p := front_problem(server.openai, served, case))]
    # Triton's HTTP frontend rejects a malformed body itself (with status 500, its choice).
    http = requests.post(f"http://{server.http}/v2/models/tt_llm/generate", data=b"{not json", timeout=30)
    if "failed to parse the request JSON buffer" not in http.json().get("error", ""):
        problems.append(f"malformed HTTP body: {http.status_code} {http.text}")
    for t in threads:
        t.join()
    assert not problems, "\n".join(problems)
    assert [good[i] for i in range(len(good_inputs))] == alone
    assert requests.get(f"http://{server.http}/v2/health/ready", timeout=5).status_code == 200


def test_prompts_stay_out_of_the_logs(server: Server) -> None:
    """No prompt text in the server's log by default, from good or bad requests on every path."""
    assert server.openai is not None
    secret = "Zebra quartz umbrella 7319"
    assert grpc_stream(server.grpc, "tt_llm", {"text_input": s(secret), "max_tokens": i32(2)}).error is None
    assert grpc_stream(server.grpc, "ensemble", {"text_input": s(secret), "max_tokens": i32(2)},
                       batched=True).error is None
    assert "exceeds max_model_len" in str(grpc_stream(server.grpc, "tt_llm", {
        "text_input": s(secret + " word" * 9000)}).error)
    served = requests.get(f"{server.openai}/models", timeout=10).json()["data"][0]["id"]
    chat = requests.post(f"{server.openai}/chat/completions", timeout=60, json={
        "model": served, "messages": [{"role": "user", "content": secret}], "max_tokens": 2})
    refused = requests.post(f"{server.openai}/completions", timeout=60, json={
        "model": served, "prompt": secret, "temperature": -1})
    assert (chat.status_code, refused.status_code) == (200, 400)
    assert secret not in server.log_text()
