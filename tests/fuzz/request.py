"""One fuzz request: where it goes, what it carries, which of its fields are hostile, and how it
reads in a report (a reproducer, long values cut)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Target = Literal["tt_llm", "ensemble", "chat", "completions"]
TARGETS: tuple[Target, ...] = ("tt_llm", "ensemble", "chat", "completions")
BODY = "body"
"""The hostile 'field' of a request whose whole body (or sampling_parameters text) is malformed."""


def cut(text: str, limit: int = 240) -> str:
    """`text` with its middle cut to fit `limit`, saying how long it was."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}...<{len(text)} chars>...{text[-half // 2:]}"


@dataclass(frozen=True, eq=False)
class FuzzRequest:
    target: Target
    hostile: tuple[str, ...]
    """Fields given hostile or edge values; empty for a valid request, which must succeed."""
    tensors: tuple[tuple[str, np.ndarray], ...] = ()
    """gRPC (tt_llm, ensemble): the input tensors."""
    body: bytes = b""
    """HTTP (chat, completions): the body as sent."""
    content_type: str | None = "application/json"
    max_tokens: int | None = None
    """For a valid request: the most tokens it may return."""

    @property
    def valid(self) -> bool:
        return not self.hostile

    def tensor(self, name: str) -> np.ndarray:
        return next(v for n, v in self.tensors if n == name)

    def flag(self, name: str) -> bool:
        """A BOOL input of a valid request (False when absent)."""
        return any(n == name and bool(v.reshape(-1)[0]) for n, v in self.tensors)

    def key(self) -> tuple[object, ...]:
        """What the request sends (two requests of one key are the same request)."""
        tensors = tuple((n, str(v.dtype), v.shape, v.tobytes() if v.dtype != np.object_ else
                         tuple(bytes(x) for x in v.reshape(-1))) for n, v in self.tensors)
        return self.target, tensors, self.body, self.content_type

    def describe(self, limit: int = 240) -> str:
        """A reproducer: the model or route and every tensor (dtype, shape, values) or the body."""
        what = "valid" if self.valid else f"hostile {list(self.hostile)}"
        if self.target in ("chat", "completions"):
            route = "/v1/chat/completions" if self.target == "chat" else "/v1/completions"
            body = self.body.decode("utf-8", errors="backslashreplace")
            return f"POST {route} ({what}; content-type {self.content_type}): {cut(body, limit)}"
        shown = ", ".join(f"{name}: {_tensor(value, limit)}" for name, value in self.tensors)
        return f"gRPC {self.target} ({what}): {{{shown}}}"


def _tensor(value: np.ndarray, limit: int) -> str:
    shape = list(value.shape)
    if value.dtype == np.object_:
        items = [bytes(v) for v in value.reshape(-1)[:4]]
        text = ", ".join(cut(repr(v), limit) for v in items)
        more = f", ... {value.size} items" if value.size > 4 else ""
        return f"BYTES{shape}[{text}{more}]"
    flat = value.reshape(-1)
    text = ", ".join(repr(v.item()) for v in flat[:8]) + (f", ... {flat.size} items" if flat.size > 8 else "")
    return f"{value.dtype}{shape}[{text}]"
