"""Request values made total: every conversion from a client's JSON or tensor value either returns a
value the engine can hold (an int within 64 bits, a finite float, valid Unicode) or raises a
ValueError naming the field and a short form of the value. One home for these rules, shared by
tt_llm's sampling_parameters, the TRT-LLM tensors and the structured-output specs."""

from __future__ import annotations

import math
from typing import Any

MAX_TOKEN_ID = 2**31 - 1
"""No vocabulary is larger; a token id or top_k beyond it is refused here, before the engine checks
ids against the model's vocabulary (torch's int64 tensors would overflow on larger ints)."""
MAX_INT = 2**63 - 1
"""Integer fields that reach tensors or counters stay within int64."""


def short(value: Any, limit: int = 80) -> str:
    """`value` for an error message: repr, cut to `limit` characters (a 5,000-digit int, a 10k list)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4,300-digit str limit inside a container
        return f"a {type(value).__name__} holding a number too long to print"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def parse_int(name: str, value: Any) -> int:
    """An integer within int64 (what counters and tensors hold); ValueError names the field."""
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and len(value) <= 32:
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if number is None:
        raise ValueError(f"{name} must be an integer, got {short(value)}")
    if not -MAX_INT - 1 <= number <= 2**64 - 1:  # 2**64 - 1: seeds are uint64
        raise ValueError(f"{name} must be an integer within 64 bits, got {short(number)}")
    return number


def parse_bool(name: str, value: Any) -> bool:
    """A boolean, or the string true / false in any case, spaces around it ignored."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{name} must be a boolean, got {short(value)}")


def parse_float(name: str, value: Any) -> float:
    """A finite number (NaN, infinities and ints beyond a double are refused, naming the field)."""
    number: float | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            raise ValueError(f"{name} must be a finite number, got {short(value)}") from None
    elif isinstance(value, str) and len(value) <= 64:
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None:
        raise ValueError(f"{name} must be a number, got {short(value)}")
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {number}")
    return number


def check_text(name: str, text: str) -> str:
    """`text` if it is valid Unicode (encodable as UTF-8: no lone surrogates, which valid JSON can
    carry as "\\ud800"); ValueError naming the field and where the bad character sits."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid Unicode: a lone surrogate "
                         f"{text[exc.start]!r} at character {exc.start}") from None
    return text
