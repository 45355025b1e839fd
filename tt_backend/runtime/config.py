"""Frozen runtime policy, resolved once at construction: tracing, page-table geometry, the
decode and prefill shape sets, and what warmup must cover.

Every shape a step can take is decided here, so programs and traces can be prepared for all of
them before serving: decode batches are padded to a bucket, prefill rows to a power-of-two length
and a physical batch, and page tables to a power-of-two width (in blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tt_backend.contract.modes import (
    DEVICE_VARIANTS,
    OPERATIONS,
    SampleOnDeviceMode,
    StepMode,
    StepVariant,
    TraceMode,
)
from tt_backend.runtime.prefill_plan import PrefillPlanConfig, padded_length


def _powers_of_two_up_to(limit: int) -> tuple[int, ...]:
    """1, 2, 4, ... below `limit`, then `limit` itself."""
    values = [1 << i for i in range(limit.bit_length()) if 1 << i < limit]
    return (*values, limit)


@dataclass(frozen=True)
class TraceConfig:
    mode: TraceMode
    """Resolved: never AUTO."""

    @classmethod
    def resolve(cls, mode: str, auto: TraceMode) -> TraceConfig:
        """`mode` as the user set it; `auto` is what `auto` means on the device, its
        `default_trace_mode` (the device says why)."""
        assert auto is not TraceMode.AUTO, "a device's default trace mode is a resolved one"
        chosen = TraceMode.parse("trace_mode", mode)
        return cls(auto if chosen is TraceMode.AUTO else chosen)

    @property
    def decode(self) -> bool:
        return self.mode is not TraceMode.NONE

    @property
    def prefill(self) -> bool:
        return self.mode is TraceMode.ALL

    def traces(self, op: StepMode) -> bool:
        """Whether steps of this operation replay a captured trace."""
        return self.prefill if op is StepMode.PREFILL else self.decode


@dataclass(frozen=True)
class SamplingConfig:
    """Where tokens are chosen: inside the step (`sample_on_device_mode` names the operations that
    may) or on the host. The host path always exists: a batch that needs it takes it."""

    mode: SampleOnDeviceMode
    always_compat: bool = False
    """Force the host path for every batch (debugging, A/B checks)."""
    device_max_top_k: int | None = None
    """The largest top_k the device sampler draws from exactly (None: any, the torch sampler's
    full sort). Beyond it, and for an unrestricted top_k, a sampled row needs the host; a greedy
    row never does (tt-metal's sampler: at most 32 candidates)."""
    device_min_p: bool = True
    """Whether the device sampler applies min_p (tt-metal's does not)."""

    @classmethod
    def resolve(cls, mode: str, always_compat: bool = False, device_max_top_k: int | None = None,
                device_min_p: bool = True) -> SamplingConfig:
        return cls(SampleOnDeviceMode.parse("sample_on_device_mode", mode), always_compat, device_max_top_k,
                   device_min_p)

    def on_device(self, op: StepMode) -> bool:
        if self.always_compat:
            return False
        return self.mode is SampleOnDeviceMode.ALL or (
            self.mode is SampleOnDeviceMode.DECODE_ONLY and op == StepMode.DECODE)

    def variants(self, op: StepMode) -> tuple[StepVariant, ...]:
        """The step variants an operation may run: logits always, device sampling where allowed."""
        return (StepVariant.LOGITS, *DEVICE_VARIANTS) if self.on_device(op) else (StepVariant.LOGITS,)


@dataclass(frozen=True)
class PageTableLayout:
    """Block geometry shared by prefill and decode; `num_blocks` counts usable blocks (the
    physical cache holds one more, the padding sink). The cache is split into `lanes` equal
    regions, one per data-parallel lane, in lane order: a row's lane-local block b of lane l is
    physical block l × blocks_per_lane + b.

        [ lane 0: 0 .. P-1 | lane 1: P .. 2P-1 | ... | lane L-1 | sink ]   (P = blocks_per_lane)
    """

    block_size: int
    num_blocks: int
    max_blocks_per_seq: int
    lanes: int = 1

    def __post_init__(self) -> None:
        assert self.lanes >= 1 and self.num_blocks % self.lanes == 0, \
            f"{self.num_blocks} blocks do not split into {self.lanes} equal lane regions"

    @classmethod
    def resolve(cls, block_size: int, max_model_len: int, num_blocks: int, lanes: int = 1) -> PageTableLayout:
        """`num_blocks`: of every lane together (lanes × each lane's blocks)."""
        if block_size < 1 or num_blocks < 1:
            raise ValueError(f"block_size and num_blocks must be >= 1, got {block_size}, {num_blocks}")
        return cls(block_size, num_blocks, -(-max_model_len // block_size), lanes)

    def with_capacity(self, num_blocks: int) -> PageTableLayout:
        """The same geometry over fewer physical blocks (capacity decided late); never more, and
        still split evenly over the lanes."""
        if not 1 <= num_blocks <= self.num_blocks:
            raise ValueError(f"KV capacity may only shrink: {num_blocks} blocks requested, "
                             f"{self.num_blocks} is the construction-time ceiling")
        if num_blocks % self.lanes:
            raise ValueError(f"KV capacity of {num_blocks} blocks does not split into {self.lanes} lanes")
        return replace(self, num_blocks=num_blocks)

    @property
    def blocks_per_lane(self) -> int:
        """Each lane's region of the physical cache (what its scheduler's block pool numbers)."""
        return self.num_blocks // self.lanes

    @property
    def widths(self) -> tuple[int, ...]:
        """Page-table widths (blocks) a step may use: powers of two, then the per-sequence max."""
        return _powers_of_two_up_to(self.max_blocks_per_seq)

    def width_for(self, num_tokens: int) -> int:
        """The smallest width whose blocks hold `num_tokens`."""
        blocks = max(1, -(-num_tokens // self.block_size))
        return next(w for w in self.widths if w >= blocks) if blocks <= self.max_blocks_per_seq else blocks


StepKey = tuple[StepMode, StepVariant]
"""A step function: its operation and variant."""


@dataclass(frozen=True)
class StepShape:
    """The padded geometry of one model call: what programs and traces are keyed by."""

    op: StepMode
    """PREFILL or DECODE."""
    batch: int
    seq_len: int
    table_width: int
    variant: StepVariant = StepVariant.LOGITS
    """What the step returns: logits, or tokens chosen inside it (the sampling material)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", StepMode(self.op))
        object.__setattr__(self, "variant", StepVariant(self.variant))
        assert self.op in OPERATIONS

    @property
    def key(self) -> str:
        key = f"{self.op}:b{self.batch}:t{self.seq_len}:w{self.table_width}"
        return key if self.variant is StepVariant.LOGITS else f"{key}:{self.variant}"

    @property
    def step(self) -> StepKey:
        """Which step function runs this shape."""
        return self.op, self.variant

    def with_variant(self, variant: StepVariant) -> StepShape:
        return replace(self, variant=variant)


@dataclass(frozen=True)
class DecodeRuntimeConfig:
    layout: PageTableLayout
    batch_buckets: tuple[int, ...]

    @classmethod
    def resolve(cls, layout: PageTableLayout, max_num_seqs: int) -> DecodeRuntimeConfig:
        return cls(layout, _powers_of_two_up_to(max_num_seqs))

    def batch_for(self, rows: int) -> int:
        return next(b for b in self.batch_buckets if b >= rows)

    def shape(self, rows: int, max_context: int, variant: StepVariant = StepVariant.LOGITS) -> StepShape:
        return StepShape(StepMode.DECODE, self.batch_for(rows), 1, self.layout.width_for(max_context),
                         variant)

    @property
    def shapes(self) -> tuple[StepShape, ...]:
        return tuple(StepShape(StepMode.DECODE, b, 1, w)
                     for b in self.batch_buckets for w in self.layout.widths)


@dataclass(frozen=True)
class PrefillRuntimeConfig:
    layout: PageTableLayout
    plan: PrefillPlanConfig
    max_row_tokens: int
    """The longest row a prefill step may hold (a chunk, or a whole prompt without chunking)."""

    @classmethod
    def resolve(cls, layout: PageTableLayout, plan: PrefillPlanConfig,
                max_row_tokens: int) -> PrefillRuntimeConfig:
        return cls(layout, plan, max_row_tokens)

    def shape(self, batch: int, seq_len: int, max_context: int,
              variant: StepVariant = StepVariant.LOGITS) -> StepShape:
        # A row's keys span at least its own padded length, so a shape never depends on how much of
        # the prompt was cached: (1, T, W) with W * block_size >= T.
        width = self.layout.width_for(max(seq_len, max_context))
        return StepShape(StepMode.PREFILL, batch, seq_len, width, variant)

    @property
    def lengths(self) -> tuple[int, ...]:
        fine = self.plan.fine_lengths
        top, lengths = padded_length(self.max_row_tokens, fine), [padded_length(1, fine)]
        while lengths[-1] < top:  # each bucket's successor is the bucket of one token more
            lengths.append(padded_length(lengths[-1] + 1, fine))
        return tuple(lengths)

    @property
    def shapes(self) -> tuple[StepShape, ...]:
        """Every shape the planner can produce: padded waves of fresh rows (context = length), and
        single rows continuing a cached prefix or an earlier chunk (any wider table)."""
        out: list[StepShape] = []
        for length in self.lengths:
            batches = [b for b in self.plan.batches if b <= self.plan.max_physical_batch
                       and (b == 1 or b * length <= self.plan.max_wave_tokens)]
            out.extend(self.shape(b, length, length) for b in batches)
            first = self.layout.width_for(length)
            out.extend(StepShape(StepMode.PREFILL, 1, length, w) for w in self.layout.widths if w > first)
        return tuple(out)


@dataclass(frozen=True)
class WarmupConfig:
    """What warmup compiles and what it captures."""

    compile_shapes: tuple[StepShape, ...]
    capture_shapes: tuple[StepShape, ...]

    @classmethod
    def resolve(cls, trace: TraceConfig, decode: DecodeRuntimeConfig, prefill: PrefillRuntimeConfig,
                sampling: SamplingConfig) -> WarmupConfig:
        if trace.mode is TraceMode.NONE:
            return cls((), ())  # eager programs compile on first use; no gate is ever closed
        decode_shapes = _with_variants(decode.shapes, sampling.variants(StepMode.DECODE))
        prefill_shapes = _with_variants(prefill.shapes, sampling.variants(StepMode.PREFILL))
        captured = decode_shapes + (prefill_shapes if trace.prefill else ())
        return cls(decode_shapes + prefill_shapes, captured)


def _with_variants(shapes: tuple[StepShape, ...], variants: tuple[StepVariant, ...]) -> tuple[StepShape, ...]:
    return tuple(shape.with_variant(v) for v in variants for shape in shapes)
