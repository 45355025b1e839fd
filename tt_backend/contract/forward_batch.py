"""The forward batch: the device tensors of one padded model call, as the model reads them."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CrossInputs:
    """A step's rows' images for a cross-attention model (PlannedRow.cross_images): S is the most
    image tokens a row has; a row's image tokens lie at positions [0, lens[b]) of its blocks in each
    cross-attention layer's cache."""

    tables: torch.Tensor  # [B, W] long, physical blocks holding each row's image tokens; -1 past them
    lens: torch.Tensor  # [B] long, each row's image tokens (0: a row without images)
    sees: torch.Tensor  # [B, T, S] bool, which image tokens each token attends to
    features: torch.Tensor | None = None
    """[N, hidden]: encoder outputs of the images this step's rows reach, to write as keys and values."""
    slots: torch.Tensor | None = None
    """[N] long: the flat cache slot of each row of `features`."""

    def to(self, device: torch.device) -> CrossInputs:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=True)

        return CrossInputs(move(self.tables), move(self.lens), move(self.sees),
                           None if self.features is None else move(self.features),
                           None if self.slots is None else move(self.slots))


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

    cross: CrossInputs | None = None
    """The rows' images as a cross-attention model (Mllama) reads them; None when no row has any."""

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
