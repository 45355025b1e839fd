"""The sampling parameters of a request body that also take the engine's forms (SamplingParams.from_dict:
a number or a boolean as a string, " TRUE ", an integer as 2.0), as the front took them before its
pydantic models (schemas.py); the front's own fields (stream, echo, logprobs, n) are strict JSON."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationInfo

from tt_backend.sampling.values import parse_bool, parse_float, parse_int

_PARSERS = {"bool": parse_bool, "float": parse_float, "int": parse_int}
SAMPLING_FORMS: dict[str, str] = {
    **dict.fromkeys(("max_tokens", "max_completion_tokens", "top_k", "seed", "min_tokens"), "int"),
    **dict.fromkeys(("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                     "repetition_penalty"), "float"),
    **dict.fromkeys(("ignore_eos", "skip_special_tokens", "include_stop_str_in_output"), "bool"),
    **dict.fromkeys(("stop_token_ids", "allowed_token_ids"), "ints")}
"""Each such field and the form its values take."""


def sampling_form(value: Any, info: ValidationInfo) -> Any:
    """`value` in the engine's form where it has one; as it is otherwise (the model's own error names
    the field)."""
    kind = SAMPLING_FORMS[info.field_name or ""]
    parse = _PARSERS["int" if kind == "ints" else kind]
    try:
        if kind == "ints" and isinstance(value, list):
            return [parse(info.field_name or "", v) if isinstance(v, str | float) else v for v in value]
        if isinstance(value, str) or (isinstance(value, float) and kind == "int"):
            return parse(info.field_name or "", value)
    except ValueError:
        pass
    return value
