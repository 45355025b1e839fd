"""One generation's deltas as an OpenAI answer: accumulated into one choice (non-streamed), or as
server-sent events (streamed), with reasoning and tool calls read out of the text in both by one
reader (output.py), so the streamed deltas add up to the non-streamed answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

from tt_backend.openai_front.output import OutputReader, Piece, Reading
from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.responses import Choice, Envelope, chat_logprobs, error_body, sse
from tt_backend.openai_front.triton_stream import Delta, TritonError

T = TypeVar("T")


async def collect(chat: bool, call: GenerateCall, first: Delta, deltas: AsyncIterator[Delta],
                  index: int = 0, reading: Reading | None = None) -> Choice:
    """The whole generation as one choice (TritonError if it fails on the way)."""
    choice = Choice(chat, index)
    reader = reading.reader() if reading is not None else None
    _take(choice, first, call, reader)
    async for delta in deltas:
        _take(choice, delta, call, reader)
    if reader is not None:
        _finish(choice, reader)
    return choice


def _take(choice: Choice, delta: Delta, call: GenerateCall, reader: OutputReader | None = None
          ) -> tuple[Piece, list[dict[str, Any]]]:
    """Add a delta to the choice (its text through the output reader, if any); return what it adds
    and its logprob entries (chat-shaped)."""
    piece = reader.feed(delta.text) if reader is not None else Piece(content=delta.text)
    _add(choice, piece)
    choice.num_completion_tokens += delta.num_tokens
    if delta.num_prompt_tokens is not None:
        choice.num_prompt_tokens = delta.num_prompt_tokens
    choice.finish_reason = delta.finish_reason or choice.finish_reason
    entries = chat_logprobs(delta.logprobs, call.logprobs or 0) if call.logprobs is not None else []
    choice.logprobs.extend(entries)
    return piece, entries


def _add(choice: Choice, piece: Piece) -> None:
    choice.text.append(piece.content)
    choice.reasoning.append(piece.reasoning)


def _finish(choice: Choice, reader: OutputReader) -> Piece:
    """The output is complete: what the reader still held, the tool calls and their finish reason."""
    piece = reader.finish()
    _add(choice, piece)
    choice.tool_calls = reader.tool_calls
    if choice.tool_calls and choice.finish_reason == "stop":
        choice.finish_reason = reader.finish_reason
    return piece


async def events(envelope: Envelope, call: GenerateCall, prefix: str, firsts: Sequence[Delta],
                 streams: Sequence[AsyncIterator[Delta]], reading: Reading | None = None
                 ) -> AsyncIterator[str]:
    """The SSE stream of a request's n choices, their chunks interleaved as they come (each with its
    `index`), each chunk with usage so far if asked (continuous_usage_stats); then the request's
    usage if asked, then [DONE]. An error mid-stream is an error event before [DONE]."""
    choices = [Choice(envelope.chat, index) for index in range(len(streams))]
    chunks = [_chunks(envelope, call, prefix, choice, first, deltas, reading)
              for choice, first, deltas in zip(choices, firsts, streams, strict=True)]
    try:
        async for index, chunk in _merge(chunks):
            if call.continuous_usage:
                chunk["usage"] = choices[index].usage()
            yield sse(chunk)
    except TritonError as exc:
        yield sse(error_body(str(exc), exc.status))
    else:
        if call.include_usage:
            yield sse(envelope.usage_chunk(choices))
    yield sse("[DONE]")


async def _chunks(envelope: Envelope, call: GenerateCall, prefix: str, choice: Choice, first: Delta,
                  deltas: AsyncIterator[Delta], reading: Reading | None) -> AsyncIterator[dict[str, Any]]:
    """One choice's chunks: one per delta (the first with the role, or the echoed prompt), the
    finish reason on the last. Read for reasoning or tools, a chunk holds what the delta made
    certain (reasoning, content, tool-call deltas), and one that holds nothing is left out."""
    reader = reading.reader() if reading is not None else None
    index = choice.index
    offset = len(prefix)  # of the next token in the choice's text (a completion's text_offset)
    delta: Delta | None = first
    while delta is not None:
        piece, entries = _take(choice, delta, call, reader)
        last = delta.finish_reason is not None
        if last and reader is not None:
            piece += _finish(choice, reader)
        text = prefix + piece.content
        if reader is None or text or piece.reasoning or piece.tool_calls or entries or delta is first or last:
            yield envelope.chunk(text, choice.finish_reason if last else None, entries, first=delta is first,
                                 tool_calls=piece.tool_calls, index=index, reasoning=piece.reasoning,
                                 text_offset=offset)
            offset += sum(len(entry["token"]) for entry in entries)
        prefix = ""
        delta = await anext(deltas, None)


async def _merge(sources: Sequence[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """(source index, item) from every source, in the order items arrive; the first error any
    source raises is raised here, and the other sources are then cancelled."""
    if len(sources) == 1:  # one choice: no task between the stream and the client
        async for item in sources[0]:
            yield 0, item
        return
    queue: asyncio.Queue[tuple[int, T] | tuple[int, None, BaseException | None]] = asyncio.Queue()

    async def pump(index: int, source: AsyncIterator[T]) -> None:
        try:
            async for item in source:
                await queue.put((index, item))
        except Exception as exc:  # noqa: BLE001 (handed to the reader, which raises it)
            await queue.put((index, None, exc))
        else:
            await queue.put((index, None, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(sources)]
    try:
        running = len(tasks)
        while running:
            got = await queue.get()
            if len(got) == 3:
                running -= 1
                if got[2] is not None:
                    raise got[2]
            else:
                yield got[0], got[1]
    finally:
        await cancel_all(tasks)


async def gather_all(works: Sequence[Awaitable[T]]) -> list[T]:
    """Every result of `works`, run at once; if one raises, the others are cancelled (and have
    ended) before the error goes on, so no Triton stream is left running."""
    tasks = [asyncio.ensure_future(w) for w in works]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        await cancel_all(tasks)


async def cancel_all(tasks: Sequence[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
