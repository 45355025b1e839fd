"""The property every fuzz request must have, judged from what came back: exactly one final
response (or one HTTP response), which is a valid result or a client error naming the problem.

A client error names the problem when its message (or OpenAI `param`) names one of the fields the
request made hostile, or what that field stands for (a TRT-LLM tensor's vLLM name, the prompt).
Never acceptable: the engine's own failures ('step failed', 'engine failed'), Triton's wrapper
of an exception the model did not catch ('Failed to process the request'), an exception class
name, a 5xx from the front, a stream without a final response or with two."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from tests.fuzz.json_text import VOCAB
from tests.fuzz.request import BODY, FuzzRequest, cut
from tests.fuzz.send import Event

Verdict = Literal["ok", "refused", "violation"]
SERVER_FAULTS = ("step failed", "engine failed", "failed to process the request", "stub process",
                 "not healthy", "socket closed", "connection reset", "unavailable", "deadline exceeded",
                 "traceback", "request failed", "shutting down", "at capacity", "internal error",
                 "model instance", "without output", "no longer in valid state", "failed to connect",
                 "unknown model", "no available versions")
EXCEPTION_NAME = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b")
ALIASES: dict[str, tuple[str, ...]] = {
    "min_length": ("min_tokens",), "stop_words": ("stop",), "end_id": ("stop_token_ids",),
    "guided_decoding_guide": ("structured_outputs", "guided_decoding"),
    "guided_decoding_guide_type": ("structured_outputs", "guided_decoding"),
    "guided_decoding": ("structured_outputs",), "structured_outputs": ("guided_decoding",),
    "text_input": ("prompt", "max_model_len"), "input_ids": ("prompt", "max_model_len", "vocabulary"),
    "messages": ("prompt", "max_model_len", "chat template"), "prompt": ("max_model_len", "input_ids"),
    "max_completion_tokens": ("max_tokens", "max_model_len"), "max_tokens": ("max_model_len",),
    "min_tokens": ("max_tokens",), "top_logprobs": ("logprobs",), "logprobs": ("top_logprobs",),
    "response_format": ("structured_outputs",), "tools": ("structured_outputs", "tool"),
    "tool_choice": ("structured_outputs", "tool"), "sampling_parameters": ("JSON",),
    "return_logprobs": ("logprobs",), "return_log_probs": ("logprobs",),
    # Token restrictions that leave a grammar no token to take: the grammar reports it.
    "allowed_token_ids": ("structured_outputs",), "bad_words": ("structured_outputs",),
    "logit_bias": ("structured_outputs",),
}
FINISH_REASONS = (None, "stop", "length", "tool_calls")
PARSE_PROBLEMS = ("nests too deeply", "not valid json", "not valid unicode", "lone surrogate",
                  "too long to parse", "bytes) exceeds")
"""Errors of a JSON parser, which cannot know the field whose value broke it: they name the problem.
The last is the front's body cap (--max-body-bytes, a 413): a body over it is refused unread, whichever
field made it that long (a hostile `echo` of 400,000 escaped emoji did)."""


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    kind: str = ""
    """For a violation: what went wrong, in a few words (the report groups by it)."""
    detail: str = ""


OK = Judgement("ok")


def server_fault(message: str) -> str | None:
    """Why `message` is not a client error (None: it may be one)."""
    low = message.lower()
    for fault in SERVER_FAULTS:
        if fault in low:
            return f"server fault ({fault!r})"
    name = EXCEPTION_NAME.search(message)
    if name is not None:
        return f"exception class in the error ({name.group(0)})"
    return None


def names_hostile(request: FuzzRequest, *texts: str | None) -> bool:
    """Whether the texts name a hostile field: as sent, as repr() writes it (an error quoting a
    field with a control character escapes it), up to a NUL (where Triton's C strings end it), or
    by an alias; '' for an empty field name."""
    said = " ".join(t for t in texts if t).lower()
    if BODY in request.hostile or "content-type" in request.hostile or any(p in said for p in PARSE_PROBLEMS):
        return True
    names = {n for name in request.hostile
             for n in (name, repr(name)[1:-1], name.split("\0")[0], *ALIASES.get(name, ()))}
    return any((n or "''").lower() in said for n in names)


def judge_error(request: FuzzRequest, message: str, param: str | None = None) -> Judgement:
    fault = server_fault(message)
    if fault is not None:
        return Judgement("violation", fault, message)
    if request.valid:
        return Judgement("violation", "valid request refused", message)
    if not names_hostile(request, message, param):
        return Judgement("violation", "error names no hostile field", message)
    return Judgement("refused", "", message)


# ---- gRPC -------------------------------------------------------------------------------------
def judge_grpc(request: FuzzRequest, events: list[Event], timed_out: bool) -> Judgement:
    """`events`: every response the stream carried until the server closed it."""
    ends = [i for i, e in enumerate(events) if e.ends]
    if not ends:
        return Judgement("violation", "stuck: no final response" if timed_out else "no final response",
                         f"{len(events)} responses")
    if len(ends) > 1 or ends[0] != len(events) - 1:
        seen = [e.error or ("final" if e.final else "response") for e in events]
        return Judgement("violation", "responses after the final one", cut(repr(seen), 300))
    last = events[-1]
    if last.error is not None:
        return judge_error(request, last.error)
    outputs = [e.outputs for e in events if e.outputs]
    if not outputs:
        return Judgement("violation", "bad result: no outputs", "")
    for out in outputs:
        problem = _bad_outputs(out)
        if problem:
            return Judgement("violation", "bad result", problem)
    ids = [int(t) for out in outputs if "output_ids" in out for t in out["output_ids"].reshape(-1)]
    if request.max_tokens is not None and ids:  # a valid request: its flags are plain
        echoed = not (request.flag("stream") or request.flag("exclude_input_in_output"))
        new = len(ids) - (request.tensor("input_ids").size if echoed else 0)
        if new > request.max_tokens:
            return Judgement("violation", "bad result: more tokens than max_tokens", f"{new} tokens")
    return OK


def _bad_outputs(out: dict[str, Any]) -> str:
    for name in ("text_output", "finish_reason", "logprobs"):
        if name in out:
            for value in out[name].reshape(-1):
                try:
                    bytes(value).decode("utf-8")
                except UnicodeDecodeError:
                    return f"{name} is not UTF-8: {bytes(value)[:60]!r}"
    if "output_ids" in out and any(not 0 <= int(t) < VOCAB for t in out["output_ids"].reshape(-1)):
        return f"output_ids outside the vocabulary: {out['output_ids'][:8]}"
    return ""


# ---- HTTP (the OpenAI front) -------------------------------------------------------------------
def judge_http(request: FuzzRequest, status: int, content_type: str, body: bytes) -> Judgement:
    if status == 0:
        return Judgement("violation", "stuck: no HTTP response", "")
    if status >= 500:
        return Judgement("violation", f"HTTP {status}", body.decode("utf-8", "replace")[:300])
    if status != 200:
        try:
            error = json.loads(body)["error"]
            message, param = error["message"], error.get("param")
            assert isinstance(message, str) and message and isinstance(error["type"], str)
        except (ValueError, KeyError, TypeError, AssertionError):
            return Judgement("violation", f"HTTP {status} without OpenAI's error shape", body[:300].decode(
                "utf-8", "replace"))
        return judge_error(request, message, param if isinstance(param, str) else None)
    try:
        problem = _bad_stream(request, body) if content_type.startswith("text/event-stream") else \
            _bad_completion(request, json.loads(body))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        problem = f"unreadable: {exc!r}: {body[:200]!r}"
    if problem.startswith("error event: "):
        return Judgement("violation", "error in a 200 stream", problem)
    return Judgement("violation", "bad result", problem) if problem else OK


def _choices(request: FuzzRequest) -> int:
    """The choices a served request asked for (`n`; the front serves up to --max-n of them)."""
    try:
        n = json.loads(request.body).get("n", 1)
    except (ValueError, AttributeError):
        return 1
    return n if isinstance(n, int) and not isinstance(n, bool) else 1


def _bad_completion(request: FuzzRequest, reply: dict[str, Any]) -> str:
    n = _choices(request)
    choices = reply["choices"]
    if sorted(c["index"] for c in choices) != list(range(n)) or any(
            c["finish_reason"] not in FINISH_REASONS[1:] for c in choices):
        return f"choices {choices!r:.200}"
    for choice in choices:
        text = choice["message"]["content"] if request.target == "chat" else choice["text"]
        if not isinstance(text, str | None):
            return f"content {text!r:.100}"
    used = reply["usage"]["completion_tokens"]
    if request.max_tokens is not None and used > request.max_tokens * n:
        return f"{used} completion tokens for max_tokens={request.max_tokens} x n={n}"
    return ""


def _bad_stream(request: FuzzRequest, body: bytes) -> str:
    events = [line[len(b"data: "):] for line in body.split(b"\n") if line.startswith(b"data: ")]
    if not events or events[-1] != b"[DONE]" or events.count(b"[DONE]") != 1:
        return f"not one [DONE] at the end: {events[-2:]!r:.200}"
    finishes = 0
    for raw in events[:-1]:
        event = json.loads(raw)
        if "error" in event:
            return f"error event: {event['error'].get('message')!r:.300}"
        for choice in event["choices"]:
            if choice.get("finish_reason") not in FINISH_REASONS:
                return f"finish_reason {choice.get('finish_reason')!r}"
            finishes += choice.get("finish_reason") is not None
    if finishes != _choices(request):
        return f"{finishes} chunks with a finish_reason for n={_choices(request)}"
    return ""
