"""The immutable plan of one step, as the executor sees it (no torch, no request objects).

The scheduler produces a `StepPlan`; the executor turns it into device tensors. A row knows its
tokens, where they sit in the sequence, its page table, its lane and its slot: nothing about
requests. Block ids are lane-local: each runner maps a lane's ids onto its own cache region.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tt_backend.contract.modes import StepMode


@dataclass(frozen=True)
class ImageSpan:
    """One image of a request: the placeholder tokens its encoder output replaces in the prompt."""

    key: str
    """The encoder-output cache key: the image's pixel hash (text/images.py ImageInput.sha256)."""
    offset: int
    """Absolute position of its first placeholder token."""
    length: int
    """Placeholder tokens it fills: its encoder output has this many rows."""
    pixels: object = field(default=None, repr=False, compare=False)
    """What the model's image encoder takes (its HF processor's output; opaque above the runtime)."""
    bidirectional: bool = False
    """Its tokens attend to each other both ways in prefill (Gemma 3), so a prefill chunk holds all of
    them or none."""
    grid: tuple[int, int, int] | None = None
    """(t, h, w): its tokens as a grid of frames, rows and columns, for a model whose rotary positions
    follow it (M-RoPE, Qwen2-VL: `runtime/rope_positions.py`); None for other models."""
    cross_tokens: int = 0
    """For a model that reads images by cross-attention (Mllama): the image's tokens in the
    cross-attention KV (every tile's, padding tiles too), its encoder output's rows; its one
    placeholder token keeps its own embedding. 0 for other models."""
    cross_seen: int = 0
    """Of `cross_tokens`, the leading ones a token that sees the image attends to (its image's tiles)."""
    picture: object = field(default=None, repr=False, compare=False)
    """A cross-attention model's image itself (RGB PIL), for a generator that takes it as it is
    (tt-metal's Mllama runs its own image transform); None for other models."""

    @property
    def end(self) -> int:
        return self.offset + self.length

    def overlaps(self, start: int, stop: int) -> bool:
        return self.offset < stop and start < self.end


@dataclass(frozen=True)
class PlannedRow:
    token_ids: tuple[int, ...]
    """Tokens whose K/V this step computes and writes."""
    start_position: int
    """Absolute position of token_ids[0]; the row's context after the step is start + len."""
    block_ids: tuple[int, ...]
    """The lane's own KV blocks (0 ≤ id < the lane's num_blocks) in logical order, covering at least
    start + len tokens."""
    sample: bool
    """Whether the last token's logits produce a new token (false for non-final chunks)."""
    lane: int = 0
    """The data-parallel lane whose scheduler planned the row, and whose KV region its blocks are in."""
    slot: int = 0
    """The request's slot within its lane (0 ≤ slot < max_num_seqs), held while it runs: a runner
    with a fixed batch per lane places the row there."""
    prefix_token_ids: tuple[int, ...] = ()
    """A prefill row past a cached prefix or an earlier chunk: the tokens at positions [0, start)
    (tt-metal's prefill takes every row's whole sequence with start_pos); empty otherwise."""
    images: tuple[ImageSpan, ...] = ()
    """A prefill row's images whose placeholders overlap its tokens (their encoder output replaces
    those tokens' embeddings)."""
    rope_images: tuple[ImageSpan, ...] = ()
    """Every image of the row's request, for a model whose rotary positions follow their grids (M-RoPE:
    each image takes as many positions as its longest side, so every token after it, decode's too,
    sits at a position shifted from its index); empty for other models."""

    cross_images: tuple[ImageSpan, ...] = ()
    """Every image of the row's request, for a model that reads them by cross-attention (Mllama):
    their keys and values lie at positions [0, their cross_tokens in all) of the row's blocks in the
    cross-attention layers' caches, written in the prefill that reaches each image's placeholder;
    empty for other models."""

    def __post_init__(self) -> None:
        assert self.token_ids, "a planned row computes at least one token"
        assert self.lane >= 0 and self.slot >= 0, f"lane {self.lane}, slot {self.slot}"
        assert not self.prefix_token_ids or len(self.prefix_token_ids) == self.start_position, \
            f"{len(self.prefix_token_ids)} prefix tokens for a row at position {self.start_position}"

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
