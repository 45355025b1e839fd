"""SamplingParams: per-request sampling options with vLLM's names and checks, in plain Python (no
torch, so the scheduler can hold them).

Checks that need the model (token ids inside the vocabulary, custom processors that exist) are
the engine's; everything else is checked here, with the field and the value in the message.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from tt_backend.contract.limits import RequestLimits
from tt_backend.sampling.structured import StructuredOutputs
from tt_backend.sampling.values import (
    MAX_INT,
    MAX_TOKEN_ID,
    check_text,
    parse_bool,
    parse_float,
    parse_int,
    short,
)

GREEDY_EPS = 1e-5
"""A temperature below this decodes greedily (vLLM's _SAMPLING_EPS)."""
MAX_LOGPROBS = 20
"""The most top logprobs a request may ask for per token (vLLM's default max_logprobs)."""


# vLLM fields this backend rejects with a reason, instead of silently ignoring them.
REJECTED = {
    "best_of": "best_of is not supported; send separate requests",
    "prompt_logprobs": "prompt_logprobs is not supported: only logprobs of generated tokens are returned",
    "truncate_prompt_tokens": "truncate_prompt_tokens is not supported; truncate the prompt on the client",
}
# Accepted and without effect here.
IGNORED = frozenset({"spaces_between_special_tokens", "detokenize"})


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    """Only 1: a request generates one sequence."""
    max_tokens: int = 16
    min_tokens: int = 0
    """EOS and stop_token_ids cannot be generated before this many tokens."""
    temperature: float = 1.0
    top_k: int = 0
    """0 (or -1) disables top-k."""
    top_p: float = 1.0
    min_p: float = 0.0
    """Drop tokens whose probability is below min_p times the most likely token's."""
    seed: int | None = None
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    """Strings that end generation when they appear in the output text."""
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    """(token id, bias added to its logit), sorted by token id."""
    allowed_token_ids: tuple[int, ...] | None = None
    bad_words: tuple[str, ...] = ()
    logprobs: int | None = None
    """Return the sampled token's logprob and this many top logprobs per generated token."""
    logits_processors: tuple[str, ...] = ()
    """Names of processors registered with `tt_backend.sampling.processors.register`."""
    structured_outputs: StructuredOutputs | None = None
    """What the output must match (a JSON schema, regex, choice, grammar); vLLM's
    `guided_decoding` is accepted as the older name."""

    def __post_init__(self) -> None:
        if self.n != 1:
            raise ValueError(f"n must be 1 (one sequence per request; send {self.n} requests instead), "
                             f"got {self.n}")
        if not 1 <= self.max_tokens <= MAX_INT:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(
                f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not -1 <= self.top_k <= MAX_TOKEN_ID:
            raise ValueError(f"top_k must be -1, 0 (disabled) or in [1, {MAX_TOKEN_ID}], got {self.top_k}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (0 <= self.min_p <= 1):
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.seed is not None and not (0 <= self.seed < 2**64):
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")
        for name, ids in (("stop_token_ids", self.stop_token_ids),
                          ("allowed_token_ids", self.allowed_token_ids or ())):
            bad = next((t for t in ids if not 0 <= t <= MAX_TOKEN_ID), None)
            if bad is not None:
                raise ValueError(f"{name} must hold token ids in [0, {MAX_TOKEN_ID}], got {short(bad)}")
        for name in ("stop", "bad_words", "logits_processors"):
            for i, text in enumerate(getattr(self, name)):
                check_text(f"{name}[{i}]", text)
        if any(not s for s in self.stop):
            raise ValueError(f"stop must not contain empty strings, got {short(list(self.stop))}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not -2 <= value <= 2:
                raise ValueError(f"{name} must be in [-2, 2], got {value}")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for token, bias in self.logit_bias:
            if not 0 <= token <= MAX_TOKEN_ID or not -100 <= bias <= 100:
                raise ValueError(f"logit_bias maps token ids >= 0 to biases in [-100, 100], "
                                 f"got {short(token)}: {bias}")
        if self.allowed_token_ids is not None and not self.allowed_token_ids:
            raise ValueError("allowed_token_ids must be a non-empty list of token ids, got []")
        if any(not w.strip() for w in self.bad_words):
            raise ValueError(f"bad_words must not contain empty strings, got {short(list(self.bad_words))}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise ValueError(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")

    def check_limits(self, limits: RequestLimits) -> None:
        """Refuse lists longer than the engine's limits (ValueError naming the field and option)."""
        counts = {"logit_bias": len(self.logit_bias), "allowed_token_ids": len(self.allowed_token_ids or ()),
                  "stop": len(self.stop), "stop_token_ids": len(self.stop_token_ids),
                  "bad_words": len(self.bad_words), "logits_processors": len(self.logits_processors)}
        for name, count in counts.items():
            limit = getattr(limits, f"max_{name}")
            if count > limit:
                raise ValueError(f"{name} holds {count} entries, more than max_{name}={limit}")
        for name in ("stop", "bad_words"):
            longest = max((len(w) for w in getattr(self, name)), default=0)
            if longest > limits.max_word_chars:
                raise ValueError(f"{name} holds a string of {longest} characters, more than "
                                 f"max_word_chars={limits.max_word_chars}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_EPS or self.top_k == 1

    @property
    def filtered(self) -> bool:
        """Whether top-k or top-p restrict the candidates (the sort-based sampler)."""
        return not self.greedy and (self.top_k > 1 or self.top_p < 1)

    @property
    def needs_host(self) -> bool:
        """Whether every token needs the host path (logits on the host, the processor chain).
        min_tokens needs it only until that many tokens exist; the engine decides that part."""
        return (self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1
                or bool(self.logit_bias) or self.allowed_token_ids is not None or bool(self.bad_words)
                or self.logprobs is not None or bool(self.logits_processors)
                or self.structured_outputs is not None)

    def token_ids(self) -> list[tuple[str, int]]:
        """Every token id the request names, with its field: the engine checks them against the
        vocabulary."""
        named = [("stop_token_ids", t) for t in self.stop_token_ids]
        named += [("logit_bias", t) for t, _ in self.logit_bias]
        named += [("allowed_token_ids", t) for t in self.allowed_token_ids or ()]
        return named

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SamplingParams:
        """Parse vLLM-style JSON values; numbers and booleans may arrive as strings."""
        kwargs: dict[str, Any] = {}
        if values.get("guided_decoding") is not None:  # vLLM's name before 0.11
            if values.get("structured_outputs") is not None:
                raise ValueError("give structured_outputs or guided_decoding (its older name), not both")
            values = {**values, "structured_outputs": values["guided_decoding"]}
        for name, value in values.items():
            if name in IGNORED or name == "guided_decoding":
                continue
            if name in REJECTED:
                if value is None:
                    continue
                raise ValueError(f"sampling parameter {name!r}: {REJECTED[name]}")
            if name not in _FIELD_PARSERS:
                raise ValueError(f"unknown sampling parameter {name!r}; known: "
                                 f"{', '.join(sorted(_FIELD_PARSERS))}")
            kwargs[name] = _FIELD_PARSERS[name](name, value)
        return cls(**kwargs)


def _as_optional_int(name: str, value: Any) -> int | None:
    return None if value is None else parse_int(name, value)


def _as_int_tuple(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{name} must be a list of integers, got {short(value)}")
    return tuple(parse_int(name, v) for v in value)


def _as_optional_int_tuple(name: str, value: Any) -> tuple[int, ...] | None:
    return None if value is None else _as_int_tuple(name, value)


def _as_str_tuple(name: str, value: Any) -> tuple[str, ...]:
    """A string or a list of strings (vLLM accepts both for `stop`)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"{name} must be a string or a list of strings, got {short(value)}")


def _as_bias(name: str, value: Any) -> tuple[tuple[int, float], ...]:
    """JSON objects have string keys: {"50256": -100} maps token 50256."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be an object of token id to bias, got {short(value)}")
    return tuple(sorted((parse_int(name, k), parse_float(name, v)) for k, v in value.items()))


_PARSER_BY_TYPE = {"int": parse_int, "float": parse_float, "bool": parse_bool,
                   "int | None": _as_optional_int, "tuple[int, ...]": _as_int_tuple,
                   "tuple[int, ...] | None": _as_optional_int_tuple, "tuple[str, ...]": _as_str_tuple,
                   "tuple[tuple[int, float], ...]": _as_bias,
                   "StructuredOutputs | None": StructuredOutputs.parse}
_FIELD_PARSERS = {f.name: _PARSER_BY_TYPE[str(f.type)] for f in dataclasses.fields(SamplingParams)}
