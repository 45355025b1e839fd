"""The immutable plan of one step, as the executor sees it (no torch, no request objects).

The scheduler produces a `StepPlan`; the executor turns it into device tensors. A row knows its
tokens, where they sit in the sequence, and its page table: nothing about requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from tt_backend.contract.modes import StepMode


@dataclass(frozen=True)
class PlannedRow:
    token_ids: tuple[int, ...]
    """Tokens whose K/V this step computes and writes."""
    start_position: int
    """Absolute position of token_ids[0]; the row's context after the step is start + len."""
    block_ids: tuple[int, ...]
    """Physical KV blocks in logical order, covering at least start + len tokens."""
    sample: bool
    """Whether the last token's logits produce a new token (false for non-final chunks)."""

    def __post_init__(self) -> None:
        assert self.token_ids, "a planned row computes at least one token"

    @property
    def context_len(self) -> int:
        return self.start_position + len(self.token_ids)


@dataclass(frozen=True)
class StepPlan:
    mode: StepMode
    rows: tuple[PlannedRow, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", StepMode(self.mode))  # a plain "decode" reads as its member
        assert (self.mode is StepMode.EMPTY) == (not self.rows), "only an empty step has no rows"
        if self.mode is StepMode.DECODE:
            assert all(len(r.token_ids) == 1 and r.sample for r in self.rows)

    @property
    def num_sampled(self) -> int:
        """Rows whose last token's logits produce a new token."""
        return sum(1 for row in self.rows if row.sample)


EMPTY_STEP = StepPlan(mode=StepMode.EMPTY, rows=())
