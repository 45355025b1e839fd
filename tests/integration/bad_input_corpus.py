"""The bad-input corpus: requests that must each end with one clear error naming the problem, for
`tt_llm` and the ensemble over gRPC (TRITON_CASES) and for the OpenAI front (FRONT_CASES). The
integration tests (test_bad_inputs.py) and `bench/reliability.py` run it, with good requests
streaming alongside."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import requests

from tests.integration.clients import grpc_stream, s


def sp(value: Any) -> np.ndarray:
    return s(value if isinstance(value, str) else json.dumps(value))


TEXT = s("Hello")


def text_with(params: Any) -> dict[str, np.ndarray]:
    """A valid prompt with the given sampling_parameters (a dict, or raw JSON text)."""
    return {"text_input": TEXT, "sampling_parameters": sp(params)}


IDS = np.array([1, 2, 3], dtype=np.int32)


def i32(value: int) -> np.ndarray:
    return np.array([value], dtype=np.int32)


def f32(value: float) -> np.ndarray:
    return np.array([value], dtype=np.float32)


# (kind, model, input tensors, text the error must contain)
TRITON_CASES: list[tuple[str, str, dict[str, np.ndarray], str]] = [
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
     "temperature must be a finite number, got nan"),
    ("temperature word", "tt_llm", text_with({"temperature": "hot"}),
     "temperature must be a number, got 'hot'"),
    ("top_p above 1", "tt_llm", text_with({"top_p": 1.5}),
     "top_p must be in (0, 1], got 1.5"),
    ("top_p zero", "tt_llm", text_with({"top_p": 0}),
     "top_p must be in (0, 1], got 0.0"),
    ("top_k negative", "tt_llm", text_with({"top_k": -3}),
     "top_k must be -1, 0 (disabled) or in [1, 2147483647], got -3"),
    ("seed negative", "tt_llm", text_with({"seed": -1}),
     "seed must be in [0, 2**64), got -1"),
    ("seed huge", "tt_llm", text_with({"seed": 2**70}),
     "seed must be an integer within 64 bits, got an integer of 71 bits"),
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
    # deeper checks of the same schemas
    ("deeply nested JSON", "tt_llm", text_with('{"a":' * 100000 + "1" + "}" * 100000),
     "sampling_parameters nests too deeply to parse (JSON)"),
    ("temperature Infinity", "tt_llm", text_with('{"temperature": Infinity}'),
     "temperature must be a finite number, got inf"),
    ("top_p NaN literal", "tt_llm", text_with('{"top_p": NaN}'), "top_p must be a finite number, got nan"),
    ("max_tokens float", "tt_llm", text_with({"max_tokens": 3.5}), "max_tokens must be an integer, got 3.5"),
    ("max_tokens boolean", "tt_llm", text_with({"max_tokens": True}),
     "max_tokens must be an integer, got True"),
    ("stop list of numbers", "tt_llm", text_with({"stop": [1, 2]}),
     "stop must be a string or a list of strings, got [1, 2]"),
    ("bad_words number", "tt_llm", text_with({"bad_words": 7}),
     "bad_words must be a string or a list of strings, got 7"),
    ("logit_bias NaN", "tt_llm", text_with('{"logit_bias": {"5": NaN}}'),
     "logit_bias must be a finite number, got nan"),
    ("min_p above 1", "tt_llm", text_with({"min_p": 1.5}), "min_p must be in [0, 1], got 1.5"),
    ("presence_penalty out of range", "tt_llm", text_with({"presence_penalty": 5}),
     "presence_penalty must be in [-2, 2], got 5.0"),
    ("allowed_token_ids empty", "tt_llm", text_with({"allowed_token_ids": []}),
     "allowed_token_ids must be a non-empty list of token ids, got []"),
    ("two structured outputs", "tt_llm", text_with({"structured_outputs": {"regex": "a", "choice": ["b"]}}),
     "structured_outputs must set exactly one of json, regex, choice, grammar, json_object, structural_tag"),
    ("invalid JSON schema", "tt_llm", text_with({"structured_outputs": {"json": {"type": "nonsense"}}}),
     "structured_outputs.json is invalid"),
    ("invalid regex", "tt_llm", text_with({"structured_outputs": {"regex": "(("}}),
     "structured_outputs.regex is invalid"),
    ("10 MB prompt", "tt_llm", {"text_input": s("word " * (2 << 20))},
     "text_input is 10485760 bytes: more than a prompt of max_model_len=8192 tokens can hold"),
    ("empty input_ids", "tt_llm", {"input_ids": np.array([], dtype=np.int32)},
     "the prompt is empty (0 tokens)"),
    ("input_ids as FP32", "tt_llm", {"input_ids": np.array([1.0, 2.0], dtype=np.float32)},
     "inference input 'input_ids' data-type is 'FP32', but model 'tt_llm' expects 'INT32'"),
    ("input_ids beyond max_model_len", "tt_llm", {"input_ids": np.ones(9000, dtype=np.int32)},
     "the prompt (9000 tokens) plus max_tokens (16) exceeds max_model_len (8192)"),
    ("unknown guide type", "tt_llm", {"input_ids": IDS, "max_tokens": i32(3), "guided_decoding_guide": s("x"),
                                      "guided_decoding_guide_type": s("xml")},
     "guided_decoding_guide_type must be one of json, json_schema, regex, ebnf_grammar, structural_tag, "
     "got 'xml'"),
    ("guide without its type", "tt_llm",
     {"input_ids": IDS, "max_tokens": i32(3), "guided_decoding_guide": s("x")},
     "guided_decoding_guide_type must be one of"),
    ("guide schema not JSON", "tt_llm", {"input_ids": IDS, "max_tokens": i32(3),
                                         "guided_decoding_guide_type": s("json_schema"),
                                         "guided_decoding_guide": s("{nope")},
     "structured_outputs.json is not valid JSON"),
    ("TRT top_k negative", "tt_llm", {"input_ids": IDS, "max_tokens": i32(3), "top_k": i32(-2)},
     "top_k must be -1, 0 (disabled) or in [1, 2147483647], got -2"),
    ("TRT temperature NaN", "tt_llm", {"input_ids": IDS, "max_tokens": i32(3), "top_k": i32(5),
                                       "temperature": f32(float("nan"))},
     "temperature must be a finite number, got nan"),
    ("TRT temperature infinite", "tt_llm", {"input_ids": IDS, "max_tokens": i32(3), "top_k": i32(5),
                                            "temperature": f32(float("inf"))},
     "temperature must be a finite number, got inf"),
    ("TRT max_tokens INT32 max", "tt_llm", {"input_ids": IDS, "max_tokens": i32(2**31 - 1)},
     "plus max_tokens (2147483647) exceeds max_model_len (8192)"),
    ("TRT stop_words invalid UTF-8", "tt_llm", {"input_ids": IDS, "max_tokens": i32(3),
                                                "stop_words": np.array([b"\xff"], dtype=np.object_)},
     "input stop_words is not valid UTF-8"),
    ("flag as INT32", "tt_llm", {"text_input": TEXT, "return_logprobs": i32(1)},
     "inference input 'return_logprobs' data-type is 'INT32', but model 'tt_llm' expects 'BOOL'"),
    ("scalar tensor of two values", "tt_llm",
     {"input_ids": IDS, "max_tokens": np.array([3, 4], dtype=np.int32)},
     "unexpected shape for input 'max_tokens' for model 'tt_llm'. Expected [1], got [2]"),
    ("ensemble empty text", "ensemble", {"text_input": s(""), "max_tokens": i32(4)},
     "in ensemble 'ensemble', the prompt is empty (0 tokens)"),
    ("ensemble invalid UTF-8", "ensemble", {"text_input": np.array([b"\xff\xfe"], dtype=np.object_),
                                            "max_tokens": i32(4)},
     "in ensemble 'ensemble', input text_input is not valid UTF-8"),
    ("ensemble temperature NaN", "ensemble", {"text_input": TEXT, "max_tokens": i32(4), "top_k": i32(5),
                                              "temperature": f32(float("nan"))},
     "temperature must be a finite number, got nan"),
    ("ensemble top_k negative", "ensemble", {"text_input": TEXT, "max_tokens": i32(4), "top_k": i32(-3)},
     "top_k must be -1, 0 (disabled) or in [1, 2147483647], got -3"),
    ("ensemble max_tokens huge", "ensemble", {"text_input": TEXT, "max_tokens": i32(10**9)},
     "plus max_tokens (1000000000) exceeds max_model_len (8192)"),
    ("ensemble unknown tensor", "ensemble", {"text_input": TEXT, "max_tokens": i32(4), "bogus": i32(1)},
     "unexpected inference input 'bogus' for model 'ensemble'"),
    ("ensemble max_tokens as FP32", "ensemble", {"text_input": TEXT, "max_tokens": f32(4.0)},
     "inference input 'max_tokens' data-type is 'FP32', but model 'ensemble' expects 'INT32'"),
    ("ensemble 10 MB prompt", "ensemble", {"text_input": s("word " * (2 << 20)), "max_tokens": i32(4)},
     "text_input is 10485760 bytes: more than a prompt of max_model_len=8192 tokens can hold"),
    ("ensemble stop_words invalid UTF-8", "ensemble",
     {"text_input": TEXT, "max_tokens": i32(4), "stop_words": np.array([b"\xff"], dtype=np.object_)},
     "input stop_words is not valid UTF-8"),
]


@dataclass(frozen=True)
class FrontCase:
    kind: str
    route: str
    """chat or completions."""
    body: dict[str, Any] | bytes
    """Sent as JSON (a "model" of MODEL becomes the served model's name), or raw bytes as they are."""
    status: int
    message: str
    """Text the error message must contain."""
    param: str | None
    """The field the error's `param` must name."""


MODEL = "<served model>"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
PROMPT = {"model": MODEL, "prompt": "Hi"}


def chat(kind: str, change: dict[str, Any], message: str, param: str | None, status: int = 400) -> FrontCase:
    return FrontCase(kind, "chat", {**CHAT, **change}, status, message, param)


def completion(kind: str, change: dict[str, Any], message: str, param: str | None,
               status: int = 400) -> FrontCase:
    return FrontCase(kind, "completions", {**PROMPT, **change}, status, message, param)


FRONT_CASES: list[FrontCase] = [
    FrontCase("front: malformed JSON", "chat", b"{not json", 400, "the request body is not valid JSON", None),
    FrontCase("front: JSON array body", "chat", b"[1, 2]", 400, "the request body must be a JSON object",
              None),
    FrontCase("front: invalid UTF-8 body", "chat", b'{"model": "\xff"}', 400,
              "the request body is not valid JSON ('utf-8' codec can't decode byte 0xff", None),
    FrontCase("front: deeply nested JSON", "chat", b'{"a":' * 100000 + b"1" + b"}" * 100000, 400,
              "the request body nests too deeply to parse (JSON)", None),
    FrontCase("front: 10 MB body", "completions", b'{"prompt": "' + b"word " * (2 << 20) + b'"}', 413,
              "exceeds 4194304 bytes", None),
    chat("front: no model", {"model": None}, "the model None does not exist", "model", status=404),
    chat("front: unknown model", {"model": "gpt-9"}, "the model 'gpt-9' does not exist", "model", status=404),
    chat("front: empty messages", {"messages": []}, "messages: List should have at least 1 item", "messages"),
    chat("front: message without role", {"messages": [{"content": "x"}]},
         "messages[0].role: Field required", "messages[0].role"),
    chat("front: content a number", {"messages": [{"role": "user", "content": 5}]},
         "messages[0].content: must be a string or a list of content parts", "messages[0].content"),
    chat("front: max_tokens negative", {"max_tokens": -1}, "max_tokens must be >= 1, got -1", "max_tokens"),
    chat("front: max_tokens beyond max_model_len", {"max_tokens": 10**9},
         "plus max_tokens (1000000000) exceeds max_model_len (8192)", None),
    chat("front: temperature NaN", {"temperature": float("nan")},
         "temperature must be a finite number, got nan", "temperature"),
    chat("front: temperature infinite", {"temperature": float("inf")},
         "temperature must be a finite number, got inf", "temperature"),
    chat("front: top_p above 1", {"top_p": 2}, "top_p must be in (0, 1], got 2.0", "top_p"),
    chat("front: n zero", {"n": 0}, "n: Input should be greater than or equal to 1, got 0", "n"),
    chat("front: n above --max-n", {"n": 129}, "n must be at most 128 (the front's --max-n), got 129", "n"),
    chat("front: top_logprobs above 20", {"logprobs": True, "top_logprobs": 50},
         "top_logprobs must be in [0, 20], got 50", "top_logprobs"),
    chat("front: stop list of numbers", {"stop": [1, 2]},
         "stop: must be a string or a list of strings, got [1, 2]", "stop"),
    chat("front: seed beyond int64", {"seed": 2**63},
         "seed: Input should be less than or equal to 9223372036854775807, got 9223372036854775808", "seed"),
    chat("front: logit_bias outside the vocabulary", {"logit_bias": {"99999": 1}},
         "logit_bias holds 99999, outside the vocabulary [0, 49152)", None),
    chat("front: unknown response_format", {"response_format": {"type": "xml"}},
         "response_format.type: Input should be 'text', 'json_object' or 'json_schema', got 'xml'",
         "response_format.type"),
    chat("front: json_schema without a schema",
         {"response_format": {"type": "json_schema", "json_schema": 5}},
         "response_format.json_schema: Input should be a valid dictionary",
         "response_format.json_schema"),
    chat("front: tools not a list", {"tools": {"a": 1}}, "tools: Input should be a valid list, got {'a': 1}",
         "tools"),
    chat("front: tool_choice names an unknown tool",
         {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}},
         "tool_choice.function.name: 'g' is not in tools (['f'])", "tool_choice.function.name"),
    chat("front: stream not a boolean", {"stream": "yes"},
         "stream: Input should be a valid boolean, got 'yes'", "stream"),
    chat("front: beam search", {"use_beam_search": True},
         "use_beam_search=true is not supported (only its default, false): no beam search",
         "use_beam_search"),
    chat("front: max_tokens and max_completion_tokens disagree",
         {"max_tokens": 3, "max_completion_tokens": 4},
         "max_completion_tokens (4) and max_tokens (3) disagree", "max_tokens"),
    completion("front: prompt beyond max_model_len", {"prompt": "word " * 9000},
               "the prompt (9001 tokens) plus max_tokens (16) exceeds max_model_len (8192)", None),
    completion("front: no prompt", {"prompt": None},
               "prompt must be a string or a non-empty list of token ids", "prompt"),
    completion("front: two prompts", {"prompt": ["a", "b"]},
               "prompt holds 2 prompts; send one prompt per request", "prompt"),
    completion("front: prompt ids outside the vocabulary", {"prompt": [1, 99999]},
               "input_ids hold 99999, outside the vocabulary [0, 49152)", None),
    completion("front: suffix", {"suffix": "x"}, "suffix (insertion) is not supported", "suffix"),
    completion("front: echo not a boolean", {"echo": "x"}, "echo: Input should be a valid boolean, got 'x'",
               "echo"),
    completion("front: two structured outputs", {"structured_outputs": {"regex": "a", "choice": ["b"]}},
               "structured_outputs must set exactly one of", "structured_outputs"),
    completion("front: ignore_eos a string", {"ignore_eos": "no"},
               "ignore_eos: Input should be a valid boolean, got 'no'", "ignore_eos"),
]


def triton_problem(grpc_url: str, case: tuple[str, str, dict[str, np.ndarray], str]) -> str | None:
    """What is wrong with the server's answer to one Triton case (None: the expected error)."""
    kind, model, tensors, message = case
    if model == "ensemble":  # written as one prompt's tensors; the ensemble takes TRT-LLM's batch of one
        tensors = {name: value[None] for name, value in tensors.items()}
    result = grpc_stream(grpc_url, model, tensors, timeout=120)
    if result.error is None or message not in result.error:
        return (f"{kind}: expected an error containing {message!r}, got {result.error!r} "
                f"({len(result.responses)} responses)")
    return None


def front_problem(front_url: str, served_model: str, case: FrontCase) -> str | None:
    """`front_url`: http://host:port/v1. What is wrong with the front's answer (None: as expected)."""
    url = f"{front_url}/{'chat/completions' if case.route == 'chat' else 'completions'}"
    if isinstance(case.body, bytes):
        reply = requests.post(url, data=case.body, headers={"content-type": "application/json"}, timeout=120)
    else:
        body = {k: served_model if v == MODEL else v for k, v in case.body.items()}
        reply = requests.post(url, data=json.dumps(body), headers={"content-type": "application/json"},
                              timeout=120)
    try:
        error = reply.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"{case.kind}: HTTP {reply.status_code} without an error object: {reply.text[:200]!r}"
    got = (reply.status_code, error.get("param"))
    if got != (case.status, case.param) or case.message not in error.get("message", ""):
        return (f"{case.kind}: expected HTTP {case.status} naming {case.param!r} with {case.message!r}, got "
                f"HTTP {got[0]} naming {got[1]!r} with {error.get('message')!r}")
    return None
