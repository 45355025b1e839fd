"""RequestLimits: how much one request may ask for, beyond what SamplingParams checks by itself
(engine options of the same names; the sampling layer applies them, the config sets them)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestLimits:
    """How many entries a request's lists may carry (each costs engine-thread time every step),
    and how long each string in them may be; engine options of the same names."""

    max_logit_bias: int = 1024
    max_allowed_token_ids: int = 1 << 18
    max_stop: int = 64
    max_stop_token_ids: int = 256
    max_bad_words: int = 256
    max_logits_processors: int = 16
    max_word_chars: int = 1024
    """The longest stop string or bad word (in characters)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{f.name} must be an integer >= 1, got {value!r}")
