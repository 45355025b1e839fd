"""TRT-LLM's clients against `ensemble` and `tensorrt_llm_bls`, and Triton's OpenAI frontend replayed.

Requests are built as the clients build them:
- Triton's OpenAI frontend (triton-inference-server/server python/openai, commit 6297a6be,
  openai_frontend/engine/utils/triton.py): `_create_trtllm_generate_request` sends [[value]]-shaped
  tensors (text_input, stream, max_tokens, stop_words as [[words]], top_p, seed, temperature, ...,
  return_num_input_tokens / return_num_output_tokens [[True]]); `_create_vllm_generate_request`
  sends text_input, stream, exclude_input_in_output, sampling_parameters (JSON of the request's
  sampling fields), return_logprobs and return_num_* as [value] to the vllm_backend model.
- genai-perf's TRT-LLM mode: {"text_input": [prompt], "max_tokens": [n], "stream": [true]} rows
  (and "min_length": [n] with --output-tokens-mean-deterministic; genai-perf 0.0.16
  inputs/converters/tensorrtllm_converter.py), sent by perf_analyzer with the batch dimension from
  the model's metadata: our gRPC [1, 1] tensors.
The frontend's in-process `tritonserver` package is not in the nvidia-pytriton wheel, so its
tensors are replayed here over gRPC.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pytest

from tests.integration.clients import StreamResult, grpc_stream, http_generate, http_generate_stream
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration
MAX_TOKENS = 24
PROMPT = "What is the capital of France? Answer in one sentence."
MODELS = ("ensemble", "tensorrt_llm_bls")


def i32(value: Any) -> np.ndarray:
    return np.array(value, dtype=np.int32)


def b(value: Any) -> np.ndarray:
    return np.array(value, dtype=np.bool_)


def frontend_trtllm_inputs(prompt: str, stream: bool, max_tokens: int,
                           **extra: np.ndarray) -> dict[str, np.ndarray]:
    """`_create_trtllm_generate_request`'s tensors for a chat request without sampling fields."""
    return {"text_input": np.array([[prompt.encode()]], dtype=np.object_), "stream": b([[stream]]),
            "max_tokens": i32([[max_tokens]]), **extra,
            "return_num_input_tokens": b([[True]]), "return_num_output_tokens": b([[True]])}


@pytest.fixture(scope="module")
def expected(chat_ids: Any, hf_greedy: Any, tokenizer: Any) -> tuple[str, int, int]:
    """HF greedy's answer to PROMPT, the prompt's token count and the answer's (EOS included)."""
    ids = chat_ids(PROMPT)
    new = hf_greedy(tuple(ids), MAX_TOKENS)
    return tokenizer.decode(new, skip_special_tokens=True), len(ids), len(new)


def counts(result: StreamResult) -> tuple[int, int]:
    """(num_input_tokens, the sum of num_output_tokens), as the frontend's usage accumulator reads them."""
    return (int(result.responses[0]["num_input_tokens"].reshape(-1)[0]),
            sum(int(r["num_output_tokens"].reshape(-1)[0]) for r in result.responses))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [True, False])
def test_openai_frontend_trtllm_requests_give_hf_greedy_text(
        server: Server, model: str, stream: bool, chat_text: Any, expected: tuple[str, int, int]) -> None:
    text, prompt_tokens, new_tokens = expected
    inputs = frontend_trtllm_inputs(chat_text(PROMPT), stream, MAX_TOKENS)
    result = grpc_stream(server.grpc, model, inputs)
    assert result.error is None, result.error
    assert (len(result.responses) > 1) == stream
    first = result.responses[0]
    assert first["text_output"].shape == (1, 1) and first["batch_index"].tolist() == [[0]]
    assert first["output_log_probs"].shape[:2] == (1, 1) and first["cum_log_probs"].shape == (1, 1)
    if stream:  # TRT-LLM streams only what is new
        assert result.text() == text
    else:  # and gives the prompt first unless exclude_input_in_output
        assert result.text().endswith(text) and len(result.text()) > len(text)
    assert counts(result) == (prompt_tokens, new_tokens)


@pytest.mark.parametrize("model", MODELS)
def test_genai_perf_trtllm_rows_over_http_give_hf_greedy_text(server: Server, model: str, chat_text: Any,
                                                               expected: tuple[str, int, int]) -> None:
    body = {"text_input": chat_text(PROMPT), "max_tokens": MAX_TOKENS, "bad_words": "", "stop_words": ""}
    events = http_generate_stream(server.http, model, {**body, "stream": True})
    assert all("error" not in e for e in events), events
    assert "".join(e["text_output"] for e in events) == expected[0]
    whole = http_generate(server.http, model, {**body, "exclude_input_in_output": True})
    assert whole["status"] == 200 and whole["text_output"] == expected[0]


@pytest.mark.parametrize("model", MODELS)
def test_genai_perf_deterministic_rows_send_min_length(server: Server, model: str, chat_text: Any,
                                                       expected: tuple[str, int, int]) -> None:
    # genai-perf 0.0.16 (inputs/converters/tensorrtllm_converter.py, --output-tokens-mean-deterministic)
    # sends TRT-LLM's older name min_length with max_tokens: every answer is exactly that long
    long = expected[2] + 6
    inputs = frontend_trtllm_inputs(chat_text(PROMPT), True, long, min_length=i32([[long]]))
    result = grpc_stream(server.grpc, model, inputs)
    assert result.error is None, result.error
    assert counts(result) == (expected[1], long) and result.text().startswith(expected[0])
    both = grpc_stream(server.grpc, model, {**inputs, "min_tokens": i32([[long]])})
    assert both.error is not None
    assert "give min_tokens (TRT-LLM's name now) or min_length, not both" in both.error


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("form", ["text", "ids"])
def test_stop_words_as_text_or_ids_and_offsets(server: Server, model: str, form: str, chat_text: Any,
                                               tokenizer: Any, expected: tuple[str, int, int]) -> None:
    text = expected[0]
    word = text.split()[3]
    if form == "text":  # the frontend's [[words]]
        extra = {"stop_words": np.array([[word.encode()]], dtype=np.object_)}
    else:  # [[ids], [offsets]], padded as TRT-LLM's preprocessing pads them
        ids = tokenizer.encode(word, add_special_tokens=False)
        extra = {"stop_words_list": np.array([[ids + [0], [len(ids)] + [-1] * len(ids)]], dtype=np.int32)}
    inputs = frontend_trtllm_inputs(chat_text(PROMPT), False, MAX_TOKENS, **extra,
                                    exclude_input_in_output=b([[True]]))
    result = grpc_stream(server.grpc, model, inputs)
    assert result.error is None, result.error
    # As in TRT-LLM, generation ends with the stop word's tokens, which stay in the output ids
    assert result.text() == text[:text.index(word) + len(word)]


BAD: list[tuple[dict[str, np.ndarray], str]] = [
    ({"beam_width": i32([[2]])}, "beam_width=2 is not supported"),
    ({"max_tokens": i32([[-3]])}, "max_tokens must be >= 1, got -3"),
    ({"stop_words_list": i32([[[5, 6], [3, -1]]])}, "input stop_words_list has offset 3 after 0"),
    ({"stop_words_list": i32([[[5, 6]]])}, "unexpected shape for input 'stop_words_list'"),  # Triton's check
    ({"num_return_sequences": i32([[2]])}, "num_return_sequences=2 is not supported"),
    ({"return_generation_logits": b([[True]])}, "return_generation_logits=true is not supported"),
]


@pytest.mark.parametrize("model", MODELS)
def test_bad_values_get_errors_naming_the_input_while_a_stream_carries_on(
        server: Server, model: str, chat_text: Any, expected: tuple[str, int, int]) -> None:
    results: list[StreamResult] = []
    started = threading.Event()
    inputs = frontend_trtllm_inputs(chat_text(PROMPT), True, MAX_TOKENS)
    streaming = threading.Thread(target=lambda: results.append(grpc_stream(
        server.grpc, model, inputs, on_response=started.set)))
    streaming.start()
    assert started.wait(120)
    for change, message in BAD:
        refused = grpc_stream(server.grpc, model, {**frontend_trtllm_inputs("Hi", False, 4), **change})
        assert refused.responses == [] and message in str(refused.error), refused.error
    two = {"text_input": np.array([[b"a"], [b"b"]], dtype=np.object_), "max_tokens": i32([[4], [4]])}
    refused = grpc_stream(server.grpc, model, two)
    assert refused.error is not None and "must hold a batch of one prompt" in refused.error
    streaming.join(120)
    assert results[0].error is None and results[0].text() == expected[0]


def test_openai_frontend_vllm_request_serves_a_chat_from_tt_llm(server: Server, chat_text: Any,
                                                                expected: tuple[str, int, int]) -> None:
    """`_create_vllm_generate_request` for {"messages": [...], "temperature": 0, "max_tokens": N}: the
    request's sampling fields as JSON (model_dump without the excluded and None fields)."""
    sampling = {"frequency_penalty": 0.0, "n": 1, "presence_penalty": 0.0, "temperature": 0.0, "top_p": 1.0,
                "max_tokens": MAX_TOKENS}
    for stream in (False, True):
        result = grpc_stream(server.grpc, "tt_llm", {
            "return_logprobs": b([False]),
            "text_input": np.array([chat_text(PROMPT).encode()], dtype=np.object_),
            "stream": b([stream]), "exclude_input_in_output": b([True]),
            "sampling_parameters": np.array([json.dumps(sampling).encode()], dtype=np.object_),
            "return_num_input_tokens": b([True]), "return_num_output_tokens": b([True])})
        assert result.error is None, result.error
        assert result.text() == expected[0]
        assert counts(result) == expected[1:]
