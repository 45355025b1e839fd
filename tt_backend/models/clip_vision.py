"""CLIP's vision tower on torch (transformers models/clip/modeling_clip.py, CLIPVisionTransformer),
as LLaVA reads it: the hidden states after a chosen number of encoder layers.

Patches of `patch_size` pixels are embedded by a convolution, a learned class embedding leads them
and learned position embeddings are added; a LayerNorm (`pre_layrnorm`, HF's spelling) precedes
pre-norm encoder layers (LayerNorm, multi-head attention with biases over every patch, LayerNorm,
an MLP of `hidden_act`). HF's hidden_states[k] is the stream after k layers (0: after the
pre-LayerNorm), so `features(pixels, layers)` runs only as many layers as the deepest one asked for.
The post-LayerNorm (CLIP's pooled output) is not part of what LLaVA reads; its weights are not kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def activation(name: str) -> Any:
    """HF's ACT2FN for the names vision towers and projectors use."""
    acts = {"quick_gelu": lambda x: x * torch.sigmoid(1.702 * x), "gelu": F.gelu,
            "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "relu": F.relu}
    if name not in acts:
        raise ValueError(f"hidden_act={name!r} is not supported in a vision tower (known: {', '.join(acts)})")
    return acts[name]


class ClipEmbeddings(nn.Module):
    position_ids: torch.Tensor

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        dim, patch = hf["hidden_size"], hf["patch_size"]
        self.class_embedding = nn.Parameter(torch.zeros(dim))
        self.patch_embedding = nn.Conv2d(hf.get("num_channels", 3), dim, patch, stride=patch, bias=False)
        self.num_positions = (hf["image_size"] // patch) ** 2 + 1
        self.position_embedding = nn.Embedding(self.num_positions, dim)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        patches = self.patch_embedding(pixels.to(self.patch_embedding.weight.dtype))
        patches = patches.flatten(2).transpose(1, 2)
        if patches.shape[1] + 1 != self.num_positions:
            raise ValueError(f"pixel_values of {tuple(pixels.shape[-2:])} give {patches.shape[1]} patches; "
                             f"the tower has position embeddings for {self.num_positions - 1}")
        cls = self.class_embedding.expand(patches.shape[0], 1, -1)
        return torch.cat([cls, patches], dim=1) + self.position_embedding.weight[None]


class ClipAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, N, self.heads, D // self.heads).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(B, N, D))


class ClipMLP(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class ClipLayer(nn.Module):
    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        dim, eps = hf["hidden_size"], hf.get("layer_norm_eps", 1e-5)
        self.layer_norm1, self.layer_norm2 = nn.LayerNorm(dim, eps=eps), nn.LayerNorm(dim, eps=eps)
        self.self_attn = ClipAttention(dim, hf["num_attention_heads"])
        self.mlp = ClipMLP(dim, hf["intermediate_size"], hf.get("hidden_act", "quick_gelu"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class ClipEncoder(nn.Module):
    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(ClipLayer(hf) for _ in range(hf["num_hidden_layers"]))


class ClipVisionTower(nn.Module):
    """Module names follow HF's CLIPVisionTransformer, so its state dict loads as is."""

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        self.embeddings = ClipEmbeddings(hf)
        self.pre_layrnorm = nn.LayerNorm(hf["hidden_size"], eps=hf.get("layer_norm_eps", 1e-5))
        self.encoder = ClipEncoder(hf)

    def hidden_states(self, pixels: torch.Tensor, layers: Sequence[int]) -> list[torch.Tensor]:
        """HF's hidden_states[k] for each k of `layers` (negative: from the end, as HF indexes)."""
        count = len(self.encoder.layers)
        wanted = [k % (count + 1) for k in layers]
        x = self.pre_layrnorm(self.embeddings(pixels))
        states = {0: x}
        for k, layer in enumerate(self.encoder.layers[:max(wanted)], start=1):
            x = layer(x)
            states[k] = x
        return [states[k] for k in wanted]
