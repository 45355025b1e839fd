"""What every tool-call format shares: the calls read so far from the text that holds them.

A format reads the call section (the output from where its calls begin) as often as text arrives,
each time whole, and answers with the calls as far as they are read. Between two reads a call's
name appears once, whole, and its arguments only grow: that is what lets `ToolCallReader` stream
the difference as OpenAI's tool-call deltas.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from tt_backend.openai_front.tool_parsers.partial_json import PartialJson, Path


@dataclass(frozen=True)
class CallSoFar:
    """One call as far as it is read."""

    name: str | None
    """None until the whole name is read."""
    arguments: str
    """The arguments' JSON text as far as it cannot change; a later read only adds to it."""


class ToolFormat(ABC):
    """One model family's way of writing tool calls in its output."""

    name: ClassVar[str]
    starts: ClassVar[tuple[str, ...]]
    """Text that opens the call section."""
    anywhere: ClassVar[bool] = True
    """Whether the section may follow content (else the output is either calls or content, decided
    by how it begins)."""
    kept_tokens: ClassVar[tuple[str, ...]] = ()
    """Marker tokens the parser needs in the text: where the tokenizer holds them as special tokens,
    the output is detokenized with them (skip_special_tokens off)."""
    instruction: ClassVar[str] = ""
    """How to call a tool in this format, for the system message of a template that takes no tools."""

    @abstractmethod
    def read(self, section: str) -> list[CallSoFar]:
        """The calls in `section` (the text from where the calls begin, possibly cut anywhere), in
        order; reading stops at the first call that is not well-formed."""

    def call_id(self) -> str:
        return f"call_{uuid.uuid4().hex[:24]}"


ARGUMENT_KEYS = ("arguments", "parameters")


def object_call(partial: PartialJson, at: Path = (), argument_keys: tuple[str, ...] = ARGUMENT_KEYS
                ) -> CallSoFar | None:
    """A call written as a JSON object `{"name": ..., "arguments": {...}}` at `at` in `partial`
    (None: not such an object)."""
    there, call = partial.at(at)
    if not there or not isinstance(call, dict):
        return None
    name = call.get("name")
    if "name" in call and not isinstance(name, str):
        return None
    if name is None or not partial.is_closed((*at, "name")):
        return CallSoFar(None, "")
    key = next((k for k in argument_keys if k in call), None)
    if key is None:
        return CallSoFar(name, "{}" if partial.is_closed(at) else "")
    return CallSoFar(name, arguments_text(partial, (*at, key)))


def arguments_text(partial: PartialJson, at: Path) -> str:
    """The arguments at `at` as JSON text; arguments a model wrote as a JSON string (of JSON) are
    that string."""
    there, value = partial.at(at)
    if there and isinstance(value, str):
        return value
    return partial.text(at) or ""


def listed_calls(partial: PartialJson | None, argument_keys: tuple[str, ...] = ARGUMENT_KEYS
                 ) -> list[CallSoFar]:
    """Calls written as a JSON list of call objects."""
    if partial is None or not isinstance(partial.value, list):
        return []
    calls = []
    for i in range(len(partial.value)):
        call = object_call(partial, (i,), argument_keys)
        if call is None:
            break
        calls.append(call)
    return calls
