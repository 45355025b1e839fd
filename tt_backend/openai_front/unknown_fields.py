"""Request fields no model of schemas.py declares, at the top of a body or nested in it
(`messages[0].x`, `stream_options.x`): logged once per path and ignored, as vLLM does, or refused
with the front's `--strict-fields`."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

from tt_backend.openai_front.errors import BadRequest

_LOG = logging.getLogger(__name__)


def unknown(model: BaseModel, where: str = "") -> Iterator[tuple[str, BaseModel]]:
    """(path, the model holding it) of every field no model declares: `model`'s own, then those of
    the models it holds (`messages[0].x`, `stream_options.x`)."""
    for name in sorted(model.model_extra or {}):
        yield (f"{where}.{name}" if where else name), model
    for name in type(model).model_fields:
        yield from _unknown_in(getattr(model, name), f"{where}.{name}" if where else name)


def _unknown_in(value: Any, where: str) -> Iterator[tuple[str, BaseModel]]:
    if isinstance(value, BaseModel):
        yield from unknown(value, where)
    elif isinstance(value, list) and value and isinstance(value[0], BaseModel):  # not a prompt's ids
        for i, item in enumerate(value):
            yield from _unknown_in(item, f"{where}[{i}]")


class UnknownFields:
    """Fields no model declares, nested ones too: a warning naming each path once, its list
    indices as `[*]` (as vLLM logs them, per field rather than per request, so a client that always
    sends one does not flood the log), or, with `strict`, a 400 naming the first."""

    def __init__(self, strict: bool = False, log: Callable[[str], None] | None = None) -> None:
        self.strict = strict
        self._log = log or _LOG.warning
        self._seen: set[str] = set()
        self._lock = threading.Lock()  # requests are parsed on the tokenizer pool's threads

    def check(self, request: BaseModel, route: str) -> None:
        found = list(unknown(request))
        if not found:
            return
        if self.strict:
            first, holder = found[0]
            others = [name for name, _ in found[1:]]
            where = route if holder is request else first.rpartition(".")[0]
            raise BadRequest(f"unknown field {first!r}" + (f" (and {others})" if others else "")
                             + f"; {where} takes {', '.join(sorted(type(holder).model_fields))} "
                             "(the front runs with --strict-fields)", first)
        keys = list(dict.fromkeys(_any_index(name) for name, _ in found))
        with self._lock:
            new = [key for key in keys if key not in self._seen]
            self._seen.update(new)
        for key in new:
            self._log(f"ignored the unknown request field {key[:100]!r} (on {route}; logged once per name)")


def _any_index(where: str) -> str:
    """messages[3].x → messages[*].x: one log line per field, whichever message holds it."""
    return re.sub(r"\[\d+\]", "[*]", where)
