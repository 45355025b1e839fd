"""Llama 3.2 Vision's tiled vision tower on torch (transformers models/mllama/modeling_mllama.py,
MllamaVisionModel, read for each point) and its projector: the image features that Mllama's
cross-attention layers read.

An image comes as up to `max_num_tiles` tiles of `image_size` pixels (transformers'
MllamaImageProcessor cuts them; `aspect_ratio_ids` names the tile grid, 0 for none, and
`aspect_ratio_mask` marks the tiles that hold the image). Per tile:
- a convolution embeds the patches, a gated aspect-ratio embedding is added per tile, a class
  embedding leads the patches, and a gated position embedding (`1 - tanh(gate)` of the per-patch
  one, `tanh(gate)` of the per-tile one for the aspect ratio) is added; a LayerNorm follows;
- the patches of every tile are padded to a multiple of 8 and one attention runs over all tiles'
  patches at once. HF's mask (`_prepare_aspect_ratio_attention_mask`) is the outer product of the
  padding marks: only a pair of two padding positions (a padded patch or a tile without image) is
  masked out, and that is kept as is;
- the local transformer (pre-LayerNorm layers, ungated), a LayerNorm, a gated aspect-ratio
  embedding, then the global transformer (the same layers with `tanh`-gated attention and MLP);
- the features are the global transformer's output, then the local transformer's outputs after
  the layers `intermediate_layers_indices` names (HF's encoder states: index i is the output of
  layer i + 1) interleaved as HF stacks them (feature d * n + i: state i's dimension d), padding
  patches dropped: [images, tiles, patches + 1, hidden * (1 + n)].
The projector (`multi_modal_projector`, a Linear with bias) takes them to the text model's width.
models/mllama.py turns them into each cross-attention layer's keys and values, written once per
request.

Module names follow HF's, so a checkpoint's `vision_model.*` and `multi_modal_projector.*` load as
they are.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tt_backend.models.clip_vision import ClipMLP

PATCH_ALIGN = 8
"""HF pads each tile's patches (the class embedding included) to a multiple of this."""


DEFAULT_ASPECT_RATIOS = ((1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (3, 1), (4, 1))
"""MllamaVisionConfig's supported_aspect_ratios when a config leaves them out (for 4 tiles)."""


def max_aspect_ratio_id(vision: dict[str, Any]) -> int:
    """MllamaVisionConfig.max_aspect_ratio_id: the number of supported tile grids."""
    return len(vision.get("supported_aspect_ratios") or DEFAULT_ASPECT_RATIOS)


class AspectRatioEmbedding(nn.Module):
    """A tanh-gated embedding per tile of the image's tile grid (its aspect ratio id)."""

    def __init__(self, vision: dict[str, Any]) -> None:
        super().__init__()
        self.tiles, self.dim = vision.get("max_num_tiles", 4), vision["hidden_size"]
        self.embedding = nn.Embedding(max_aspect_ratio_id(vision) + 1, self.tiles * self.dim)
        self.gate = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor, ratio_ids: torch.Tensor) -> torch.Tensor:
        """x [images, tiles, patches, dim]; ratio_ids [images]."""
        return x + self.embedding(ratio_ids).view(-1, self.tiles, 1, self.dim) * self.gate.tanh()


class GatedPositionEmbedding(nn.Module):
    """Per patch, weighted by 1 - tanh(gate); per tile of the grid and patch, by tanh(gate)."""

    def __init__(self, vision: dict[str, Any]) -> None:
        super().__init__()
        self.tiles, self.dim = vision.get("max_num_tiles", 4), vision["hidden_size"]
        self.patches = (vision["image_size"] // vision["patch_size"]) ** 2 + 1
        self.gate = nn.Parameter(torch.zeros(1))
        self.embedding = nn.Parameter(torch.zeros(self.patches, self.dim))
        grids = max_aspect_ratio_id(vision) + 1
        self.tile_embedding = nn.Embedding(grids, self.tiles * self.patches * self.dim)

    def forward(self, x: torch.Tensor, ratio_ids: torch.Tensor) -> torch.Tensor:
        gate = self.gate.tanh()
        x = x + ((1 - gate) * self.embedding).view(1, 1, self.patches, self.dim)
        return x + gate * self.tile_embedding(ratio_ids).view(-1, self.tiles, self.patches, self.dim)


class MllamaVisionAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.v_proj, self.o_proj = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, N, self.heads, D // self.heads).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, N, D))


class MllamaVisionLayer(nn.Module):
    def __init__(self, vision: dict[str, Any], gated: bool) -> None:
        super().__init__()
        dim, eps = vision["hidden_size"], vision.get("norm_eps", 1e-5)
        self.self_attn = MllamaVisionAttention(dim, vision["attention_heads"])
        self.mlp = ClipMLP(dim, vision["intermediate_size"], vision.get("hidden_act", "gelu"))
        self.input_layernorm = nn.LayerNorm(dim, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(dim, eps=eps)
        self.gated = gated
        if gated:  # HF's initial values; a checkpoint sets them
            self.gate_attn = nn.Parameter(torch.full((1,), torch.pi / 4))
            self.gate_ffn = nn.Parameter(torch.full((1,), torch.pi / 4))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attn = self.self_attn(self.input_layernorm(x), mask)
        x = x + (self.gate_attn.tanh() * attn if self.gated else attn)
        mlp = self.mlp(self.post_attention_layernorm(x))
        return x + (self.gate_ffn.tanh() * mlp if self.gated else mlp)


class MllamaVisionEncoder(nn.Module):
    def __init__(self, vision: dict[str, Any], layers: int, gated: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MllamaVisionLayer(vision, gated) for _ in range(layers))


class MllamaVisionTower(nn.Module):
    """HF's MllamaVisionModel (module names as HF's `vision_model.*`)."""

    def __init__(self, vision: dict[str, Any]) -> None:
        super().__init__()
        dim, patch = vision["hidden_size"], vision["patch_size"]
        self.tiles, self.dim = vision.get("max_num_tiles", 4), dim
        self.num_patches = (vision["image_size"] // patch) ** 2 + 1
        self.intermediate = list(vision.get("intermediate_layers_indices", [3, 7, 15, 23, 30]))
        self.patch_embedding = nn.Conv2d(vision.get("num_channels", 3), dim, patch, stride=patch, bias=False)
        self.class_embedding = nn.Parameter(torch.zeros(dim))
        self.gated_positional_embedding = GatedPositionEmbedding(vision)
        self.pre_tile_positional_embedding = AspectRatioEmbedding(vision)
        self.post_tile_positional_embedding = AspectRatioEmbedding(vision)
        self.layernorm_pre, self.layernorm_post = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.transformer = MllamaVisionEncoder(vision, vision["num_hidden_layers"], gated=False)
        self.global_transformer = MllamaVisionEncoder(vision, vision.get("num_global_layers", 8), gated=True)
        if self.intermediate and not all(0 <= i < vision["num_hidden_layers"] for i in self.intermediate):
            raise ValueError(f"intermediate_layers_indices={self.intermediate} must index the "
                             f"{vision['num_hidden_layers']} layers of the vision transformer")

    @property
    def output_dim(self) -> int:
        """The width of a patch's features (HF's vision_output_dim)."""
        return self.dim * (1 + len(self.intermediate))

    def forward(self, pixels: torch.Tensor, ratio_ids: torch.Tensor,
                ratio_mask: torch.Tensor) -> torch.Tensor:
        """pixels [images, tiles, channels, H, W], ratio_ids [images], ratio_mask [images, tiles] ->
        features [images, tiles, patches + 1, output_dim]."""
        images, tiles = pixels.shape[:2]
        if tiles != self.tiles:
            raise ValueError(f"pixel_values hold {tiles} tiles an image; the tower takes {self.tiles}")
        x = self.patch_embedding(pixels.flatten(0, 1).to(self.patch_embedding.weight.dtype))
        x = x.flatten(2).transpose(1, 2)  # [images * tiles, patches, dim]
        if x.shape[1] + 1 != self.num_patches:
            raise ValueError(f"pixel_values of {tuple(pixels.shape[-2:])} give {x.shape[1]} patches a tile; "
                             f"the tower has position embeddings for {self.num_patches - 1}")
        x = self.pre_tile_positional_embedding(x.view(images, tiles, -1, self.dim), ratio_ids)
        cls = self.class_embedding.expand(images * tiles, 1, self.dim)
        x = torch.cat([cls, x.flatten(0, 1)], dim=1).view(images, tiles, self.num_patches, self.dim)
        x = self.layernorm_pre(self.gated_positional_embedding(x, ratio_ids))
        padded = -(-self.num_patches // PATCH_ALIGN) * PATCH_ALIGN
        x = F.pad(x, (0, 0, 0, padded - self.num_patches))
        mask = self._mask(ratio_mask, padded, x.dtype)
        x = x.view(images, tiles * padded, self.dim)
        states = []
        for layer in self.transformer.layers:
            x = layer(x, mask)
            states.append(x)
        x = self.layernorm_post(x).view(images, tiles, padded, self.dim)
        x = self.post_tile_positional_embedding(x, ratio_ids).view(images, tiles * padded, self.dim)
        for layer in self.global_transformer.layers:
            x = layer(x, mask)
        # HF stacks the intermediate states on a last axis: feature d * n + i is state i's dim d.
        features = [x]
        if self.intermediate:
            features.append(torch.stack([states[i] for i in self.intermediate], dim=-1).flatten(-2))
        out = torch.cat(features, dim=-1).view(images, tiles, padded, self.output_dim)
        return out[:, :, :self.num_patches]

    def _mask(self, ratio_mask: torch.Tensor, padded: int, dtype: torch.dtype) -> torch.Tensor:
        """HF's additive mask [images, 1, tiles * padded, tiles * padded]: the dtype's minimum where
        both positions are padding (a padded patch, or any patch of a tile outside the image)."""
        pad = (1 - ratio_mask.to(dtype)).view(-1, self.tiles, 1).repeat(1, 1, padded)
        pad[:, :, self.num_patches:] = 1
        pad = pad.reshape(-1, self.tiles * padded, 1)
        return (pad @ pad.transpose(1, 2) * torch.finfo(dtype).min).unsqueeze(1)


def projector(hf: dict[str, Any]) -> nn.Linear:
    """HF's `multi_modal_projector`: a Linear (with bias) from the tower's features to the text
    model's width."""
    return nn.Linear(hf["vision_config"]["vision_output_dim"], hf["text_config"]["hidden_size"])
