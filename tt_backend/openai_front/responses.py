"""OpenAI response objects and stream chunks, as OpenAI sends them: plain dicts, the shapes of
response_schemas.py (the tests check every one against those models)."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 404:
        kind = "not_found_error"
    elif status == 401:  # the name the openai SDK gives its exception for a 401 (AuthenticationError)
        kind = "authentication_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def sse(payload: dict[str, Any] | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


@dataclass
class Choice:
    """One generation's accumulating state: text, counts, finish reason, logprobs."""

    chat: bool
    index: int = 0
    """Its place among the request's n choices."""
    text: list[str] = field(default_factory=list)
    num_prompt_tokens: int = 0
    num_completion_tokens: int = 0
    finish_reason: str | None = None
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    """The reasoning parser's part of the text (`reasoning_content`)."""

    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.num_prompt_tokens, "completion_tokens": self.num_completion_tokens,
                "total_tokens": self.num_prompt_tokens + self.num_completion_tokens}


def usage(choices: Sequence[Choice]) -> dict[str, int]:
    """A request's usage: its prompt once (every choice has the same one), every choice's tokens."""
    prompt, completion = choices[0].num_prompt_tokens, sum(c.num_completion_tokens for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class Envelope:
    """What every object of one response shares: id, created, model, object type."""

    def __init__(self, model: str, chat: bool, request_id: str | None = None) -> None:
        """`request_id`: the client's (vLLM's field), else a new one."""
        self.model = model
        self.chat = chat
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request_id or uuid.uuid4().hex}"
        self.created = int(time.time())

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def completion(self, choices: Sequence[Choice], prefix: str = "") -> dict[str, Any]:
        return {**self._head("chat.completion" if self.chat else "text_completion"),
                "choices": [self._choice(c, prefix) for c in choices], "usage": usage(choices)}

    def _choice(self, choice: Choice, prefix: str) -> dict[str, Any]:
        text = prefix + "".join(choice.text)
        body: dict[str, Any] = {"index": choice.index, "finish_reason": choice.finish_reason}
        if self.chat:
            body["message"] = {"role": "assistant", "content": text}
            if choice.tool_calls:
                body["message"] = {"role": "assistant", "content": text or None,
                                   "tool_calls": choice.tool_calls}
            if reasoning := "".join(choice.reasoning):  # as vLLM's reasoning parsers answer
                body["message"] = {**body["message"], "content": text or None, "reasoning_content": reasoning}
            body["logprobs"] = {"content": choice.logprobs} if choice.logprobs else None
        else:
            body["text"] = text
            body["logprobs"] = _completion_logprobs(choice.logprobs, len(prefix)) if choice.logprobs else None
        return body

    def chunk(self, text: str, finish_reason: str | None, logprobs: Sequence[dict[str, Any]] = (),
              first: bool = False, tool_calls: Sequence[dict[str, Any]] = (), index: int = 0,
              reasoning: str = "", text_offset: int = 0) -> dict[str, Any]:
        """`tool_calls`: tool-call deltas, each with its call's index; `text_offset`: where this
        chunk's first token starts in the choice's text (a completion's logprobs say)."""
        body: dict[str, Any] = {"index": index, "finish_reason": finish_reason}
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
            body["delta"] = delta if (text or first) else {}
            if reasoning:
                body["delta"]["reasoning_content"] = reasoning
            if tool_calls:
                body["delta"]["tool_calls"] = list(tool_calls)
            body["logprobs"] = {"content": list(logprobs)} if logprobs else None
        else:
            body["text"] = text
            body["logprobs"] = _completion_logprobs(list(logprobs), text_offset) if logprobs else None
        return {**self._head("chat.completion.chunk" if self.chat else "text_completion"), "choices": [body]}

    def usage_chunk(self, choices: Sequence[Choice]) -> dict[str, Any]:
        return {**self._head("chat.completion.chunk" if self.chat else "text_completion"), "choices": [],
                "usage": usage(choices)}


def chat_logprobs(positions: Sequence[dict[str, Any]], top: int) -> list[dict[str, Any]]:
    """tt_llm's logprobs (per token: {id: {logprob, rank, decoded_token}}, sampled first) as
    OpenAI's chat `logprobs.content` entries."""
    out = []
    for position in positions:
        entries = list(position.values())
        alternatives = sorted(entries, key=lambda e: e["rank"])[:top]
        out.append({**_entry(entries[0]), "top_logprobs": [_entry(e) for e in alternatives]})
    return out


def _entry(entry: dict[str, Any]) -> dict[str, Any]:
    token = entry["decoded_token"]
    return {"token": token, "logprob": entry["logprob"], "bytes": list(token.encode("utf-8"))}


def _completion_logprobs(content: list[dict[str, Any]], start: int) -> dict[str, Any]:
    """The legacy completions shape, from chat-shaped entries; `start`: the first token's offset in
    the choice's text (after an echoed prompt), each next one after the tokens before it."""
    offsets = list(itertools.accumulate((len(c["token"]) for c in content[:-1]), initial=start))
    return {"tokens": [c["token"] for c in content], "token_logprobs": [c["logprob"] for c in content],
            "top_logprobs": [{t["token"]: t["logprob"] for t in c["top_logprobs"]} for c in content],
            "text_offset": offsets if content else []}
