"""A request as the scheduler tracks it, and its lifecycle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tt_backend.contract.modes import RequestStatus
from tt_backend.contract.step import ImageSpan
from tt_backend.sampling.params import SamplingParams


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    """Tokens whose K/V is in the cache."""
    prefill_target: int = 0
    """Tokens the current prefill must compute; set on admission (prompt, or all on resume)."""
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    """Content hashes of the full blocks of all known tokens (with prefix caching)."""
    num_registered_blocks: int = 0
    """Leading blocks whose content is registered in the pool's prefix cache."""
    precondition: Callable[[], bool] | None = None
    """Admission waits (in skipped_waiting) until this returns true."""
    slot: int | None = None
    """Its row slot in the lane (0 ≤ slot < max_num_seqs) while running."""
    images: tuple[ImageSpan, ...] = ()
    """Its images' placeholder spans in the prompt, in order (a vision-language model's request)."""

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_id(self, position: int) -> int:
        n = len(self.prompt_token_ids)
        return self.prompt_token_ids[position] if position < n else self.output_token_ids[position - n]

    def token_slice(self, start: int, stop: int) -> tuple[int, ...]:
        n = len(self.prompt_token_ids)
        if stop <= n:
            return self.prompt_token_ids[start:stop]
        return self.prompt_token_ids[start:] + tuple(self.output_token_ids[max(start - n, 0):stop - n])

    @property
    def rope_images(self) -> tuple[ImageSpan, ...]:
        """Its images, when its model's rotary positions follow their grids (PlannedRow.rope_images)."""
        return self.images if any(image.grid is not None for image in self.images) else ()

    @property
    def cross_images(self) -> tuple[ImageSpan, ...]:
        """Its images, when its model reads them by cross-attention (PlannedRow.cross_images)."""
        return self.images if any(image.cross_tokens for image in self.images) else ()

    @property
    def kv_floor(self) -> int:
        """Tokens its blocks hold at least: its images' cross-attention keys and values lie at
        positions [0, kv_floor) of its blocks (PlannedRow.cross_images)."""
        return sum(image.cross_tokens for image in self.images)

    def images_in(self, start: int, stop: int) -> tuple[ImageSpan, ...]:
        """The images whose placeholders overlap positions [start, stop)."""
        return tuple(image for image in self.images if image.overlaps(start, stop))

    def chunk_stop(self, start: int, stop: int) -> int:
        """The furthest end <= `stop` of a prefill chunk from `start` that splits no bidirectional image
        (`start`: nothing fits)."""
        for image in self.images:
            if image.bidirectional and image.offset < stop < image.end:
                stop = max(image.offset, start)
        return stop

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed_tokens < self.prefill_target
