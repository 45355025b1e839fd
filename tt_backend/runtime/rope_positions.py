"""M-RoPE positions (Qwen2-VL): each token's (temporal, height, width) rotary position, from its
request's images (transformers models/qwen2_vl/modeling_qwen2_vl.py, `get_rope_index`).

A text token's three positions are equal. An image of t×h×w tokens (after the merger) starting
where the text reached position s places its token (i, j, k) at (s + i, s + j, s + k), and the
text after it continues at s + max(t, h, w) (an image is one frame: s + max(h, w)): fewer positions
than tokens, so each token after an image, every generated one included, sits
at its index plus the sum of the images' shifts before it (negative).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tt_backend.contract.step import ImageSpan


def rope_positions(images: Sequence[ImageSpan], start: int, count: int) -> np.ndarray:
    """[3, count] int64: the rotary positions of the request's tokens [start, start + count)."""
    index = np.arange(start, start + count, dtype=np.int64)
    out = np.broadcast_to(index, (3, count)).copy()
    shift = 0  # rotary position minus index, for text after the images so far
    for image in images:
        assert image.grid is not None, "an M-RoPE image has its grid"
        t, h, w = image.grid
        assert t * h * w == image.length, f"grid {image.grid} for an image of {image.length} tokens"
        lo, hi = max(image.offset, start), min(image.end, start + count)
        after = index >= image.end
        if lo < hi:
            inside = np.arange(lo, hi) - image.offset  # the tokens' indices within the image
            base = image.offset + shift
            at = slice(lo - start, hi - start)
            out[0, at] = base + inside // (h * w)
            out[1, at] = base + inside // w % h
            out[2, at] = base + inside % w
        shift += max(t, h, w) - image.length
        out[:, after] = (index[after] + shift)[None, :]
    return out
