"""The FastAPI application: routes, error shapes, streaming.

FastAPI (over Starlette and uvicorn) because it is the stack vLLM's OpenAI server uses and is well
kept. A client that disconnects cancels its Triton stream, so the engine aborts the request: a
streamed response's generator is cancelled by Starlette; a non-streamed request races its
generation against the client's disconnect (`_unless_disconnected`). Chat templating and
tokenizing run on a small thread pool, off the event loop that serves every other stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import tritonclient.grpc.aio as grpcclient
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tt_backend.openai_front import openapi
from tt_backend.openai_front import response_schemas as out
from tt_backend.openai_front.access import ApiKeyCheck, CorsPolicy, resolve_api_key
from tt_backend.openai_front.body import BodyLimits, parse, read_body
from tt_backend.openai_front.chat_messages import ImagePolicy
from tt_backend.openai_front.chat_template import Render
from tt_backend.openai_front.errors import BadRequest, RequestError
from tt_backend.openai_front.events import collect, events, gather_all
from tt_backend.openai_front.hosts import AllowedHosts, HostCheck
from tt_backend.openai_front.metrics import PROMETHEUS_TEXT, MetricsUnavailable, TritonMetrics, check_url
from tt_backend.openai_front.output import OutputParsing
from tt_backend.openai_front.requests import (
    GenerateCall,
    RequestPolicy,
    chat_call,
    chat_prompt,
    completion_call,
)
from tt_backend.openai_front.responses import Envelope, error_body
from tt_backend.openai_front.schemas import ChatCompletionRequest, ChatTemplateFields, CompletionRequest
from tt_backend.openai_front.triton_stream import TritonError, stream
from tt_backend.openai_front.unknown_fields import UnknownFields

T = TypeVar("T")


@dataclass(frozen=True)
class FrontConfig:
    triton_url: str
    served_model: str
    """The name clients send as `model` (and /v1/models lists)."""
    max_model_len: int
    triton_model: str = "tt_llm"
    max_body_bytes: int = 4 << 20
    body_timeout_s: float = 30.0
    """How long a request body may take to arrive once its headers are in (408 after)."""
    allowed_hosts: AllowedHosts | None = None
    """The Host headers answered (None: any); see hosts.py."""
    tokenizer_threads: int = 2
    """Threads that run chat templates and tokenizers (they hold the GIL for most of it, so more
    threads than this buys little on a small machine)."""
    api_key: str | None = field(default=None, repr=False)
    """The key every request but /health and /metrics must send as `Authorization: Bearer` (None:
    none needed); see access.py. Out of repr, so no log or traceback of the config shows it."""
    cors: CorsPolicy | None = None
    """CORS headers for browser pages of other origins (None: none sent)."""
    triton_metrics_url: str = "http://127.0.0.1:8002/metrics"
    """tritonserver's Prometheus endpoint, which /metrics passes through."""
    metrics_timeout_s: float = 3.0
    """Seconds one /metrics scrape may take end to end (503 after), well inside Prometheus' 10 s."""
    strict_fields: bool = False
    """Refuse a request field the front does not know (400 naming it); else it is logged, once per
    name, and ignored, as vLLM does."""
    trust_request_chat_template: bool = False
    """Let a request bring its own `chat_template` (vLLM's --trust-request-chat-template)."""
    max_n: int = RequestPolicy.max_n
    """The most choices (`n`) one request may ask for."""
    output: OutputParsing = field(default_factory=OutputParsing)  # --tool-call-parser, --reasoning-parser
    images: ImagePolicy = field(default_factory=ImagePolicy)  # --limit-mm-per-prompt, ... (chat_messages.py)

    def __post_init__(self) -> None:
        if self.tokenizer_threads < 1:
            raise ValueError(f"tokenizer_threads must be >= 1, got {self.tokenizer_threads}")
        if self.api_key is not None:
            resolve_api_key(self.api_key, {})  # raises on a key no client could send
        check_url(self.triton_metrics_url)
        if not self.metrics_timeout_s > 0:
            raise ValueError(f"metrics_timeout_s must be > 0, got {self.metrics_timeout_s}")
        BodyLimits(self.max_body_bytes, self.body_timeout_s)  # raises on a bad limit
        RequestPolicy(max_n=self.max_n)  # raises on a bad max_n

    @property
    def body_limits(self) -> BodyLimits:
        return BodyLimits(self.max_body_bytes, self.body_timeout_s)


class ClientGone(Exception):
    """The client hung up before its answer was ready."""


def _error(message: str, status: int, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, status, param), status_code=status)


def create_app(config: FrontConfig, render_chat: Render, decode: Callable[[tuple[int, ...]], str],
               encode: Callable[[str], list[int]] | None = None) -> FastAPI:
    """`render_chat`: messages and tools → prompt token ids through the model's chat template;
    `decode`: token ids → text (to echo a completion prompt sent as ids); `encode`: a completion
    prompt's text → token ids (for /tokenize; without it /tokenize takes chat messages only)."""
    clients: dict[str, grpcclient.InferenceServerClient] = {}
    pools: dict[str, ThreadPoolExecutor] = {}
    scrapers: dict[str, TritonMetrics] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        clients["triton"] = grpcclient.InferenceServerClient(config.triton_url)
        pools["tokenizer"] = ThreadPoolExecutor(config.tokenizer_threads,
                                                thread_name_prefix="front-tokenizer")
        scrapers["triton"] = TritonMetrics(config.triton_metrics_url, config.metrics_timeout_s)
        yield
        await clients["triton"].close()
        await scrapers["triton"].aclose()
        pools["tokenizer"].shutdown(wait=False, cancel_futures=True)

    policy = RequestPolicy(UnknownFields(config.strict_fields), config.trust_request_chat_template,
                           config.max_n, config.images)
    app = FastAPI(title="tt_backend OpenAI front", lifespan=lifespan)
    openapi.describe(app)
    # The last added runs first: the Host check, then CORS (so a 401 carries CORS headers a page can
    # read, and a preflight is answered before the key check), then the key check.
    if config.api_key is not None:
        app.add_middleware(ApiKeyCheck, key=config.api_key)
    if (cors := config.cors) is not None:
        app.add_middleware(CORSMiddleware, allow_origins=cors.origins, allow_methods=cors.methods,
                           allow_headers=cors.headers, allow_credentials=cors.credentials)
    if config.allowed_hosts is not None:
        app.add_middleware(HostCheck, allowed=config.allowed_hosts)

    async def off_loop(fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the tokenizer pool (templates and tokenizers would stall every stream)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pools["tokenizer"], functools.partial(fn, *args))

    async def body_of(request: Request) -> dict[str, Any]:
        body = await off_loop(parse, await read_body(request, config.body_limits))
        model = body.get("model")
        if model != config.served_model:
            shown = repr(model) if isinstance(model, str | None) else f"of type {type(model).__name__}"
            raise RequestError(f"the model {shown[:200]} does not exist; this server serves "
                               f"{config.served_model!r}", 404, "model")
        return body

    @app.get("/health")
    async def health() -> Response:
        client = clients["triton"]
        try:
            ready = await client.is_server_ready() and await client.is_model_ready(config.triton_model)
        except Exception:  # noqa: BLE001 (Triton not reachable: not ready)
            ready = False
        return Response(status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        """tritonserver's metrics (the engine's `vllm:*` series), where tools built for vLLM scrape."""
        try:
            text = await scrapers["triton"].scrape()
        except MetricsUnavailable as exc:
            return _error(str(exc), 503)
        return Response(text, media_type=PROMETHEUS_TEXT)

    card = {"id": config.served_model, "object": "model", "created": 0, "owned_by": "tt_backend",
            "root": config.served_model, "parent": None, "max_model_len": config.max_model_len}

    @app.get("/v1/models", response_model=None, responses=openapi.answers(out.ModelList, errors=(401,)))
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model_id:path}",  # `path`: an HF id (org/name) holds a slash
             responses=openapi.answers(out.ModelCard, errors=(401, 404)))
    async def model(model_id: str) -> Response:
        if model_id != config.served_model:
            return _error(f"the model {model_id[:200]!r} does not exist; this server serves "
                          f"{config.served_model!r}", 404, "model")
        return JSONResponse(card)

    def call_of(body: dict[str, Any], chat: bool) -> GenerateCall:
        if not chat:
            return completion_call(body, policy)
        call = chat_call(body, render_chat, policy)
        if "max_tokens" not in call.sampling:  # what the context has left
            left = config.max_model_len - len(call.prompt)
            call = dataclasses.replace(call, sampling={**call.sampling, "max_tokens": max(left, 1)})
        return call

    async def generate(request: Request, chat: bool) -> Response:
        try:
            body = await body_of(request)
            call = await off_loop(call_of, body, chat)
            call, reading = config.output.prepare(call, body) if chat else (call, None)
        except RequestError as exc:
            return _error(str(exc), exc.status, exc.param)
        # n choices are n engine requests for the same prompt. Choice 0 goes first: once its first
        # token is out, its prompt's full KV blocks are in the engine's prefix cache, and the other
        # choices, sent then, reference them instead of computing them again.
        streams = [stream(clients["triton"], config.triton_model,
                          dataclasses.replace(call, sampling=call.sampling_for(i))) for i in range(call.n)]
        envelope = Envelope(config.served_model, chat, call.request_id)
        streaming = False
        try:  # a refusal before the first delta is still an HTTP error, not a stream event
            firsts = [await _unless_disconnected(request, anext(streams[0], None))]
            if call.n > 1 and firsts[0] is not None:
                rest = [anext(deltas, None) for deltas in streams[1:]]
                firsts += await _unless_disconnected(request, gather_all(rest))
            if any(first is None for first in firsts):
                return _error("the server ended the request without output", 500)
            starts = [first for first in firsts if first is not None]  # (all of them: for mypy)
            # The prompt is echoed once tt_llm took it (its ids are then the vocabulary's).
            prefix = await off_loop(echo_text, call) if call.echo else ""
            if call.stream:
                streaming = True
                return StreamingResponse(events(envelope, call, prefix, starts, streams, reading),
                                         media_type="text/event-stream")
            collects = [collect(chat, call, first, deltas, i, reading)
                        for i, (first, deltas) in enumerate(zip(starts, streams, strict=True))]
            choices = await _unless_disconnected(request, gather_all(collects))
        except TritonError as exc:
            return _error(str(exc), exc.status)
        except ClientGone:
            return Response(status_code=499)  # nobody reads it: the client is gone
        finally:
            if not streaming:  # whatever ended this, the Triton streams end with it
                for deltas in streams:
                    await deltas.aclose()
        return JSONResponse(envelope.completion(choices, prefix))

    def echo_text(call: GenerateCall) -> str:
        if not call.echo:
            return ""
        if call.echoed is not None:
            return call.echoed
        return call.prompt if isinstance(call.prompt, str) else decode(call.prompt)

    @app.post("/tokenize", openapi_extra=openapi.openapi_body(ChatTemplateFields),
              responses=openapi.answers(out.TokenizeResponse, errors=(400, 401, 404, 408, 413, 415)))
    async def tokenize(request: Request) -> Response:
        """vLLM's /tokenize: the ids a chat (`messages`) or completion (`prompt`) request would
        send. vLLM's router asks for them to route on token prefixes."""
        try:
            body = await body_of(request)
            if "messages" in body:
                ids = list(await off_loop(chat_prompt, body, render_chat, policy))
            elif isinstance(body.get("prompt"), str) and encode is not None:
                ids = await off_loop(encode, body["prompt"])
            else:
                raise BadRequest("tokenize expects `messages` (a list) or `prompt` (a string)", "messages")
        except RequestError as exc:
            return _error(str(exc), exc.status, exc.param)
        return JSONResponse({"count": len(ids), "max_model_len": config.max_model_len, "tokens": ids,
                             "token_strs": None})

    @app.post("/v1/chat/completions", openapi_extra=openapi.openapi_body(ChatCompletionRequest),
              responses=openapi.answers(out.ChatCompletionResponse, out.ChatCompletionStreamResponse))
    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    @app.post("/v1/completions", openapi_extra=openapi.openapi_body(CompletionRequest),
              responses=openapi.answers(out.CompletionResponse, out.CompletionStreamResponse))
    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    return app


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result, unless the client hangs up first: then `work` is cancelled (which closes the
    Triton stream it reads, so the engine aborts the request) and ClientGone is raised."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise ClientGone
    return task.result()


async def _disconnected(request: Request) -> None:
    """Returns once the client has hung up (the body is read: what comes now is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass

