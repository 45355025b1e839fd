"""SigLIP's vision tower on torch (transformers models/siglip/modeling_siglip.py,
SiglipVisionTransformer), as Gemma 3 reads it: the last hidden state after the post-LayerNorm.

What differs from CLIP's (clip_vision.py, whose encoder layers it shares: the same pre-norm layers
and names): the patch convolution has a bias, there is no class token and no pre-LayerNorm, and a
LayerNorm follows the encoder. The attention-pooling head (`vision_use_head`) gives a pooled output
Gemma 3 does not read; its weights are not kept.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tt_backend.models.clip_vision import ClipEncoder


class SiglipEmbeddings(nn.Module):
    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        dim, patch = hf["hidden_size"], hf["patch_size"]
        self.patch_embedding = nn.Conv2d(hf.get("num_channels", 3), dim, patch, stride=patch)
        self.num_positions = (hf["image_size"] // patch) ** 2
        self.position_embedding = nn.Embedding(self.num_positions, dim)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        patches = self.patch_embedding(pixels.to(self.patch_embedding.weight.dtype))
        patches = patches.flatten(2).transpose(1, 2)
        if patches.shape[1] != self.num_positions:
            raise ValueError(f"pixel_values of {tuple(pixels.shape[-2:])} give {patches.shape[1]} patches; "
                             f"the tower has position embeddings for {self.num_positions}")
        return patches + self.position_embedding.weight[None]


class SiglipVisionTower(nn.Module):
    """Module names follow HF's SiglipVisionTransformer, so its state dict loads as is."""

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        self.embeddings = SiglipEmbeddings(hf)
        self.encoder = ClipEncoder({"hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, **hf})
        self.post_layernorm = nn.LayerNorm(hf["hidden_size"], eps=hf.get("layer_norm_eps", 1e-6))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """[images, patches, hidden]: HF's last_hidden_state."""
        x = self.embeddings(pixels)
        for layer in self.encoder.layers:
            x = layer(x)
        out: torch.Tensor = self.post_layernorm(x)
        return out
