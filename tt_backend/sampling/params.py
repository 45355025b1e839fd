"""SamplingParams: per-request sampling options, validated, in plain Python (no torch)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

# vLLM SamplingParams fields this backend does not implement yet; a request naming one gets a
# clear error instead of silently different output.
UNSUPPORTED_YET = frozenset({
    "n", "best_of", "min_p", "stop", "include_stop_str_in_output",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias",
    "allowed_token_ids", "bad_words", "logprobs", "prompt_logprobs", "logits_processors",
    "guided_decoding", "structured_outputs", "truncate_prompt_tokens",
})
# Accepted and meaningless here (text is always detokenized with these defaults).
IGNORED = frozenset({"skip_special_tokens", "spaces_between_special_tokens", "detokenize"})


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    min_tokens: int = 0
    """EOS and stop_token_ids cannot be generated before this many tokens."""
    temperature: float = 1.0
    top_k: int = 0
    """0 (or -1) disables top-k."""
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(
                f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 (disabled) or >= 1, got {self.top_k}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not (0 <= self.seed < 2**64):
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")
        if any(t < 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be non-negative, got {list(self.stop_token_ids)}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SamplingParams:
        """Parse vLLM-style JSON values; numbers and booleans may arrive as strings."""
        kwargs: dict[str, Any] = {}
        for name, value in values.items():
            if name in IGNORED:
                continue
            if name in UNSUPPORTED_YET:
                raise ValueError(f"sampling parameter {name!r} is not supported yet")
            if name not in _FIELD_PARSERS:
                raise ValueError(f"unknown sampling parameter {name!r}; known: "
                                 f"{', '.join(sorted(_FIELD_PARSERS))}")
            kwargs[name] = _FIELD_PARSERS[name](name, value)
        return cls(**kwargs)


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError(f"{name} must be an integer, got {value!r}")


def _as_optional_int(name: str, value: Any) -> int | None:
    return None if value is None else _as_int(name, value)


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ValueError(f"{name} must be a number, got {value!r}")


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{name} must be a boolean, got {value!r}")


def _as_int_tuple(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{name} must be a list of integers, got {value!r}")
    return tuple(_as_int(name, v) for v in value)


_PARSER_BY_TYPE = {"int": _as_int, "float": _as_float, "bool": _as_bool,
                   "int | None": _as_optional_int, "tuple[int, ...]": _as_int_tuple}
_FIELD_PARSERS = {f.name: _PARSER_BY_TYPE[str(f.type)] for f in dataclasses.fields(SamplingParams)}
