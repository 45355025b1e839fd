"""Qwen2-VL (`Qwen2VLForConditionalGeneration`) on torch: its vision transformer and patch merger in
front of our Qwen2 text model with M-RoPE (transformers models/qwen2_vl/modeling_qwen2_vl.py, read
for each point).

The processor cuts an image, resized to a multiple of patch × merge pixels, into patches of
temporal_patch_size frames (an image is repeated), each flattened to one row of `pixel_values`,
ordered so that each merge × merge block of patches is consecutive, and gives the grid
`image_grid_thw` (frames, patch rows, patch columns). The tower embeds each patch linearly (HF's
Conv3d, whose kernel is the patch), runs pre-norm blocks whose attention rotates q and k by the
patch's (row, column) (2D RoPE: the first half of the rotated pairs by its row, the second by its
column) over the patches of one frame, and the merger concatenates each block's normed patches
into one token: an image is t·h·w / merge² placeholder tokens. The text model places those tokens
on a (t, h, w) grid of rotary positions (`ImageSpan.grid`, runtime/rope_positions.py).

Checkpoints name the parts `visual.*` / `model.*` / `lm_head.*` (before transformers 4.52) or
`model.visual.*` / `model.language_model.*` / `lm_head.*`: both load.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.models.capabilities import TORCH_LLAVA
from tt_backend.models.clip_vision import activation
from tt_backend.models.llama import Qwen2ForCausalLM
from tt_backend.models.llama_ops import NativeKernelModel
from tt_backend.models.vision_language import VisionLanguageModel


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class VisionAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], frame: int) -> torch.Tensor:
        """x: [patches, dim], frame after frame of `frame` patches each (a frame attends within itself)."""
        n = x.shape[0]
        q, k, v = self.qkv(x).reshape(n, 3, self.heads, -1).unbind(1)  # [n, heads, head_dim] each
        cos, sin = rope  # [n, 1, head_dim] fp32
        q, k = ((t.float() * cos + _rotate_half(t.float()) * sin).to(x.dtype) for t in (q, k))
        q, k, v = (t.reshape(n // frame, frame, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)  # [frames, heads, frame, head_dim]
        return self.proj(out.transpose(1, 2).reshape(n, -1))


class VisionMlp(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class VisionBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float, act: str) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = VisionAttention(dim, heads)
        self.mlp = VisionMlp(dim, int(dim * mlp_ratio), act)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], frame: int) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rope, frame)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    def __init__(self, out_dim: int, dim: int, merge: int) -> None:
        super().__init__()
        self.ln_q = nn.LayerNorm(dim, eps=1e-6)
        self.width = dim * merge * merge
        self.mlp = nn.Sequential(nn.Linear(self.width, self.width), nn.GELU(), nn.Linear(self.width, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.mlp(self.ln_q(x).reshape(-1, self.width))
        return out


class PatchEmbed(nn.Module):
    """HF's Conv3d over a patch whose kernel is the patch: a linear map of its flattened pixels."""

    def __init__(self, pixels: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(pixels, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.proj(x)
        return out


class Qwen2VisionTransformer(nn.Module):
    """Module names follow HF's Qwen2VisionTransformerPretrainedModel, so its state dict loads as is
    (the patch Conv3d's weight, flattened, is `patch_embed.proj`'s)."""

    inv_freq: torch.Tensor

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        dim, heads = hf["embed_dim"], hf["num_heads"]
        self.merge = int(hf.get("spatial_merge_size", 2))
        patch, frames = hf.get("patch_size", 14), hf.get("temporal_patch_size", 2)
        channels = hf.get("in_channels", hf.get("in_chans", 3))
        self.patch_embed = PatchEmbed(channels * frames * patch * patch, dim)
        self._register_load_state_dict_pre_hook(_flatten_patch_kernel)
        half = dim // heads // 2  # of the head's rotated pairs, the first half by row, the second by column
        theta = float((hf.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        exponents = torch.arange(0, half, 2, dtype=torch.int64, device="cpu").float() / half
        self.register_buffer("inv_freq", 1.0 / theta ** exponents, persistent=False)
        ratio, act = hf.get("mlp_ratio", 4), hf.get("hidden_act", "quick_gelu")
        self.blocks = nn.ModuleList(VisionBlock(dim, heads, ratio, act) for _ in range(hf["depth"]))
        self.merger = PatchMerger(hf["hidden_size"], dim, self.merge)

    def rope(self, grid: tuple[int, int, int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [t·h·w, 1, head_dim] fp32 of the patches in the processor's order (merge blocks
        consecutive): the first half of the rotated pairs by the patch's row, the second by its column."""
        t, h, w = grid
        m = self.merge
        rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        order = [pos.reshape(h // m, m, w // m, m).transpose(1, 2).flatten() for pos in (rows, cols)]
        at = torch.stack(order, dim=-1).repeat(t, 1).to(device)  # [n, 2]
        freqs = (at[..., None].float() * self.inv_freq.to(device)).flatten(1)  # [n, head_dim / 2]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        return emb.cos(), emb.sin()

    def forward(self, pixels: torch.Tensor, grid: tuple[int, int, int], dtype: torch.dtype) -> torch.Tensor:
        """[t·h·w / merge², hidden_size]: one image's tokens."""
        x = self.patch_embed(pixels.to(dtype))
        rope = self.rope(grid, x.device)
        for block in self.blocks:
            x = block(x, rope, grid[1] * grid[2])
        return self.merger(x)


def _flatten_patch_kernel(state: dict[str, torch.Tensor], prefix: str, *_: Any) -> None:
    name = f"{prefix}patch_embed.proj.weight"
    if name in state and state[name].dim() == 5:  # HF's Conv3d [dim, channels, frames, patch, patch]
        state[name] = state[name].flatten(1)


class Qwen2VLForConditionalGeneration(VisionLanguageModel, NativeKernelModel):
    capabilities = TORCH_LLAVA
    renames = (("model.visual.", "visual."), ("model.language_model.", "language_model.model."),
               ("model.", "language_model.model."), ("lm_head.", "language_model.lm_head."))

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__(hf)
        text = hf.get("text_config") or {k: v for k, v in hf.items() if k != "vision_config"}
        tie = hf.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        self.language_model = Qwen2ForCausalLM.from_hf_config({**text, "tie_word_embeddings": tie})
        if not self.language_model.config.rope.mrope_section:
            raise ValueError("a Qwen2-VL text config without rope_parameters.mrope_section (M-RoPE)")
        self.visual = Qwen2VisionTransformer(hf["vision_config"])
        self.merge = self.visual.merge

    def use_native_kernels(self, kernels: CpuKernels, dtype: torch.dtype) -> None:
        self.language_model.use_native_kernels(kernels, dtype)

    def encode_image(self, pixels: object) -> torch.Tensor:
        """[placeholder tokens, text hidden]: one image's merged tokens, from its processor's output
        (`pixel_values` [patches, channels·frames·patch²], `image_grid_thw` [1, 3])."""
        assert isinstance(pixels, dict), "the processor's output for one image"
        table = self.embedding_table
        (t, h, w), = pixels["image_grid_thw"].tolist()
        out = self.visual(pixels["pixel_values"].to(table.device), (t, h, w), table.dtype)
        return out.to(table.dtype)
