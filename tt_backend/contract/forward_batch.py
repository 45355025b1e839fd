"""The forward batch: the device tensors of one padded model call, as the model reads them."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ForwardBatch:
    """Device tensors of one step; rows are padded to a common length T."""

    input_ids: torch.Tensor  # [B, T] long
    positions: torch.Tensor  # [B, T] long, absolute position of each token
    slot_mapping: torch.Tensor  # [B, T] long, flat KV slot (block * block_size + offset); −1 = skip
    block_tables: torch.Tensor  # [B, max_blocks] long, physical block of each logical block
    context_lens: torch.Tensor  # [B] long, valid KV positions after this step's writes
    logits_indices: torch.Tensor  # [B] long, index in T whose logits are returned
    decode: bool = False
    """A decode step: one query token per row (T = 1), at position context_len - 1."""
    embeds: torch.Tensor | None = None
    """[B, T, hidden] in the activations' dtype: where `embed_mask` is set, these replace the token
    embeddings (the encoder output of the images whose placeholders the rows hold); eager prefill only."""
    embed_mask: torch.Tensor | None = None
    """[B, T, 1] bool: the positions `embeds` fills."""
    image_ends: torch.Tensor | None = None
    """[B, T] long: for a token of an image whose tokens attend to each other (Gemma 3), the position
    its image ends at; 0 elsewhere. A model that reads it lets such a token see the keys of its own
    image after it."""
    rope_positions: torch.Tensor | None = None
    """[3, B, T] long: each token's (temporal, height, width) rotary position, for a model with M-RoPE
    whose rows hold images (PlannedRow.rope_images); None: `positions` are the rotary positions."""

    def with_images(self, x: torch.Tensor) -> torch.Tensor:
        """The rows' input embeddings `x` [B, T, hidden] (the model's token embeddings, scaled as it
        scales them), with `embeds` in their place where `embed_mask` is set."""
        if self.embeds is None or self.embed_mask is None:
            return x
        return torch.where(self.embed_mask, self.embeds.to(x.dtype), x)

    @property
    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.input_ids, self.positions, self.slot_mapping, self.block_tables, self.context_lens,
                self.logits_indices)
