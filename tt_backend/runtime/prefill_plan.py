"""Prefill planning: the rows of a prefill step grouped into padded physical waves.

Within a step, rows are bucketed by padded sequence length (the next power of two, at least 16);
a bucket that may be batched is kept whole and its row count padded up to the next physical batch
in {1, 2, 4, 8, 16, 32} (15 rows → one padded-16 wave). A bucket whose padded wave would exceed
`max_wave_tokens` is cut into the fewest waves that fit (this bounds the set of shapes, so every
one of them can be compiled and traced ahead of time). A bucket falls back to sequential
single-row waves, each still padded to its length bucket, when:
- batched prefill is unsupported by the model, or disabled (`DISABLE_BATCHED_PREFILL=1`);
- its padded batch exceeds the model's maximum physical prefill batch or the lane capacity;
- any row has cached tokens (prefix hit or a later chunk: start_position > 0);
- its padded sequence length exceeds the regular prefill chunk size;
- not even two of its rows fit in `max_wave_tokens` (at most 128 Ki − 1 tokens: the seed's rule
  that a wave of 128 Ki tokens or more is not batched becomes this bound).
These are planning choices, decided once here; the executor never falls back on its own.
Padding rows hold token 0 with page-table rows of −1, so they write no KV; results come back
in the original row order through `source_rows`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tt_backend.runtime.plan import PlannedRow, StepPlan

PHYSICAL_BATCHES = (1, 2, 4, 8, 16, 32)
MIN_PADDED_LEN = 16
MAX_WAVE_TOKENS = 128 * 1024


@dataclass(frozen=True)
class PrefillPlanConfig:
    batching_supported: bool
    max_physical_batch: int
    """The smaller of the model's maximum prefill batch and the lane capacity."""
    regular_chunk_size: int
    max_wave_tokens: int = MAX_WAVE_TOKENS - 1
    """Padded batch × padded length of one wave, at most."""

    def __post_init__(self) -> None:
        assert self.max_physical_batch >= 1 and self.regular_chunk_size >= 1
        assert 1 <= self.max_wave_tokens < MAX_WAVE_TOKENS

    @classmethod
    def resolve(cls, batching_supported: bool, model_max_batch: int, lane_capacity: int,
                regular_chunk_size: int) -> PrefillPlanConfig:
        disabled = os.environ.get("DISABLE_BATCHED_PREFILL", "0") not in ("", "0")
        return cls(batching_supported and not disabled, min(model_max_batch, lane_capacity),
                   regular_chunk_size, min(regular_chunk_size, MAX_WAVE_TOKENS - 1))


@dataclass(frozen=True)
class PrefillWave:
    source_rows: tuple[int, ...]
    """Indices into the step's rows; the wave's active rows, in order."""
    padded_batch: int
    padded_len: int


def padded_length(n: int) -> int:
    """Sequence bucket: the next power of two, at least MIN_PADDED_LEN."""
    return max(MIN_PADDED_LEN, 1 << (n - 1).bit_length())


def padded_batch(n: int) -> int:
    return next(b for b in PHYSICAL_BATCHES if b >= n) if n <= PHYSICAL_BATCHES[-1] else n


def plan_prefill(plan: StepPlan, config: PrefillPlanConfig) -> tuple[PrefillWave, ...]:
    assert plan.mode == "prefill"
    buckets: dict[int, list[int]] = {}
    for i, row in enumerate(plan.rows):
        buckets.setdefault(padded_length(len(row.token_ids)), []).append(i)
    waves: list[PrefillWave] = []
    for length in sorted(buckets):
        members = buckets[length]
        fit = max((b for b in PHYSICAL_BATCHES if b * length <= config.max_wave_tokens), default=1)
        if _sequential(config, [plan.rows[i] for i in members], padded_batch(min(len(members), fit)), length):
            waves.extend(PrefillWave((i,), 1, length) for i in members)
            continue
        for first in range(0, len(members), fit):
            part = tuple(members[first:first + fit])
            waves.append(PrefillWave(part, padded_batch(len(part)), length))
    return tuple(waves)


def _sequential(config: PrefillPlanConfig, rows: list[PlannedRow], batch: int, length: int) -> bool:
    return (
        not config.batching_supported
        or batch > config.max_physical_batch
        or any(r.start_position > 0 for r in rows)
        or length > config.regular_chunk_size
        or (len(rows) > 1 and batch == 1)  # not even two rows fit in max_wave_tokens
    )
