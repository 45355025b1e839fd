"""The Host headers the front answers (DNS-rebinding protection).

A page on any site can make a browser send requests to `http://127.0.0.1:9000` by pointing a name
of its own at 127.0.0.1 (DNS rebinding); the browser then sends that name as the Host header. So
while the front listens on a loopback address, it answers only loopback Host names (`localhost`,
`127.x.x.x`, `[::1]`, any port) and those `--allowed-hosts` adds; listening elsewhere, it answers
any Host unless `--allowed-hosts` is given.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tt_backend.openai_front.responses import error_body


def host_name(header: str | None) -> str | None:
    """The name or address of a Host header (`name`, `name:port`, `[v6]`, `[v6]:port`), lowercase,
    without port or trailing dot; None for a missing or malformed one."""
    text = (header or "").strip().lower()
    if text.startswith("["):
        name, bracket, port = text[1:].partition("]")
        if not bracket or (port and not (port.startswith(":") and port[1:].isdigit())):
            return None
    else:
        name, colon, port = text.partition(":")
        if colon and not port.isdigit():  # a second colon (unbracketed IPv6) or no port
            return None
    name = name.rstrip(".")
    return name or None


def is_loopback(name: str) -> bool:
    """`localhost` or an address in 127.0.0.0/8 or ::1."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AllowedHosts:
    """Loopback names and addresses, and `extra`."""

    extra: frozenset[str] = frozenset()
    """Host names or addresses beyond the loopback ones, as host_name gives them."""

    def allows(self, header: str | None) -> bool:
        name = host_name(header)
        return name is not None and (is_loopback(name) or name in self.extra)

    @classmethod
    def for_bind(cls, bind_host: str, allowed: Sequence[str]) -> AllowedHosts | None:
        """What a front listening on `bind_host` answers (None: any Host) given `--allowed-hosts`."""
        extra = set()
        for entry in (a for a in allowed if a.strip()):
            name = host_name(entry)
            if name is None:
                raise ValueError(f"--allowed-hosts: {entry!r} is not a host name or address")
            extra.add(name)
        bind = host_name(bind_host if ":" not in bind_host.strip("[]") else f"[{bind_host.strip('[]')}]")
        if not extra and not (bind is not None and is_loopback(bind)):
            return None
        return cls(frozenset(extra))


class HostCheck:
    """ASGI middleware: a request whose Host is not allowed gets 421 (Misdirected Request)."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
            if not self.allowed.allows(host):
                names = ", ".join(["localhost", "127.0.0.1", "[::1]", *sorted(self.allowed.extra)])
                shown = "no Host header" if host is None else f"the Host header {host[:100]!r}"
                message = (f"{shown} is not a name this server answers to ({names}, with any port); "
                           "start the front with --allowed-hosts to add names")
                await JSONResponse(error_body(message, 421), status_code=421)(scope, receive, send)
                return
        await self.app(scope, receive, send)
