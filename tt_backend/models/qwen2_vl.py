"""Qwen2-VL (`Qwen2VLForConditionalGeneration`) and Qwen2.5-VL (`Qwen2_5_VLForConditionalGeneration`)
on torch: a vision transformer and patch merger in front of our Qwen2 text model with M-RoPE
(transformers models/qwen2_vl/modeling_qwen2_vl.py and models/qwen2_5_vl, read for each point).

The processor cuts an image, resized to a multiple of patch × merge pixels, into patches of
temporal_patch_size frames (an image is repeated), each flattened to one row of `pixel_values`,
ordered so that each merge × merge block of patches is consecutive, and gives the grid
`image_grid_thw` (frames, patch rows, patch columns). The tower embeds each patch linearly (HF's
Conv3d, whose kernel is the patch), runs pre-norm blocks whose attention rotates q and k by the
patch's (row, column) (2D RoPE: the first half of the rotated pairs by its row, the second by its
column) over the patches of one frame (Qwen2.5-VL: of one window of it, but in its full-attention
blocks), and the merger concatenates each block's normed patches
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
from tt_backend.models.llama import Qwen2ForCausalLM, RMSNorm
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

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                spans: list[int]) -> torch.Tensor:
        """x: [patches, dim], in consecutive spans of `spans` patches, each attending within itself (a
        frame, or a window of Qwen2.5-VL's)."""
        n = x.shape[0]
        q, k, v = self.qkv(x).reshape(n, 3, self.heads, -1).unbind(1)  # [n, heads, head_dim] each
        cos, sin = rope  # [n, 1, head_dim] fp32
        q, k = ((t.float() * cos + _rotate_half(t.float()) * sin).to(x.dtype) for t in (q, k))
        parts = zip(*(t.transpose(0, 1).split(spans, dim=1) for t in (q, k, v)), strict=True)
        out = torch.cat([F.scaled_dot_product_attention(*part) for part in parts], dim=1)  # [heads, n, d]
        return self.proj(out.transpose(0, 1).reshape(n, -1))


class VisionMlp(nn.Module):
    """Qwen2-VL's: fc1, act, fc2."""

    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class GatedVisionMlp(nn.Module):
    """Qwen2.5-VL's: down(act(gate(x)) * up(x)), with biases."""

    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden)
        self.up_proj = nn.Linear(dim, hidden)
        self.down_proj = nn.Linear(hidden, dim)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


def _norm(dim: int, rms: bool) -> nn.Module:
    """Qwen2.5-VL's RMSNorm (normalised in fp32, as our text model's), or Qwen2-VL's LayerNorm."""
    return RMSNorm(dim, 1e-6) if rms else nn.LayerNorm(dim, eps=1e-6)


class VisionBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: nn.Module, rms: bool) -> None:
        super().__init__()
        self.norm1 = _norm(dim, rms)
        self.norm2 = _norm(dim, rms)
        self.attn = VisionAttention(dim, heads)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                spans: list[int]) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rope, spans)
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


class PatchMerger(nn.Module):
    def __init__(self, out_dim: int, dim: int, merge: int, rms: bool) -> None:
        super().__init__()
        self.ln_q = _norm(dim, rms)
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
    """Module names follow HF's Qwen2VisionTransformerPretrainedModel (Qwen2.5-VL's with `windowed`),
    so its state dict loads as is (the patch Conv3d's weight, flattened, is `patch_embed.proj`'s)."""

    inv_freq: torch.Tensor

    def __init__(self, hf: dict[str, Any], windowed: bool = False) -> None:
        super().__init__()
        heads, act = hf["num_heads"], hf.get("hidden_act", "silu" if windowed else "quick_gelu")
        dim = hf["hidden_size"] if windowed else hf["embed_dim"]
        hidden = hf["intermediate_size"] if windowed else int(dim * hf.get("mlp_ratio", 4))
        self.merge = int(hf.get("spatial_merge_size", 2))
        self.patch = int(hf.get("patch_size", 14))
        frames, channels = hf.get("temporal_patch_size", 2), hf.get("in_channels", hf.get("in_chans", 3))
        self.patch_embed = PatchEmbed(channels * frames * self.patch ** 2, dim)
        self._register_load_state_dict_pre_hook(_flatten_patch_kernel)
        half = dim // heads // 2  # of the head's rotated pairs, the first half by row, the second by column
        theta = float((hf.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        exponents = torch.arange(0, half, 2, dtype=torch.int64, device="cpu").float() / half
        self.register_buffer("inv_freq", 1.0 / theta ** exponents, persistent=False)
        mlp = GatedVisionMlp if windowed else VisionMlp
        self.blocks = nn.ModuleList(VisionBlock(dim, heads, mlp(dim, hidden, act), windowed)
                                    for _ in range(hf["depth"]))
        self.merger = PatchMerger(hf["out_hidden_size"] if windowed else hf["hidden_size"], dim, self.merge,
                                  windowed)
        self.window = int(hf.get("window_size", 112)) // self.merge // self.patch if windowed else 0
        """Qwen2.5-VL: a window's side in merged tokens (its blocks not in `full` attend within it)."""
        self.full = set(hf.get("fullatt_block_indexes", ())) if windowed else set(range(hf["depth"]))

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

    def windows(self, grid: tuple[int, int, int]) -> tuple[torch.Tensor, list[int]]:
        """Qwen2.5-VL (transformers vision_utils.get_vision_window_index): the merged tokens window by
        window (each frame's grid cut into window × window squares from its top left, row-major), and
        each window's patches."""
        t, h, w = grid[0], grid[1] // self.merge, grid[2] // self.merge
        index = torch.arange(t * h * w).reshape(t, h, w)
        order, spans = [], []
        for frame in index:
            for top in range(0, h, self.window):
                for left in range(0, w, self.window):
                    square = frame[top:top + self.window, left:left + self.window].flatten()
                    order.append(square)
                    spans.append(square.numel() * self.merge ** 2)
        return torch.cat(order), spans

    def forward(self, pixels: torch.Tensor, grid: tuple[int, int, int], dtype: torch.dtype) -> torch.Tensor:
        """[t·h·w / merge², out hidden]: one image's tokens."""
        x = self.patch_embed(pixels.to(dtype))
        cos, sin = self.rope(grid, x.device)
        frames = [grid[1] * grid[2]] * grid[0]
        order, spans = self.windows(grid) if self.window else (None, frames)
        if order is not None:  # merged tokens (merge² consecutive patches each) window by window
            x, cos, sin = (a.unflatten(0, (-1, self.merge ** 2))[order].flatten(0, 1) for a in (x, cos, sin))
        for i, block in enumerate(self.blocks):
            x = block(x, (cos, sin), frames if i in self.full else spans)
        out: torch.Tensor = self.merger(x)
        return out if order is None else out[torch.argsort(order)]


def _flatten_patch_kernel(state: dict[str, torch.Tensor], prefix: str, *_: Any) -> None:
    name = f"{prefix}patch_embed.proj.weight"
    if name in state and state[name].dim() == 5:  # HF's Conv3d [dim, channels, frames, patch, patch]
        state[name] = state[name].flatten(1)


class Qwen2VLForConditionalGeneration(VisionLanguageModel, NativeKernelModel):
    capabilities = TORCH_LLAVA
    windowed = False
    """Qwen2.5-VL's vision transformer (RMSNorm, gated MLP, windowed attention)."""
    renames = (("model.visual.", "visual."), ("model.language_model.", "language_model.model."),
               ("model.", "language_model.model."), ("lm_head.", "language_model.lm_head."))

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__(hf)
        text = hf.get("text_config") or {k: v for k, v in hf.items() if k != "vision_config"}
        tie = hf.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        self.language_model = Qwen2ForCausalLM.from_hf_config({**text, "tie_word_embeddings": tie})
        if not self.language_model.config.rope.mrope_section:
            raise ValueError("a Qwen2-VL text config without rope_parameters.mrope_section (M-RoPE)")
        self.visual = Qwen2VisionTransformer(hf["vision_config"], self.windowed)
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


class Qwen2_5_VLForConditionalGeneration(Qwen2VLForConditionalGeneration):
    """Qwen2.5-VL (transformers models/qwen2_5_vl): Qwen2-VL's text model and M-RoPE (an image's
    positions are the same; only a video's frames are spaced by time), and a vision transformer with
    RMSNorm, a gated MLP and attention within windows but in `fullatt_block_indexes`."""

    windowed = True
