"""Who may call the front: an API key, as vLLM's `--api-key`, and CORS for browser pages.

With a key (`--api-key`, else the env TT_BACKEND_API_KEY), a request must carry
`Authorization: Bearer <key>`, else 401 in OpenAI's error shape with `WWW-Authenticate: Bearer`.
vLLM guards the paths under `/v1` only; here every path is guarded except `OPEN_PATHS`, so `/tokenize`
(which runs the chat template on the tokenizer pool every request shares), `/docs` and a path that
routes nowhere are guarded too. OPTIONS passes unchecked, as in vLLM: a browser's CORS preflight
carries no Authorization header, and the front has no OPTIONS route for it to reach otherwise.

Without `--allowed-origins` no CORS header is sent, so a browser refuses to let a page of another
origin read an answer (or send JSON at all: its preflight gets 405).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tt_backend.openai_front.responses import error_body

API_KEY_ENV = "TT_BACKEND_API_KEY"
OPEN_PATHS = frozenset({"/health", "/metrics"})
"""Answered without the key: liveness for load balancers and `wait_ready`, and Prometheus scrapes
(vLLM leaves both open too)."""

_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#\s]+")


def resolve_api_key(flag: str | None, env: Mapping[str, str]) -> str | None:
    """The key the front requires: `--api-key` if given, else TT_BACKEND_API_KEY (unset or empty: no key).
    An empty `--api-key` is refused rather than read as "no key": `--api-key=$UNSET_VARIABLE` must not
    leave the server open. The messages never hold the key."""
    key = flag if flag is not None else (env.get(API_KEY_ENV) or None)
    if key is None:
        return None
    source = "--api-key" if flag is not None else API_KEY_ENV
    if not key:
        raise ValueError(f"{source} is empty; give a key, or leave the flag out to serve without one")
    if not all("!" <= c <= "~" for c in key):  # what a client can send after `Bearer `
        raise ValueError(f"{source} must be printable ASCII without spaces (a client could never send it)")
    return key


class ApiKeyCheck:
    """ASGI middleware: outside `OPEN_PATHS`, a request without `Authorization: Bearer <key>` gets 401.

    Keys are compared as SHA-256 digests with hmac.compare_digest: constant time, and of one length
    whatever is sent, so neither the key's bytes nor its length leak through timing."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self._digest = hashlib.sha256(key.encode("ascii")).digest()

    def allows(self, authorization: bytes | None) -> bool:
        scheme, _, token = (authorization or b"").strip().partition(b" ")
        sent = hashlib.sha256(token.strip()).digest()
        return hmac.compare_digest(sent, self._digest) and scheme.lower() == b"bearer"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] != "OPTIONS" and scope["path"] not in OPEN_PATHS:
            authorization = next((v for k, v in scope["headers"] if k == b"authorization"), None)
            if not self.allows(authorization):
                message = ("the API key is not valid" if authorization else
                           "an API key is required: send the header `Authorization: Bearer <key>`")
                response = JSONResponse(error_body(message, 401), status_code=401,
                                        headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def parse_list(text: str, flag: str) -> tuple[str, ...]:
    """A list flag as vLLM takes it (a JSON list of strings) or comma-separated; blanks dropped."""
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{flag}: not a JSON list ({exc})") from None
        if not (isinstance(items, list) and all(isinstance(i, str) for i in items)):
            raise ValueError(f"{flag}: a JSON list must hold strings only, got {text[:200]!r}")
    else:
        items = text.split(",")
    return tuple(i.strip() for i in items if i.strip())


@dataclass(frozen=True)
class CorsPolicy:
    """Starlette's CORSMiddleware options (`--allowed-origins`, `--allowed-methods`,
    `--allowed-headers`, `--allow-credentials`)."""

    origins: tuple[str, ...]
    """`*` or exact origins, `scheme://host[:port]`: a browser sends no path and no trailing slash,
    so an origin written with one would never match."""
    methods: tuple[str, ...] = ("*",)
    headers: tuple[str, ...] = ("*",)
    credentials: bool = False

    def __post_init__(self) -> None:
        if not self.origins:
            raise ValueError("--allowed-origins: no origin given (leave the flag out for no CORS)")
        for origin in self.origins:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(f"--allowed-origins: {origin!r} is not `*` or an origin "
                                 "`scheme://host[:port]` (no path, no trailing slash)")
        if "*" in self.origins and self.credentials:
            # Starlette would then echo every Origin with Allow-Credentials: any site could call the
            # front with the browser's cookies for it (e.g. those of an authenticating proxy).
            raise ValueError("--allow-credentials with --allowed-origins '*' would let every site send "
                             "credentialed requests; list the origins instead")
        for name, values in (("--allowed-methods", self.methods), ("--allowed-headers", self.headers)):
            if not values:
                raise ValueError(f"{name}: nothing given (the default is `*`)")

    @classmethod
    def from_flags(cls, origins: str, methods: str, headers: str, credentials: bool) -> CorsPolicy | None:
        """The policy of the flags; None (no CORS headers at all) when `origins` is empty."""
        allowed = tuple(o.lower() for o in parse_list(origins, "--allowed-origins"))  # as browsers send it
        if not allowed:
            return None
        return cls(allowed, parse_list(methods, "--allowed-methods"),
                   parse_list(headers, "--allowed-headers"), credentials)

    def describe(self) -> str:
        return f"origins {', '.join(self.origins)}{' with credentials' if self.credentials else ''}"
