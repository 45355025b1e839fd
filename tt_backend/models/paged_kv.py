"""The paged KV cache as torch ops see it: writing a step's K/V at their slots, gathering a row's
blocks in position order, and the causal mask over the gathered keys (the torch path; the native
CPU kernels read the blocks in place)."""

from __future__ import annotations

import torch

from tt_backend.contract.forward_batch import ForwardBatch


def write_kv(kv: torch.Tensor, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Store K/V of every token at its flat slot; padding (slot −1) lands in the sink slot."""
    flat = kv.view(2, -1, kv.shape[-2], kv.shape[-1])  # [2, num_blocks * block_size, KVH, D]
    slots = slot_mapping.reshape(-1)
    idx = torch.where(slots >= 0, slots, flat.shape[1] - 1)
    flat[0].index_copy_(0, idx, k.reshape(-1, *k.shape[2:]).to(kv.dtype))
    flat[1].index_copy_(0, idx, v.reshape(-1, *v.shape[2:]).to(kv.dtype))


def gather_kv(kv: torch.Tensor, block_tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of each row's context in position order: [B, KVH, max_blocks * block_size, D]."""
    B, nb = block_tables.shape
    flat = kv.view(2, kv.shape[1], -1)  # [2, num_blocks, block_size * KVH * D]: a block is one row
    blocks = flat.index_select(1, block_tables.clamp(min=0).reshape(-1))  # 1.3x faster than kv[:, tables]
    blocks = blocks.view(2, B, nb * kv.shape[2], kv.shape[3], kv.shape[4]).transpose(2, 3)
    return blocks[0], blocks[1]


def attention_mask(batch: ForwardBatch, num_keys: int, sliding_window: int | None = None,
                   image_ends: torch.Tensor | None = None) -> torch.Tensor:
    """[B, 1, T, S] bool: key s is visible to a query at position p iff s <= p (or, with `image_ends`
    e, s < e[p]: the rest of its image), s < context and, with a sliding window w, p - s < w."""
    s = torch.arange(num_keys, device=batch.positions.device)
    p = batch.positions[:, :, None]  # [B, T, 1]
    visible = s[None, None, :] <= p  # [B, T, S]
    if image_ends is not None:
        visible |= s[None, None, :] < image_ends[:, :, None]
    if sliding_window is not None:
        visible &= s[None, None, :] > p - sliding_window
    valid = s[None, :] < batch.context_lens[:, None]  # [B, S]
    return (visible & valid[:, None, :])[:, None]


def additive_mask(batch: ForwardBatch, num_keys: int, dtype: torch.dtype,
                  sliding_window: int | None = None, image_ends: torch.Tensor | None = None) -> torch.Tensor:
    """`attention_mask` as SDPA adds it: [B, 1, T, S] of 0 (visible) and -inf, in the activations' dtype
    (built once per step: SDPA would convert a boolean mask in every layer)."""
    visible = attention_mask(batch, num_keys, sliding_window, image_ends)
    mask = torch.zeros(visible.shape, dtype=dtype, device=batch.positions.device)
    return mask.masked_fill_(~visible, float("-inf"))
