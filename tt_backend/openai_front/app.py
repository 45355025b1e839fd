"""The FastAPI application: routes, error shapes, streaming.

FastAPI (over Starlette and uvicorn) because it is the stack vLLM's OpenAI server uses and is well
kept; a client that disconnects cancels the response's generator, which cancels its Triton stream.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import tritonclient.grpc.aio as grpcclient
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tt_backend.openai_front.errors import BadRequest
from tt_backend.openai_front.requests import GenerateCall, Render, chat_call, completion_call
from tt_backend.openai_front.responses import Choice, Envelope, chat_logprobs, error_body, sse
from tt_backend.openai_front.tool_calls import ToolCallReader
from tt_backend.openai_front.triton_stream import Delta, TritonError, stream


@dataclass(frozen=True)
class FrontConfig:
    triton_url: str
    served_model: str
    """The name clients send as `model` (and /v1/models lists)."""
    max_model_len: int
    triton_model: str = "tt_llm"
    max_body_bytes: int = 4 << 20


def _error(message: str, status: int, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, status, param), status_code=status)


def create_app(config: FrontConfig, render_chat: Render, decode: Callable[[tuple[int, ...]], str],
               encode: Callable[[str], list[int]] | None = None) -> FastAPI:
    """`render_chat`: messages and tools → prompt token ids through the model's chat template;
    `decode`: token ids → text (to echo a completion prompt sent as ids); `encode`: a completion
    prompt's text → token ids (for /tokenize; without it /tokenize takes chat messages only)."""
    clients: dict[str, grpcclient.InferenceServerClient] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        clients["triton"] = grpcclient.InferenceServerClient(config.triton_url)
        yield
        await clients["triton"].close()

    app = FastAPI(title="tt_backend OpenAI front", lifespan=lifespan)

    async def body_of(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > config.max_body_bytes:  # refused before it is read
            raise BadRequest(f"the request body ({declared} bytes) exceeds {config.max_body_bytes} bytes")
        raw = await request.body()
        if len(raw) > config.max_body_bytes:
            raise BadRequest(f"the request body ({len(raw)} bytes) exceeds {config.max_body_bytes} bytes")
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequest(f"the request body is not valid JSON ({exc})") from None
        except RecursionError:
            raise BadRequest("the request body nests too deeply to parse (JSON)") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        model = body.get("model")
        if model != config.served_model:
            raise LookupError(f"the model {model!r} does not exist; this server serves "
                              f"{config.served_model!r}")
        return body

    @app.get("/health")
    async def health() -> Response:
        client = clients["triton"]
        try:
            ready = await client.is_server_ready() and await client.is_model_ready(config.triton_model)
        except Exception:  # noqa: BLE001 (Triton not reachable: not ready)
            ready = False
        return Response(status_code=200 if ready else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": config.served_model, "object": "model", "created": 0,
                                            "owned_by": "tt_backend", "max_model_len": config.max_model_len}]}

    async def generate(request: Request, chat: bool) -> Response:
        try:
            body = await body_of(request)
            if chat:
                call = chat_call(body, render_chat)
                if "max_tokens" not in call.sampling:  # what the context has left
                    left = config.max_model_len - len(call.prompt)
                    call = dataclasses.replace(call, sampling={**call.sampling, "max_tokens": max(left, 1)})
            else:
                call = completion_call(body)
        except BadRequest as exc:
            return _error(str(exc), 400, exc.param)
        except LookupError as exc:
            return _error(str(exc), 404, "model")
        deltas = stream(clients["triton"], config.triton_model, call).__aiter__()
        envelope = Envelope(config.served_model, chat)
        try:
            first = await deltas.__anext__()  # a refusal is still an HTTP error, not a stream event
        except TritonError as exc:
            return _error(str(exc), exc.status)
        except StopAsyncIteration:
            return _error("the server ended the request without output", 500)
        if call.stream:
            return StreamingResponse(_events(envelope, call, echo_text(call), first, deltas),
                                     media_type="text/event-stream")
        choice = Choice(chat)
        reader = ToolCallReader(call.tools) if call.tools is not None else None
        try:
            _take(choice, first, call, reader)
            async for delta in deltas:
                _take(choice, delta, call, reader)
        except TritonError as exc:
            return _error(str(exc), exc.status)
        if reader is not None:
            _read_calls(choice, reader)
        return JSONResponse(envelope.completion(choice, echo_text(call)))

    def echo_text(call: GenerateCall) -> str:
        if not call.echo:
            return ""
        return call.prompt if isinstance(call.prompt, str) else decode(call.prompt)

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        """vLLM's /tokenize: the ids a chat (`messages`) or completion (`prompt`) request would
        send. vLLM's router asks for them to route on token prefixes."""
        try:
            body = await body_of(request)
            if isinstance(body.get("messages"), list):
                tools = body.get("tools") if isinstance(body.get("tools"), list) else None
                ids = render_chat(body["messages"], tools)
            elif isinstance(body.get("prompt"), str) and encode is not None:
                ids = encode(body["prompt"])
            else:
                raise BadRequest("tokenize expects `messages` (a list) or `prompt` (a string)", "messages")
        except BadRequest as exc:
            return _error(str(exc), 400, exc.param)
        except LookupError as exc:
            return _error(str(exc), 404, "model")
        except (TypeError, ValueError, KeyError) as exc:  # messages the chat template cannot render
            return _error(f"cannot render the messages: {exc}", 400, "messages")
        return JSONResponse({"count": len(ids), "max_model_len": config.max_model_len, "tokens": ids,
                             "token_strs": None})

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    return app


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


async def _events(envelope: Envelope, call: GenerateCall, prefix: str, first: Delta,
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
