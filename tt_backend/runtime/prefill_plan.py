"""Prefill planning: the rows of a prefill step grouped into padded physical waves.

Within a step, rows are bucketed by the next power of two of their length (at least 16), and a
bucket is padded to the length bucket of its longest row: the power of two in quarter steps (…, 64,
80, 96, 112, 128, 160, …), so 100-token prompts pad to 112, not 128, without splitting rows the
power-of-two bucket would have kept together; where a shape costs only its capture (`fine_lengths`),
in sixteenth steps (…, 96, 100, 104, …, 128, 136, …). A bucket that may be batched is kept whole and
its row count padded up to the next physical batch in {1, 2, 4, 8, 16, 32} (15 rows → one padded-16
wave), or in the denser DENSE_BATCHES where the device allows. A bucket whose padded wave would
exceed `max_wave_tokens` is cut into the fewest waves that fit (this bounds the set of shapes, so
every one of them can be compiled and traced ahead of time). A bucket falls back to sequential
single-row waves, each still padded to its length bucket, when:
- batched prefill is unsupported by the model, or disabled (`disable_batched_prefill`);
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

from dataclasses import dataclass

from tt_backend.contract.modes import StepMode
from tt_backend.contract.step import PlannedRow, StepPlan

PHYSICAL_BATCHES = (1, 2, 4, 8, 16, 32)
DENSE_BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32)
"""For a device where one more traced shape costs little (the torch CPU device shares one graph
per step function across shapes): a wave pads at most 15% of its rows (17 -> 20), where the
powers of two pad up to 44% (9 -> 16). Seven 112-token rows took 173 ms padded to 8."""
MIN_PADDED_LEN = 16
FINE_MIN_PADDED_LEN = 4
MAX_WAVE_TOKENS = 128 * 1024


@dataclass(frozen=True)
class PrefillPlanConfig:
    batching_supported: bool
    max_physical_batch: int
    """The smaller of the model's maximum prefill batch and the lane capacity."""
    regular_chunk_size: int
    max_wave_tokens: int = MAX_WAVE_TOKENS - 1
    """Padded batch × padded length of one wave, at most."""
    batches: tuple[int, ...] = PHYSICAL_BATCHES
    """The physical batches a wave's rows are padded to (beyond the last: not padded)."""
    fine_lengths: bool = False
    """Rows pad to `padded_length(n, fine=True)`."""

    def __post_init__(self) -> None:
        assert self.max_physical_batch >= 1 and self.regular_chunk_size >= 1
        assert 1 <= self.max_wave_tokens < MAX_WAVE_TOKENS
        assert self.batches[0] == 1 and list(self.batches) == sorted(set(self.batches))

    @classmethod
    def resolve(cls, batching_supported: bool, model_max_batch: int, lane_capacity: int,
                regular_chunk_size: int, batches: tuple[int, ...] = PHYSICAL_BATCHES, *,
                batching_disabled: bool, fine_lengths: bool = False) -> PrefillPlanConfig:
        """`batching_supported`: by the model; `batching_disabled`: by the user."""
        return cls(batching_supported and not batching_disabled, min(model_max_batch, lane_capacity),
                   regular_chunk_size, min(regular_chunk_size, MAX_WAVE_TOKENS - 1), batches, fine_lengths)

    def padded_batch(self, n: int) -> int:
        return next(b for b in self.batches if b >= n) if n <= self.batches[-1] else n


@dataclass(frozen=True)
class PrefillWave:
    source_rows: tuple[int, ...]
    """Indices into the step's rows; the wave's active rows, in order."""
    padded_batch: int
    padded_len: int


def padded_length(n: int, fine: bool = False) -> int:
    """Length bucket: n rounded up to a quarter of the power of two below it (multiples of 16 up
    to 128, of 32 up to 256, ...), at least MIN_PADDED_LEN. At most 1/4 of the row is padding
    (it was up to 1/2 with powers of two), for 3x the shapes.
    `fine` (a device where a shape costs only its capture): to a sixteenth (multiples of 4 up to 128,
    of 8 up to 256, ...), at least FINE_MIN_PADDED_LEN, for 4x the shapes. 100-token rows pad to 100,
    not 112: a 16-row prefill wave took 200-206 ms against 222-226 ms padded to 112 (the same
    process, alternating; the linears run at the CPU's matmul peak, so padding costs its share)."""
    if fine:
        step = max(FINE_MIN_PADDED_LEN, _power_bucket(n) // 32)
        return max(FINE_MIN_PADDED_LEN, -(-n // step) * step)
    step = max(MIN_PADDED_LEN, _power_bucket(n) // 8)
    return max(MIN_PADDED_LEN, -(-n // step) * step)


def _power_bucket(n: int) -> int:
    """Rows whose lengths share this (the next power of two, at least MIN_PADDED_LEN) may share a wave."""
    return max(MIN_PADDED_LEN, 1 << (n - 1).bit_length())


def plan_prefill(plan: StepPlan, config: PrefillPlanConfig) -> tuple[PrefillWave, ...]:
    assert plan.mode is StepMode.PREFILL
    buckets: dict[int, list[int]] = {}
    for i, row in enumerate(plan.rows):
        buckets.setdefault(_power_bucket(len(row.token_ids)), []).append(i)
    padded = [padded_length(len(row.token_ids), config.fine_lengths) for row in plan.rows]
    waves: list[PrefillWave] = []
    for bucket in sorted(buckets):
        members = buckets[bucket]
        length = max(padded[i] for i in members)
        fit = max((b for b in config.batches if b * length <= config.max_wave_tokens), default=1)
        if _sequential(config, [plan.rows[i] for i in members], config.padded_batch(min(len(members), fit)),
                       length):
            waves.extend(PrefillWave((i,), 1, padded[i]) for i in members)
            continue
        for first in range(0, len(members), fit):
            part = tuple(members[first:first + fit])
            waves.append(PrefillWave(part, config.padded_batch(len(part)), length))
    return tuple(waves)


def _sequential(config: PrefillPlanConfig, rows: list[PlannedRow], batch: int, length: int) -> bool:
    return (
        not config.batching_supported
        or batch > config.max_physical_batch
        or any(r.start_position > 0 for r in rows)
        or length > config.regular_chunk_size
        or (len(rows) > 1 and batch == 1)  # not even two rows fit in max_wave_tokens
    )
