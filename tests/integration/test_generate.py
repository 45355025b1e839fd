"""Through a real tritonserver: exact greedy outputs vs HF, and streamed == non-streamed text."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import requests

from tests.conftest import CHAT_PROMPTS, TEXT_PROMPTS
from tests.integration.clients import grpc_stream, http_generate, http_generate_stream, s
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration
MAX_TOKENS = 40


@pytest.mark.parametrize("prompt", CHAT_PROMPTS)
def test_grpc_stream_tt_llm_ids_match_hf(server: Server, prompt: str, chat_ids: Any,
                                         hf_greedy: Any) -> None:
    ids = chat_ids(prompt)
    result = grpc_stream(server.grpc, "tt_llm", {
        "input_ids": np.array(ids, dtype=np.int32),
        "max_tokens": np.array([MAX_TOKENS], dtype=np.int32),
        "stream": np.array([True])})
    assert result.error is None
    assert result.ids() == hf_greedy(tuple(ids), MAX_TOKENS)
    assert len(result.responses) > 1  # streamed, not one response at the end


def check_content(prompt: str, text: str) -> None:
    """The answer really holds what the prompt is meant to exercise."""
    if "emoji" in prompt:
        assert any(ord(c) > 0xFFFF for c in text), text
    if "Python" in prompt:
        assert "\n    " in text, text


@pytest.mark.parametrize("prompt", TEXT_PROMPTS)
def test_http_stream_ensemble_text_matches_hf(server: Server, prompt: str, chat_ids: Any, chat_text: Any,
                                              hf_greedy: Any, tokenizer: Any) -> None:
    expected = tokenizer.decode(hf_greedy(tuple(chat_ids(prompt)), MAX_TOKENS), skip_special_tokens=True)
    body = {"text_input": chat_text(prompt), "max_tokens": MAX_TOKENS}  # templated by the client
    events = http_generate_stream(server.http, "ensemble", {**body, "stream": True})
    assert all("error" not in e for e in events), events
    streamed = "".join(e["text_output"] for e in events)
    assert streamed == expected
    check_content(prompt, streamed)
    whole = http_generate(server.http, "ensemble", {**body, "exclude_input_in_output": True})
    assert whole["status"] == 200 and whole["text_output"] == streamed


@pytest.mark.parametrize("prompt", [*CHAT_PROMPTS, "Once upon a time"])
def test_the_ensemble_gives_tt_llm_tokens_for_the_same_text(server: Server, prompt: str,
                                                            chat_text: Any) -> None:
    text = prompt if prompt == "Once upon a time" else chat_text(prompt)  # templated, and one raw
    ensemble = http_generate(server.http, "ensemble", {"text_input": text, "max_tokens": MAX_TOKENS,
                                                       "exclude_input_in_output": True})
    direct = http_generate(server.http, "tt_llm", {
        "text_input": text, "exclude_input_in_output": True,
        "sampling_parameters": json.dumps({"temperature": 0, "max_tokens": MAX_TOKENS})})
    assert ensemble["status"] == direct["status"] == 200
    assert ensemble["text_output"] == direct["text_output"] != ""


@pytest.mark.parametrize("prompt", TEXT_PROMPTS)
def test_tt_llm_text_streamed_equals_non_streamed(server: Server, prompt: str, tokenizer: Any) -> None:
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                         add_generation_prompt=True, tokenize=False)
    params = json.dumps({"temperature": 0, "max_tokens": MAX_TOKENS})
    streamed = grpc_stream(server.grpc, "tt_llm", {
        "text_input": s(text), "sampling_parameters": s(params), "stream": np.array([True]),
        "return_num_output_tokens": np.array([True])})
    assert streamed.error is None
    whole = http_generate(server.http, "tt_llm", {
        "text_input": text, "sampling_parameters": params, "exclude_input_in_output": True,
        "return_finish_reason": True, "return_num_output_tokens": True})
    assert whole["status"] == 200
    assert streamed.text() == whole["text_output"]
    check_content(prompt, whole["text_output"])
    assert sum(int(r["num_output_tokens"][0]) for r in streamed.responses) == whole["num_output_tokens"]
    assert whole["finish_reason"] in ("stop", "length")
    with_prompt = http_generate(server.http, "tt_llm", {"text_input": text, "sampling_parameters": params})
    assert with_prompt["text_output"] == text + whole["text_output"]


def test_bad_request_gets_a_clear_error_and_server_stays_ready(server: Server) -> None:
    bad = http_generate(server.http, "tt_llm", {"text_input": "hi", "sampling_parameters": '{"top_p": 7}'})
    assert bad["status"] == 400 and "top_p must be in (0, 1], got 7.0" in bad["error"]
    result = grpc_stream(server.grpc, "tt_llm", {"input_ids": np.array([1, 99999], dtype=np.int32)})
    assert result.error is not None and "input_ids hold 99999, outside the vocabulary" in result.error
    assert requests.get(f"http://{server.http}/v2/health/ready", timeout=5).status_code == 200
    good = http_generate(server.http, "tt_llm",
                         {"text_input": "Hello", "sampling_parameters": '{"max_tokens": 2}'})
    assert good["status"] == 200 and good["text_output"].startswith("Hello")
