"""Through tritonserver: the requests that harmed others (issue "No request can harm another") each
end alone with a client error naming the field, while bystander streams get exactly the tokens
they get alone, the server never restarts, and no KV block stays held."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import requests

from tests.integration.clients import grpc_stream, http_generate, idle_scrape, s, series
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration

RESTART_LINE = "[supervise] restarting tritonserver"


def bystander_inputs(ids: list[int]) -> dict[str, np.ndarray]:
    return {"input_ids": np.array(ids, dtype=np.int32), "stream": np.array([True]),
            "max_tokens": np.array([40], dtype=np.int32)}


@contextmanager
def bystanders(server: Server, chat_ids: Callable[[str], list[int]]) -> Iterator[None]:
    """Two greedy streams run alongside the block; afterwards they must equal their runs alone,
    the server must not have restarted and every KV block must be free again."""
    inputs = [bystander_inputs(chat_ids(p)) for p in ("Name three rivers.", "Describe a cat.")]
    alone = [grpc_stream(server.grpc, "tt_llm", x).ids() for x in inputs]
    restarts = server.log_text().count(RESTART_LINE)
    got: dict[int, Any] = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(
        i, grpc_stream(server.grpc, "tt_llm", inputs[i], timeout=300))) for i in range(len(inputs))]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        for t in threads:
            t.join()
    assert [got[i].error for i in range(len(inputs))] == [None, None]
    assert [got[i].ids() for i in range(len(inputs))] == alone
    assert server.log_text().count(RESTART_LINE) == restarts
    idle = idle_scrape(server.metrics)
    assert idle[series("vllm:kv_cache_usage_perc")] == 0.0


def refused(server: Server, model: str, inputs: dict[str, np.ndarray]) -> str:
    result = grpc_stream(server.grpc, model, inputs)
    assert result.responses == [] and result.error is not None
    return result.error


def test_a_lone_surrogate_in_bad_words_fails_only_its_request(server: Server, chat_ids: Any) -> None:
    """It reached the tokenizer on the engine thread and killed the engine (every stream died)."""
    with bystanders(server, chat_ids):
        for _ in range(3):
            error = refused(server, "tt_llm", {"text_input": s("Hi"), "sampling_parameters": s(
                '{"bad_words": ["\\ud800"], "max_tokens": 4}')})
            assert "bad_words[0] is not valid Unicode: a lone surrogate '\\ud800' at character 0" in error


def test_top_k_of_2_63_fails_no_neighbour(server: Server, chat_ids: Any) -> None:
    """It passed validation and overflowed the step's sampling tensors: every request of its step
    ended with 'step failed: Overflow when unpacking long long'."""
    with bystanders(server, chat_ids):
        error = refused(server, "tt_llm", {"text_input": s("Hi"), "sampling_parameters": s(
            json.dumps({"top_k": 2**63, "temperature": 0.7, "max_tokens": 4}))})
        assert "top_k must be -1, 0 (disabled) or in [1, 2147483647], got 9223372036854775808" in error
        top = grpc_stream(server.grpc, "tt_llm", {"text_input": s("Hi"), "sampling_parameters": s(
            json.dumps({"top_k": 2**31 - 1, "temperature": 0.7, "seed": 3, "max_tokens": 4}))})
        assert top.error is None and len(top.responses) == 1  # a huge valid top_k filters nothing


@pytest.mark.parametrize("body, field", [
    ({"text_input": "Hi", "parameters": {"temperature": 10**400}}, "temperature must be a finite number"),
    ({"text_input": "Hi", "parameters": {"top_p": 7}}, "top_p must be in (0, 1], got 7.0"),
    ({"text_input": "Hi", "parameters": {"logit_bias": {str(i): 1 for i in range(1025)}}},
     "logit_bias holds 1025 entries, more than max_logit_bias=1024"),
    ({"text_input": "Hi", "parameters": {"stop": ["x"] * 65}},
     "stop holds 65 entries, more than max_stop=64"),
])
def test_client_mistakes_are_400_over_http(server: Server, body: dict[str, Any], field: str) -> None:
    """Triton's HTTP /generate answers with the status of the error's code: INVALID_ARG is 400 (it
    was 500, the default INTERNAL code, and 10**400 escaped as an OverflowError)."""
    params = body.pop("parameters")
    payload = json.dumps({**body, "sampling_parameters": json.dumps(params), "max_tokens": 4})
    r = requests.post(f"http://{server.http}/v2/models/tt_llm/generate", data=payload, timeout=60)
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]


def test_valid_requests_are_200_over_http(server: Server) -> None:
    ok = http_generate(server.http, "tt_llm", {"text_input": "Hi", "max_tokens": 2})
    assert ok["status"] == 200 and ok["text_output"]


def test_postprocessing_names_ids_outside_the_vocabulary(server: Server) -> None:
    """Negative output_ids escaped as an OverflowError ('Failed to process the request(s)')."""
    r = requests.post(f"http://{server.http}/v2/models/postprocessing/infer", timeout=30, json={"inputs": [
        {"name": "output_ids", "shape": [2], "datatype": "INT32", "data": [5, -3]},
        {"name": "context_ids", "shape": [0], "datatype": "INT32", "data": []}]})
    assert r.status_code == 400, r.text
    assert "output_ids holds -3, outside the vocabulary [0, 49152)" in r.json()["error"]


def test_the_ensemble_refuses_bad_values_as_client_errors(server: Server) -> None:
    r = requests.post(f"http://{server.http}/v2/models/ensemble/generate", timeout=60, json={
        "text_input": "Hi", "max_tokens": 4, "top_k": 5, "top_p": 5.0})
    assert r.status_code == 400, r.text
    assert "top_p must be in (0, 1], got 5.0" in r.json()["error"]


@pytest.mark.parametrize("inputs, outcome", [
    ({"text_input": s("Hello"), "stream": np.array([True])}, "the input max_tokens is required"),
    ({"max_tokens": np.array([2], dtype=np.int32), "top_k": np.array([5], dtype=np.int32)},
     "the input text_input is required"),
])
def test_the_ensemble_answers_a_request_missing_an_input(server: Server, inputs: dict[str, np.ndarray],
                                                         outcome: str) -> None:
    """Triton 2.51's ensemble counted required inputs: a request with as many other inputs ran no
    step and got one empty final response (found by the fuzz profile)."""
    result = grpc_stream(server.grpc, "ensemble", inputs, batched=True)
    assert result.responses == [] and result.error is not None and outcome in result.error
    body = {k: v[0].decode() if v.dtype == object else v.tolist()[0] for k, v in inputs.items()}
    r = requests.post(f"http://{server.http}/v2/models/ensemble/generate", json=body, timeout=60)
    assert r.status_code == 400 and outcome in r.json()["error"]
