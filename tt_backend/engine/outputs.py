"""What the engine hands to its caller for each request, step by step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FinishReason = Literal["stop", "length", "abort", "error"]
FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "abort", "error")


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    new_token_ids: tuple[int, ...]
    """Tokens generated since the previous output of this request."""
    context_token_ids: tuple[int, ...]
    """The tokens just before `new_token_ids` that decoding them exactly needs."""
    text: str
    """Text of `new_token_ids`: `delta_text(context_token_ids, new_token_ids)`."""
    num_prompt_tokens: int
    finish_reason: FinishReason | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
