"""A request's JSON body, read and checked before a route sees it: its media type, its size (counted
as it streams in, so a chunked body is refused as soon as it passes the limit rather than once it is
whole), the time it may take to arrive, and values that no field can hold.

Valid JSON can still carry what the rest of the front cannot take: a lone surrogate (`"\\ud800"`
cannot be encoded as UTF-8, so the tokenizer or the gRPC request would fail on it), an integer of
more than 4,300 digits (Python's int/str limit: `json.loads` raises on it), and nesting deep enough
to overflow the stack of whatever walks it next. Each is a 400 naming the JSON path of the first one.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request

from tt_backend.openai_front.errors import BadRequest, RequestError

MAX_INT_DIGITS = 4300
"""Python's limit on the digits of an int converted from text (sys.get_int_max_str_digits())."""
MAX_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate (valid UTF-8 text cannot hold one any other way)."""
_SCALARS: frozenset[type] = frozenset({int, float, bool, type(None)})
"""The deepest nesting a body may have (JSON schemas in response_format and tools nest a few levels)."""


@dataclass(frozen=True)
class BodyLimits:
    max_bytes: int = 4 << 20
    timeout_s: float = 30.0
    """How long the whole body may take to arrive once the headers are in."""

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {self.max_bytes}")
        if not self.timeout_s > 0:
            raise ValueError(f"the body timeout must be > 0 seconds, got {self.timeout_s}")


async def read_body(request: Request, limits: BodyLimits) -> bytes:
    """The body's bytes, for `parse`; RequestError: 415 for another media type, 413 past
    `max_bytes`, 408 past `timeout_s`."""
    check_media_type(request.headers.get("content-type"))
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and (len(declared) > 18 or int(declared) > limits.max_bytes):
        raise RequestError(f"the request body ({declared} bytes) exceeds {limits.max_bytes} bytes", 413)
    return await _read(request, limits)


def check_media_type(value: str | None) -> None:
    """JSON only as `application/json`, with no parameter but `charset=utf-8`."""
    media, *parts = (value or "").split(";")
    params = [p for p in parts if p.strip()]
    charsets = [v.strip().strip('"').lower() for k, _, v in (p.partition("=") for p in params)
                if k.strip().lower() == "charset"]
    if media.strip().lower() != "application/json" or len(charsets) != len(params) or \
            any(c not in ("utf-8", "utf8") for c in charsets):
        shown = "none" if value is None else repr(value[:100])
        raise RequestError(f"the request body must be JSON sent with Content-Type: application/json "
                           f"(optionally ; charset=utf-8), got {shown}", 415)


async def _read(request: Request, limits: BodyLimits) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_bytes:  # refused now: the rest is never read into memory
                    raise RequestError(f"the request body (at least {size} bytes) exceeds "
                                       f"{limits.max_bytes} bytes", 413)
                chunks.append(chunk)
    except TimeoutError:
        raise RequestError(f"the request body did not arrive within {limits.timeout_s:g} s "
                           f"({size} bytes came)", 408) from None
    except ClientDisconnect:
        raise RequestError("the client disconnected before the request body ended", 400) from None
    return b"".join(chunks)


def parse(raw: bytes) -> dict[str, Any]:
    """`raw` as a JSON object; BadRequest naming the first value the front cannot hold."""
    long_ints = False
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the request body is not valid JSON ({exc})") from None
    except RecursionError:
        raise BadRequest("the request body nests too deeply to parse (JSON)") from None
    except ValueError:  # an integer past MAX_INT_DIGITS: parse again to find where it is
        body, long_ints = json.loads(raw, parse_int=_LongInt.parse), True
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    # Walk only where the text could hold what the walk looks for (a 4 MiB list of token ids or
    # strings takes a second to walk): a surrogate escape, a long integer, or enough brackets.
    texts = _SURROGATE_ESCAPE.search(raw) is not None
    if not (long_ints or texts or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH):
        return body
    problem = _first_bad_value(body, _SCALARS if texts else _SCALARS | {str})
    if problem is not None:
        raise problem
    return body


@dataclass(frozen=True)
class _LongInt:
    """An integer too long for Python's int(), kept in its place to be named."""

    digits: int

    @staticmethod
    def parse(text: str) -> int | _LongInt:
        digits = len(text.lstrip("-"))
        return int(text) if digits <= MAX_INT_DIGITS else _LongInt(digits)


def _first_bad_value(body: dict[str, Any], scalars: frozenset[type]) -> BadRequest | None:
    """The first value (in document order) the front cannot hold, as a 400 naming its path; a list
    of only `scalars` is not looked into."""
    # (parent path, path, value, depth, key): `key` is the dict key the value sits under, checked
    # before the value; a bad key is named by its parent's path (its own would hold the bad text).
    stack: list[tuple[str, str, Any, int, str | None]] = [("", "", body, 0, None)]
    while stack:
        parent, path, value, depth, key = stack.pop()
        if key is not None and (bad := _lone_surrogate(key)) is not None:
            where = parent or "the request body"
            return BadRequest(f"{where} holds a key that is not valid Unicode: {bad}", parent or None)
        if isinstance(value, str) and (bad := _lone_surrogate(value)) is not None:
            return BadRequest(f"{path} is not valid Unicode: {bad}", path)
        if isinstance(value, _LongInt):
            return BadRequest(f"{path} is an integer of {value.digits} digits, more than the "
                              f"{MAX_INT_DIGITS} a number may have", path)
        if isinstance(value, dict | list) and depth >= MAX_DEPTH:
            return BadRequest(f"the request body nests too deeply: {path} is {depth} levels down, "
                              f"more than {MAX_DEPTH}", path)
        if isinstance(value, dict):
            stack.extend((path, f"{path}.{k}" if path else k, v, depth + 1, k)
                         for k, v in reversed(value.items()))
        elif isinstance(value, list) and not scalars.issuperset(map(type, value)):
            stack.extend((path, f"{path}[{i}]", value[i], depth + 1, None)
                         for i in reversed(range(len(value))))
    return None


def _lone_surrogate(text: str) -> str | None:
    """Where `text` cannot be encoded as UTF-8 (a lone surrogate), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate {text[exc.start]!r} at character {exc.start}"
    return None
