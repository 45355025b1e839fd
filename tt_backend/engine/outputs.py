"""What the engine hands to its caller for each request, step by step."""

from __future__ import annotations

from dataclasses import dataclass

from tt_backend.contract.errors import ErrorKind
from tt_backend.contract.modes import FinishReason


@dataclass(frozen=True)
class Logprob:
    """vLLM's Logprob: the raw log-probability of a token, its rank (1 = most likely) and text."""

    logprob: float
    rank: int
    decoded_token: str


PositionLogprobs = dict[int, Logprob]
"""One generated position: the sampled token and the requested top alternatives, by token id."""


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    new_token_ids: tuple[int, ...]
    """Tokens generated since the previous output of this request."""
    context_token_ids: tuple[int, ...]
    """The tokens just before `new_token_ids` that decoding them exactly needs."""
    text: str
    """New output text since the previous output. It is `delta_text(context_token_ids,
    new_token_ids)` except around stop strings: text that could begin one is held back until it
    cannot, and the text is cut at a matched stop string (vLLM's rule)."""
    num_prompt_tokens: int
    finish_reason: FinishReason | None = None
    error: str | None = None
    logprobs: tuple[PositionLogprobs, ...] | None = None
    """One entry per token of `new_token_ids` when the request asked for logprobs."""
    cumulative_logprob: float | None = None
    """Sum of the sampled tokens' logprobs so far, when the request asked for logprobs."""
    error_kind: ErrorKind | None = None
    """Whose fault `error` is (set with it): the code each front answers with."""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
