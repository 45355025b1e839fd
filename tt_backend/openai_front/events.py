"""One generation's deltas as an OpenAI answer: accumulated into one choice (non-streamed), or as
server-sent events (streamed), with tool calls read out of the text in both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.responses import Choice, Envelope, chat_logprobs, error_body, sse
from tt_backend.openai_front.tool_calls import ToolCallReader
from tt_backend.openai_front.triton_stream import Delta, TritonError


async def collect(chat: bool, call: GenerateCall, first: Delta, deltas: AsyncIterator[Delta]) -> Choice:
    """The whole generation as one choice (TritonError if it fails on the way)."""
    choice = Choice(chat)
    reader = ToolCallReader(call.tools) if call.tools is not None else None
    _take(choice, first, call, reader)
    async for delta in deltas:
        _take(choice, delta, call, reader)
    if reader is not None:
        _read_calls(choice, reader)
    return choice


def _take(choice: Choice, delta: Delta, call: GenerateCall, reader: ToolCallReader | None = None
          ) -> list[dict[str, Any]]:
    """Add a delta to the choice (its content through the tool-call reader, if any); return its
    logprob entries (chat-shaped)."""
    choice.text.append(delta.text if reader is None else reader.feed(delta.text))
    choice.num_completion_tokens += delta.num_tokens
    if delta.num_prompt_tokens is not None:
        choice.num_prompt_tokens = delta.num_prompt_tokens
    choice.finish_reason = delta.finish_reason or choice.finish_reason
    entries = chat_logprobs(delta.logprobs, call.logprobs or 0) if call.logprobs is not None else []
    choice.logprobs.extend(entries)
    return entries


def _read_calls(choice: Choice, reader: ToolCallReader) -> None:
    """The output is complete: the rest of its content, its tool calls and their finish reason."""
    rest, calls = reader.finish()
    choice.text.append(rest)
    choice.tool_calls = calls
    if calls and choice.finish_reason == "stop":
        choice.finish_reason = reader.tools.finish_reason


async def events(envelope: Envelope, call: GenerateCall, prefix: str, first: Delta,
                 deltas: AsyncIterator[Delta]) -> AsyncIterator[str]:
    """The SSE stream: one chunk per delta (the first with the role, or the echoed prompt), the
    finish reason on the last, then usage if asked, then [DONE]. With tools, content streams until
    a call may begin; the calls follow in one chunk, then the finish reason in its own. An error
    mid-stream is an error event before [DONE]."""
    choice = Choice(envelope.chat)
    reader = ToolCallReader(call.tools) if call.tools is not None else None
    delta: Delta | None = first
    try:
        while delta is not None:
            before = len(choice.text)
            entries = _take(choice, delta, call, reader)
            text = prefix + choice.text[before]
            if reader is None or delta.finish_reason is None:
                if text or reader is None or delta is first:
                    yield sse(envelope.chunk(text, delta.finish_reason, entries, first=delta is first))
            else:  # the last delta, with tools: content left, the calls, then the finish reason
                _read_calls(choice, reader)
                if text + choice.text[-1]:
                    yield sse(envelope.chunk(text + choice.text[-1], None, entries, first=delta is first))
                if choice.tool_calls:
                    yield sse(envelope.chunk("", None, tool_calls=choice.tool_calls))
                yield sse(envelope.chunk("", choice.finish_reason))
            prefix = ""
            delta = await anext(deltas, None)
    except TritonError as exc:
        yield sse(error_body(str(exc), exc.status))
    else:
        if call.include_usage:
            yield sse(envelope.usage_chunk(choice))
    yield sse("[DONE]")
