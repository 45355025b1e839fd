"""Connection limits of the front's HTTP server (uvicorn with httptools), and the uvicorn config.

uvicorn bounds how many connections and requests are served at once (`limit_concurrency`: over it,
503) and how long a connection may idle between requests (`timeout_keep_alive`), but with httptools
it has no bound on a request's head: a connection that sends nothing, or a request line a byte at a
time, is held forever (each one also counts against `limit_concurrency`, so a few hundred such
sockets would turn every real request away). The protocol below adds:

- an idle bound from the start: a connection that sends nothing is closed after
  `timeout_keep_alive`, as one idling between requests is;
- a bound on the head: from a request's first byte, its headers must be in within
  `timeout_request_head_s` and `max_head_bytes`, else 408 or 431 and the connection closes,
  lingering: the answer goes, the write side shuts, and what the client still sends is read and
  dropped for up to `LINGER_S` (closing with unread bytes makes the kernel send a reset, and a
  reset can discard the answer before the client reads it, as Apache's lingering close avoids);
- a bound on a body answered early (a 413): the rest of it is read and dropped, and the connection
  closes `timeout_keep_alive` after the answer, however long the client goes on sending.

The body's own size and arrival time are bounded in the app (`body.py`), where they are counted.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tt_backend.openai_front.responses import error_body

LINGER_S = 2.0
"""Seconds a refused connection goes on reading (and dropping) before it closes."""


@dataclass(frozen=True)
class ServerLimits:
    limit_concurrency: int = 512
    """Connections and requests at once; uvicorn answers 503 to a request over it."""
    timeout_keep_alive: int = 5
    """Seconds a connection may idle (before its first request, or between requests)."""
    timeout_request_head_s: float = 10.0
    """Seconds from a request's first byte to the end of its headers."""
    max_head_bytes: int = 64 << 10
    """Bytes of a request line and headers."""

    def __post_init__(self) -> None:
        for name in ("limit_concurrency", "timeout_keep_alive", "max_head_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.timeout_request_head_s > 0:
            raise ValueError(f"timeout_request_head_s must be > 0, got {self.timeout_request_head_s}")


def uvicorn_config(app: Any, host: str, port: int, limits: ServerLimits, loop: str = "uvloop"
                   ) -> uvicorn.Config:
    """The front's server: httptools with the bounds above (uvloop and httptools: at concurrency 32
    the front took 6-22% onto TTFT p50 with asyncio's own loop and h11, 1% with these, see
    bench/openai_front.py)."""
    return uvicorn.Config(app, host=host, port=port, log_level="warning", loop=loop,
                          http=guarded_protocol(limits), limit_concurrency=limits.limit_concurrency,
                          timeout_keep_alive=limits.timeout_keep_alive)


def guarded_protocol(limits: ServerLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with the idle, head and early-answer bounds of `limits`."""

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_timer: asyncio.TimerHandle | None = None
            """Armed from a request's first byte to the end of its headers."""
            self._head_bytes = 0
            self._message_done = True
            """The current request's body has ended (True between requests)."""
            self._lingering = False
            """The answer went before the request's body ended: the rest is being dropped."""
            self._refused = False
            """A 408 or 431 went: what comes until the close is dropped unparsed."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)

        def connection_lost(self, exc: Exception | None) -> None:
            self._end_head()
            if self.timeout_keep_alive_task is not None:
                self.timeout_keep_alive_task.cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            super().data_received(data)
            # Still in a head: `data` was head (a read that also ends the request before counts
            # whole, so pipelined requests may reach the limit a read early).
            if self._head_timer is not None:
                self._head_bytes += len(data)
                if self._head_bytes > limits.max_head_bytes:
                    self._refuse(431, f"the request line and headers exceed {limits.max_head_bytes} bytes")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._message_done = False
            self._head_bytes = 0
            self._head_timer = self.loop.call_later(
                limits.timeout_request_head_s, self._refuse, 408,
                f"the request line and headers did not arrive within {limits.timeout_request_head_s:g} s")

        def on_headers_complete(self) -> None:
            self._end_head()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._message_done = True
            self._lingering = False

        def on_response_complete(self) -> None:
            self._lingering = not self._message_done
            super().on_response_complete()

        def _unset_keepalive_if_required(self) -> None:
            if not self._lingering:  # the dropped body does not hold the connection open
                super()._unset_keepalive_if_required()

        def _end_head(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _refuse(self, status: int, message: str) -> None:
            self._end_head()
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:  # mid-answer (pipelined)
                self.transport.close()
                return
            body = json.dumps(error_body(message, status)).encode()
            reason = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}[status]
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                                 b"connection: close\r\n\r\n%s" % (status, reason, len(body), body))
            self._refused = True
            if self.transport.can_write_eof():
                self.transport.write_eof()  # after the answer is flushed; reading goes on
                self.loop.call_later(LINGER_S, self.transport.close)
            else:
                self.transport.close()

    return GuardedHttpToolsProtocol
