"""Sending one fuzz request and collecting everything that comes back.

gRPC: the request goes on its own stream; after its final response (or error) the client closes
its side and waits for the server to end the stream, so every response the server sent for it
has arrived: a second final response would be seen, not lost in a race."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tests.fuzz.request import FuzzRequest

CLOSE_TIMEOUT_S = 30.0
"""How long the server may take to end a stream once the request's final response came."""


@dataclass(frozen=True)
class Event:
    """One response or error the stream carried."""

    outputs: dict[str, np.ndarray]
    final: bool
    error: str | None = None

    @property
    def ends(self) -> bool:
        return self.final or self.error is not None


@dataclass(frozen=True)
class GrpcResult:
    events: list[Event]
    """Every response the stream carried until the server closed it, in arrival order."""
    timed_out: bool


@dataclass(frozen=True)
class HttpResult:
    status: int
    content_type: str
    body: bytes


def _input(name: str, value: Any) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    tensor.set_data_from_numpy(value)
    return tensor


def send_grpc(url: str, request: FuzzRequest, timeout: float) -> GrpcResult:
    incoming: queue.Queue[tuple[Any, Any]] = queue.Queue()
    events: list[Event] = []
    client = grpcclient.InferenceServerClient(url)
    closed = threading.Event()
    timed_out = False
    try:
        client.start_stream(callback=lambda result, error: incoming.put((result, error)))
        try:
            client.async_stream_infer(request.target, [_input(n, v) for n, v in request.tensors],
                                      enable_empty_final_response=True)
        except InferenceServerException as exc:  # refused by the client library before sending
            return GrpcResult([Event({}, False, f"client: {exc}")], False)
        deadline = time.monotonic() + timeout
        while True:
            try:
                result, error = incoming.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                timed_out = True
                break
            if _record(events, result, error):
                break
        if not timed_out:
            # Close our side; the stream ends once the server sent everything it had.
            watchdog = threading.Timer(CLOSE_TIMEOUT_S, lambda: None if closed.is_set() else _cancel(client))
            watchdog.start()
            client.stop_stream()
            closed.set()
            watchdog.cancel()
            while not incoming.empty():
                _record(events, *incoming.get_nowait())
    finally:
        if not closed.is_set():
            client.stop_stream(cancel_requests=True)
        client.close()
    return GrpcResult(events, timed_out)


def _record(events: list[Event], result: Any, error: Any) -> bool:
    """Append one callback's event; whether it ends the request."""
    if error is not None:
        message = error.message() if isinstance(error, InferenceServerException) else str(error)
        events.append(Event({}, False, message))
        return True
    response = result.get_response()
    outputs = {o.name: result.as_numpy(o.name) for o in response.outputs}
    events.append(Event(outputs, bool(response.parameters["triton_final_response"].bool_param)))
    return events[-1].final


def _cancel(client: grpcclient.InferenceServerClient) -> None:
    stream = client._stream  # noqa: SLF001 (the only handle on a stream the server does not end)
    if stream is not None and stream._response_iterator is not None:  # noqa: SLF001
        stream._response_iterator.cancel()  # noqa: SLF001


def send_http(front: str, request: FuzzRequest, timeout: float) -> HttpResult:
    """`front`: http://host:port/v1."""
    route = "chat/completions" if request.target == "chat" else "completions"
    headers = {} if request.content_type is None else {"content-type": request.content_type}
    try:
        reply = requests.post(f"{front}/{route}", data=request.body, headers=headers, timeout=timeout)
    except requests.Timeout:
        return HttpResult(0, "", b"timed out")
    except requests.RequestException as exc:
        return HttpResult(599, "", f"connection failed: {exc!r}".encode())
    return HttpResult(reply.status_code, reply.headers.get("content-type", ""), reply.content)
