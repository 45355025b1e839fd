"""JSON cut anywhere, read as far as it can no longer change.

A tool call's arguments stream as JSON text that only ever grows: each step, the text so far is
completed by partial-json-parser (strings and containers closed, a number or literal that may
still grow left out), parsed, and written out canonically (`json.dumps`); what may still change is
the closers of the values still open, and they are always the last characters:

    raw:        {"city": "Par                 open: the object, the string (tail `"}`)
    completed:  {"city": "Par"}
    stable:     {"city": "Par                 the canonical text minus the 2 open closers

Open values lie on the rightmost path from the root (the last key or item at each level), as many
as the completion's tail has characters; a value deeper than that, or off that path, is closed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from partial_json_parser import Allow, fix_fast

_ALLOW = Allow.STR | Allow.ARR | Allow.OBJ
"""What may be cut short: strings and containers. A number or literal at the cut may still grow
(`12` → `123`), so it is left out until something follows it."""

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class PartialJson:
    """One JSON value read from a prefix of its text."""

    value: Any
    open: int
    """How many values on the rightmost path are still open (0: the text is a whole value)."""

    @classmethod
    def read(cls, text: str) -> PartialJson | None:
        """The value `text` begins (None: nothing read yet, or not JSON). Text after a whole value is
        not read."""
        text = text.strip()
        if not text:
            return None
        try:
            value = json.JSONDecoder().raw_decode(text)[0]
            if isinstance(value, int | float) and not isinstance(value, bool):
                return None  # a number alone, which may still grow: not read (calls are objects)
            return cls(value, 0)
        except json.JSONDecodeError:
            pass
        try:
            head, tail = fix_fast(text, _ALLOW)
            if not head.strip():
                return None
            return cls(json.loads(head + tail), len(tail))
        except (ValueError, IndexError, AssertionError, RecursionError):  # its errors are ValueErrors
            return None

    def at(self, path: Path) -> tuple[bool, Any]:
        """Whether `path` is there yet, and its value."""
        value = self.value
        for step in path:
            if isinstance(step, str) and isinstance(value, dict) and step in value:
                value = value[step]
            elif isinstance(step, int) and isinstance(value, list) and 0 <= step < len(value):
                value = value[step]
            else:
                return False, None
        return True, value

    def is_closed(self, path: Path) -> bool:
        return self._open_at(path) == 0

    def text(self, path: Path = ()) -> str | None:
        """The canonical JSON text of the value at `path`, as far as it cannot change (None: not
        there yet)."""
        there, value = self.at(path)
        if not there:
            return None
        text = json.dumps(value, ensure_ascii=False)
        text = text[:len(text) - self._open_at(path)]
        if text and "\ud800" <= text[-1] <= "\udbff":  # half a surrogate pair: the other half may follow
            text = text[:-1]
        return text

    def _open_at(self, path: Path) -> int:
        """How many of the open values lie at or below `path` (its closers among the open ones)."""
        value, depth = self.value, 0
        for step in path:
            last = (list(value)[-1] if isinstance(value, dict) and value else
                    len(value) - 1 if isinstance(value, list) else None)
            if step != last or depth >= self.open:
                return 0  # off the rightmost path, or below where the open values end
            value, depth = value[step], depth + 1
        return max(self.open - depth, 0)
