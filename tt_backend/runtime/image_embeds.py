"""Image encoder outputs for prefill: computed once per image, cached by the image's key, and laid
into a wave's input embeddings where the rows hold its placeholders.

The cache keeps encoder outputs (on the device, in the activations' dtype) by `ImageSpan.key`, the
image's pixel hash, least recently used out first, up to `capacity_tokens` rows in all (vLLM sizes
its encoder cache in tokens too). A chunked prefill reads the same image's output for each chunk
it covers, and a second request with the same picture (or its prefix-cache miss past the image)
reads it again without running the encoder. An entry is never needed for correctness: a miss runs
the encoder again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tt_backend.contract.step import ImageSpan, PlannedRow

ENCODER_CACHE_TOKENS = 16384
"""Encoder-output rows the cache holds (LLaVA 1.5: 576 an image, so 28 images)."""

Encode = Callable[[object], torch.Tensor]
"""An image's encoder inputs (ImageSpan.pixels) → its output [placeholder tokens, hidden]."""


class ImageEncoderCache:
    def __init__(self, encode: Encode, capacity_tokens: int = ENCODER_CACHE_TOKENS) -> None:
        self.encode = encode
        self.capacity_tokens = capacity_tokens
        self._outputs: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._tokens = 0
        self.hits = 0
        """Images whose encoder output was read from the cache."""
        self.misses = 0
        """Images the encoder ran for."""

    def output(self, image: ImageSpan) -> torch.Tensor:
        """[image.length, hidden] (a cross-attention model's: [image.cross_tokens, hidden]): the
        image's encoder output."""
        out = self._outputs.get(image.key)
        if out is not None:
            self._outputs.move_to_end(image.key)
            self.hits += 1
            return out
        self.misses += 1
        out = self.encode(image.pixels)
        rows = image.cross_tokens or image.length
        if out.shape[0] != rows:
            raise RuntimeError(f"the image encoder gave {out.shape[0]} rows for an image of {rows} "
                               "tokens (the processor and the model disagree)")
        self._outputs[image.key] = out
        self._tokens += rows
        while self._tokens > self.capacity_tokens and len(self._outputs) > 1:
            _, old = self._outputs.popitem(last=False)
            self._tokens -= old.shape[0]
        return out

    def clear(self) -> None:
        self._outputs.clear()
        self._tokens = 0


@dataclass(frozen=True)
class WaveImages:
    embeds: torch.Tensor
    """[batch, seq_len, hidden]: the encoder outputs at their placeholders' places."""
    mask: torch.Tensor
    """[batch, seq_len, 1] bool: the places they fill."""
    ends: torch.Tensor | None
    """[batch, seq_len] long: for a token of a bidirectional image, the position its image ends at
    (its keys up to there are visible); 0 elsewhere. None: the rows hold no bidirectional image."""


def image_embeds(rows: Sequence[PlannedRow], cache: ImageEncoderCache, batch: int,
                 seq_len: int) -> WaveImages | None:
    """The wave's image inputs, row i of the wave at index i; None when no row holds an image."""
    embeds: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    ends: torch.Tensor | None = None
    for i, row in enumerate(rows):
        for image in row.images:
            if image.cross_tokens:  # read by cross-attention (runtime/cross_images.py), not embedded
                continue
            out = cache.output(image)
            if embeds is None or mask is None:
                embeds = out.new_zeros(batch, seq_len, out.shape[1])
                mask = torch.zeros(batch, seq_len, 1, dtype=torch.bool, device=out.device)
            lo, hi = max(image.offset, row.start_position), min(image.end, row.context_len)
            at = lo - row.start_position
            embeds[i, at:at + hi - lo] = out[lo - image.offset:hi - image.offset]
            mask[i, at:at + hi - lo] = True
            if image.bidirectional:
                assert hi == image.end, "a bidirectional image is prefilled whole (past its cached part)"
                if ends is None:
                    ends = torch.zeros(batch, seq_len, dtype=torch.long, device=out.device)
                ends[i, at:at + hi - lo] = image.end
    return None if embeds is None or mask is None else WaveImages(embeds, mask, ends)
