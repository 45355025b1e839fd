"""Structured outputs: what a request's output must match, as vLLM's `structured_outputs` names it
(plain Python, no grammar engine, so SamplingParams and the scheduler can hold it).

Exactly one constraint per request: `json` (a JSON schema, object or text), `regex`, `choice` (a
list of strings), `grammar` (Lark or GBNF/EBNF text), `json_object` (any JSON object) or
`structural_tag` (a JSON object of tagged schemas). vLLM's options that choose or tune its own
backends (`backend`, `disable_fallback`, `disable_any_whitespace`, `disable_additional_properties`,
`whitespace_pattern`) are accepted and have no effect here: there is one backend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tt_backend.contract.modes import Named
from tt_backend.sampling.values import check_text, short


class GrammarKind(Named):
    JSON = "json"
    REGEX = "regex"
    CHOICE = "choice"
    GRAMMAR = "grammar"
    JSON_OBJECT = "json_object"
    STRUCTURAL_TAG = "structural_tag"


_BACKEND_OPTIONS = frozenset({"backend", "disable_fallback", "disable_any_whitespace",
                              "disable_additional_properties", "whitespace_pattern"})
FIELD = "structured_outputs"


@dataclass(frozen=True)
class StructuredOutputs:
    kind: GrammarKind
    spec: str
    """The constraint as text: the schema or structural tag as canonical JSON (sorted keys), the
    regex, the choices as a JSON list, the grammar; empty for json_object."""

    @property
    def key(self) -> tuple[str, str]:
        """What a compiled grammar is cached by (with the tokenizer, which the cache owns)."""
        return (self.kind.value, self.spec)

    @classmethod
    def parse(cls, field: str, value: Any) -> StructuredOutputs | None:
        """vLLM's `structured_outputs` object (None: no constraint); ValueError naming the field."""
        if value is None:
            return None
        if isinstance(value, StructuredOutputs):
            return value
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:  # JSONDecodeError, or a number past 4,300 digits
                raise ValueError(f"{field} must be a JSON object, got {short(value)}") from None
        if not isinstance(value, dict):
            raise ValueError(f"{field} must be an object with one of {', '.join(GrammarKind)}, "
                             f"got {short(value)}")
        unknown = sorted(set(value) - set(GrammarKind) - _BACKEND_OPTIONS)
        if unknown:
            raise ValueError(f"{field} has unknown key(s) {unknown}; known: {', '.join(GrammarKind)}")
        given = [k for k in GrammarKind if value.get(k.value) not in (None, False)]
        if len(given) != 1:
            raise ValueError(f"{field} must set exactly one of {', '.join(GrammarKind)}, got "
                             f"{[k.value for k in given] or 'none'}")
        kind = given[0]
        name = f"{field}.{kind.value}"
        return cls(kind, check_text(name, _spec(name, kind, value[kind.value])))


def _spec(field: str, kind: GrammarKind, value: Any) -> str:
    if kind is GrammarKind.JSON_OBJECT:
        if value is not True:
            raise ValueError(f"{field} must be true, got {short(value)}")
        return ""
    if kind in (GrammarKind.JSON, GrammarKind.STRUCTURAL_TAG):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{field} is not valid JSON ({exc.msg}): {short(value)}") from None
            except (ValueError, RecursionError):  # a number past 4,300 digits; deep nesting
                raise ValueError(f"{field} is not JSON that can be parsed: {short(value)}") from None
        if not isinstance(value, dict | bool):
            raise ValueError(f"{field} must be a JSON schema object, got {short(value)}")
        try:
            return json.dumps(value, sort_keys=True)
        except (ValueError, RecursionError):
            raise ValueError(f"{field} is not a JSON schema that can be serialized") from None
    if kind is GrammarKind.CHOICE:
        if not (isinstance(value, list) and value and all(isinstance(c, str) and c for c in value)):
            raise ValueError(f"{field} must be a non-empty list of non-empty strings, got {short(value)}")
        return json.dumps(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} must be a non-empty string, got {short(value)}")
    return value
