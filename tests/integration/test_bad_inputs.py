"""Through tritonserver: each kind of bad input gets one clear error naming the problem, while
good requests run on unaffected and the server stays ready."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pytest
import requests

from tests.integration.clients import grpc_stream, s
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration


def sp(value: Any) -> np.ndarray:
    return s(value if isinstance(value, str) else json.dumps(value))


TEXT = s("Hello")


def text_with(params: Any) -> dict[str, np.ndarray]:
    """A valid prompt with the given sampling_parameters (a dict, or raw JSON text)."""
    return {"text_input": TEXT, "sampling_parameters": sp(params)}


IDS = np.array([1, 2, 3], dtype=np.int32)
# (kind, model, input tensors, text the error must contain)
CASES: list[tuple[str, str, dict[str, np.ndarray], str]] = [
    ("malformed JSON", "tt_llm", text_with("{max_tokens: 3"),
     "sampling_parameters is not valid JSON"),
    ("JSON array", "tt_llm", text_with("[1, 2]"),
     "sampling_parameters must be a JSON object"),
    ("JSON string", "tt_llm", text_with('"fast"'),
     "sampling_parameters must be a JSON object"),
    ("unknown parameter", "tt_llm", text_with({"foo": 1}),
     "unknown sampling parameter 'foo'"),
    ("too many logprobs", "tt_llm", text_with({"logprobs": 50}),
     "logprobs must be in [0, 20], got 50"),
    ("prompt_logprobs", "tt_llm", text_with({"prompt_logprobs": 1}),
     "sampling parameter 'prompt_logprobs': prompt_logprobs is not supported"),
    ("n > 1", "tt_llm", text_with({"n": 2}),
     "n must be 1 (one sequence per request; send 2 requests instead), got 2"),
    ("logit_bias outside the vocabulary", "tt_llm", text_with({"logit_bias": {"60000": 1}}),
     "logit_bias holds 60000, outside the vocabulary [0, 49152)"),
    ("unregistered logits processor", "tt_llm", text_with({"logits_processors": ["mine"]}),
     "logits_processors names 'mine', which is not registered"),
    ("max_tokens not a number", "tt_llm", text_with({"max_tokens": "abc"}),
     "max_tokens must be an integer, got 'abc'"),
    ("max_tokens zero", "tt_llm", text_with({"max_tokens": 0}),
     "max_tokens must be >= 1, got 0"),
    ("max_tokens negative", "tt_llm", text_with({"max_tokens": -5}),
     "max_tokens must be >= 1, got -5"),
    ("max_tokens huge", "tt_llm", text_with({"max_tokens": 10**9}),
     "plus max_tokens (1000000000) exceeds max_model_len (8192)"),
    ("top_k float", "tt_llm", text_with({"top_k": 2.5}),
     "top_k must be an integer, got 2.5"),
    ("temperature negative", "tt_llm", text_with({"temperature": -1}),
     "temperature must be a finite number >= 0, got -1.0"),
    ("temperature NaN", "tt_llm", text_with({"temperature": "nan"}),
     "temperature must be a finite number >= 0, got nan"),
    ("temperature word", "tt_llm", text_with({"temperature": "hot"}),
     "temperature must be a number, got 'hot'"),
    ("top_p above 1", "tt_llm", text_with({"top_p": 1.5}),
     "top_p must be in (0, 1], got 1.5"),
    ("top_p zero", "tt_llm", text_with({"top_p": 0}),
     "top_p must be in (0, 1], got 0.0"),
    ("top_k negative", "tt_llm", text_with({"top_k": -3}),
     "top_k must be -1, 0 (disabled) or >= 1, got -3"),
    ("seed negative", "tt_llm", text_with({"seed": -1}),
     "seed must be in [0, 2**64), got -1"),
    ("seed huge", "tt_llm", text_with({"seed": 2**70}),
     "seed must be in [0, 2**64)"),
    ("ignore_eos word", "tt_llm", text_with({"ignore_eos": "maybe"}),
     "ignore_eos must be a boolean, got 'maybe'"),
    ("stop_token_ids scalar", "tt_llm", text_with({"stop_token_ids": 5}),
     "stop_token_ids must be a list of integers, got 5"),
    ("empty prompt", "tt_llm", {"text_input": s("")}, "the prompt is empty (0 tokens)"),
    ("over-long prompt", "tt_llm", {"text_input": s("word " * 9000)}, "exceeds max_model_len (8192)"),
    ("two prompts", "tt_llm", {"text_input": np.array([b"a", b"b"], dtype=np.object_)},
     "unexpected shape for input 'text_input' for model 'tt_llm'. Expected [1], got [2]"),
    ("invalid UTF-8", "tt_llm", {"text_input": np.array([b"\xff\xfe"], dtype=np.object_)},
     "text_input is not valid UTF-8"),
    ("text and ids", "tt_llm", {"text_input": TEXT, "input_ids": IDS},
     "give exactly one of the inputs text_input or input_ids"),
    ("no prompt", "tt_llm", {"stream": np.array([True])},
     "give exactly one of the inputs text_input or input_ids"),
    ("token id above vocabulary", "tt_llm", {"input_ids": np.array([1, 99999], dtype=np.int32)},
     "input_ids hold 99999, outside the vocabulary [0, 49152)"),
    ("negative token id", "tt_llm", {"input_ids": np.array([-4, 5], dtype=np.int32)},
     "input_ids hold -4, outside the vocabulary"),
    ("ids of rank 2", "tt_llm", {"input_ids": np.array([[1, 2], [3, 4]], dtype=np.int32)},
     "unexpected shape for input 'input_ids'"),
    ("stream as INT32", "tt_llm", {"text_input": TEXT, "stream": np.array([1], dtype=np.int32)},
     "inference input 'stream' data-type is 'INT32', but model 'tt_llm' expects 'BOOL'"),
    ("unknown tensor", "tt_llm", {"text_input": TEXT, "bogus": np.array([1], dtype=np.int32)},
     "unexpected inference input 'bogus'"),
    ("stop_words and stop", "tt_llm", {"text_input": TEXT, "stop_words": np.array([b"."], dtype=np.object_),
                                       "sampling_parameters": sp({"stop": ["!"]})},
     "['stop'] given both as input tensors and in sampling_parameters"),
    ("scalar and JSON both", "tt_llm", {"text_input": TEXT, "max_tokens": np.array([3], dtype=np.int32),
                                        "sampling_parameters": sp({"max_tokens": 4})},
     "given both as input tensors and in sampling_parameters"),
    ("TRT temperature negative", "tt_llm", {"input_ids": IDS, "max_tokens": np.array([3], dtype=np.int32),
                                            "top_k": np.array([5], dtype=np.int32),
                                            "temperature": np.array([-1.0], dtype=np.float32)},
     "temperature must be a finite number >= 0, got -1.0"),
    ("ensemble max_tokens zero", "ensemble",
     {"text_input": TEXT, "max_tokens": np.array([0], dtype=np.int32)},
     "max_tokens must be >= 1, got 0"),
    ("ensemble missing max_tokens", "ensemble", {"text_input": TEXT}, "max_tokens"),
    ("ensemble top_p above 1", "ensemble", {"text_input": TEXT, "max_tokens": np.array([4], dtype=np.int32),
                                            "top_p": np.array([3.0], dtype=np.float32)},
     "top_p must be in (0, 1], got 3.0"),
]


def test_bad_inputs_get_clear_errors_while_good_requests_run(server: Server, chat_ids: Any) -> None:
    assert len(CASES) >= 30
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
    problems = []
    for kind, model, tensors, message in CASES:
        result = grpc_stream(server.grpc, model, tensors, timeout=120)
        if result.error is None or message not in result.error:
            problems.append(f"{kind}: expected an error containing {message!r}, got {result.error!r} "
                            f"({len(result.responses)} responses)")
    # Triton's HTTP frontend rejects a malformed body itself (with status 500, its choice).
    http = requests.post(f"http://{server.http}/v2/models/tt_llm/generate", data=b"{not json", timeout=30)
    if "failed to parse the request JSON buffer" not in http.json().get("error", ""):
        problems.append(f"malformed HTTP body: {http.status_code} {http.text}")
    for t in threads:
        t.join()
    assert not problems, "\n".join(problems)
    assert [good[i] for i in range(len(good_inputs))] == alone
    assert requests.get(f"http://{server.http}/v2/health/ready", timeout=5).status_code == 200
