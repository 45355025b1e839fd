"""A step's images as a cross-attention model (Mllama) reads them: where each row's image tokens lie in
its blocks, which of them each token attends to, and the encoder outputs to write this step.

A row's images (PlannedRow.cross_images, in prompt order) take positions [0, their cross_tokens in all)
of its blocks, image after image, in every cross-attention layer's cache: written in the prefill whose
chunk holds the image's placeholder (the encoder output, cached by image, then each layer's keys and
values of it), read by every later token of the request. Which tokens see which image follows
transformers' MllamaProcessor (`get_cross_attention_token_mask`): an image is seen from its
placeholder on, up to the next image's placeholder; a run of adjacent placeholders is seen together
until the run after it; the last image (run) is seen to the end, decode tokens included (HF's
generation repeats the prompt's last row of the mask). A token sees the leading `cross_seen` of its
image's tokens (the tiles that hold the image).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from tt_backend.contract.forward_batch import CrossInputs
from tt_backend.contract.step import ImageSpan, PlannedRow
from tt_backend.runtime.image_embeds import ImageEncoderCache
from tt_backend.runtime.inputs import physical_blocks


def seen_ranges(images: Sequence[ImageSpan]) -> list[tuple[float, float]]:
    """[first, end) positions of the tokens that see each image (MllamaProcessor's ranges)."""
    starts = [image.offset for image in images]
    ranges = [[a, float(b)] for a, b in zip(starts, starts[1:], strict=False)] + [[starts[-1], math.inf]]
    last_end = ranges[-1][1]
    for r in reversed(ranges):
        if r[0] == r[1] - 1:  # the next placeholder follows at once: seen with it, until its run ends
            r[1] = last_end
        last_end = r[1]
    return [(float(a), b) for a, b in ranges]


def cross_inputs(rows: Sequence[PlannedRow], cache: ImageEncoderCache, block_size: int,
                 blocks_per_lane: int | None, batch: int, seq_len: int) -> CrossInputs | None:
    """The cross inputs of a call's rows (row i at index i), or None when no row has images."""
    if not any(row.cross_images for row in rows):
        return None
    lens = [sum(image.cross_tokens for image in row.cross_images) for row in rows]
    width = -(-max(lens) // block_size)
    tables = np.full((batch, width), -1, dtype=np.int64)
    sees = np.zeros((batch, seq_len, max(lens)), dtype=bool)
    features: list[torch.Tensor] = []
    slots: list[np.ndarray] = []
    for b, (row, n) in enumerate(zip(rows, lens, strict=True)):
        if not n:
            continue
        blocks = physical_blocks(row, blocks_per_lane).numpy()
        assert len(blocks) * block_size >= n, "a row's blocks do not hold its images' tokens (kv_floor)"
        tables[b, :-(-n // block_size)] = blocks[:-(-n // block_size)]
        positions = row.start_position + np.arange(len(row.token_ids))
        base = 0
        for image, (first, end) in zip(row.cross_images, seen_ranges(row.cross_images), strict=True):
            sees[b, :len(positions), base:base + image.cross_seen] = \
                ((positions >= first) & (positions < end))[:, None]
            if row.start_position <= image.offset < row.context_len:  # this chunk holds its placeholder
                features.append(cache.output(image))
                at = np.arange(base, base + image.cross_tokens)
                slots.append(blocks[at // block_size] * block_size + at % block_size)
            base += image.cross_tokens
    t = torch.from_numpy
    return CrossInputs(t(tables), torch.tensor(lens + [0] * (batch - len(rows))), t(sees),
                       torch.cat(features) if features else None,
                       t(np.concatenate(slots)) if slots else None)
