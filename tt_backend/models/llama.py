"""The Llama family on torch, with paged attention over an explicitly passed KV cache.

One forward serves prefill (T tokens per row) and decode (T = 1). Every row writes its new K/V
into the cache at `slot_mapping`, then attends over its whole context gathered through its block
table, so chunked prefill and prefix reuse need no special path. Each op runs as the model's ops say
(`llama_ops`): torch's, or the native CPU kernels' once `use_native_kernels` switched them.

The forward has static shapes and no host synchronisation, so it can be captured (TorchScript,
CUDA graphs): padding tokens (slot −1) write into the last slot of the cache, a sink block the
KV manager never hands out, instead of being filtered out. q/k/v and gate/up are fused into one
matmul each when the checkpoint is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.models.capabilities import TORCH_LLAMA
from tt_backend.models.llama_ops import Heads, NativeKernelModel, NativeOps, TorchOps
from tt_backend.models.paged_kv import additive_mask
from tt_backend.models.rope import RopeConfig, inv_frequencies
from tt_backend.models.spec import ModelSpec


@dataclass(frozen=True)
class LlamaConfig:
    """The Llama-family core; each architecture maps its HF config onto these fields."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: RopeConfig
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    """Per-head RMSNorm of q and k before RoPE (Qwen3)."""
    sliding_window: int | None = None
    """Keys further back than this many positions are not attended (Mistral)."""

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> LlamaConfig:
        num_heads = hf["num_attention_heads"]
        bias = bool(hf.get("attention_bias", False))
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
            rms_norm_eps=hf["rms_norm_eps"],
            rope=RopeConfig.from_hf(hf),
            max_position_embeddings=hf["max_position_embeddings"],
            tie_word_embeddings=hf.get("tie_word_embeddings", False),
            qkv_bias=bias,
            o_bias=bias,
        )


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.ops = TorchOps()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.rms_norm(x, self.weight, self.eps)

    def add(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual): the residual add fused into the norm after it."""
        return self.ops.add_rms_norm(x, residual, self.weight, self.eps)


class Rotary(nn.Module):
    inv_freq: torch.Tensor
    section_axis: torch.Tensor | None

    def __init__(self, head_dim: int, rope: RopeConfig) -> None:
        super().__init__()
        self.register_buffer("inv_freq", inv_frequencies(head_dim, rope), persistent=False)
        axis = None
        if rope.mrope_section:  # pair j of the rotated dims follows position axis section_axis[j] (M-RoPE)
            if sum(rope.mrope_section) != head_dim // 2:
                raise ValueError(f"mrope_section={list(rope.mrope_section)} does not add up to "
                                 f"head_dim / 2 = {head_dim // 2}")
            sizes = torch.tensor(rope.mrope_section, device="cpu")
            axis = torch.repeat_interleave(torch.arange(len(sizes), device="cpu") % 3, sizes)
        self.register_buffer("section_axis", axis, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: [B, T], or [3, B, T] (temporal, height, width) under M-RoPE."""
        freqs = positions.float()[..., None] * self.inv_freq  # [B, T, D/2] ([3, B, T, D/2])
        if positions.dim() == 3:
            assert self.section_axis is not None, "three positions a token for a model without M-RoPE"
            index = self.section_axis.expand(1, *freqs.shape[1:])
            freqs = freqs.gather(0, index)[0]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, T, D]
        return emb.cos().to(dtype), emb.sin().to(dtype)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.heads = Heads(cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
        q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, q_size + 2 * kv_size, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(q_size, cfg.hidden_size, bias=cfg.o_bias)
        self.window = cfg.sliding_window or 0
        self.scale = cfg.head_dim ** -0.5
        self.ops = TorchOps()
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self._register_load_state_dict_pre_hook(_fuse_checkpoint(("q_proj", "k_proj", "v_proj"), "qkv_proj"))

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], kv: torch.Tensor,
                batch: ForwardBatch, mask: torch.Tensor | None) -> torch.Tensor:
        """x: [B, T, hidden]; kv: [2, num_blocks, block_size, kv_heads, head_dim]. Without a mask
        (ops that attend in place, a decode step) attention reads the paged cache directly."""
        qk_norm = None if self.q_norm is None or self.k_norm is None else (self.q_norm, self.k_norm)
        q = self.ops.rope_and_cache(self.qkv_proj(x), rope, kv, batch.slot_mapping, self.heads, qk_norm)
        return self.o_proj(self.ops.attend(q, kv, batch, mask, self.window, self.scale))


def _fuse_checkpoint(parts: tuple[str, ...], fused: str) -> Any:
    """A load_state_dict pre-hook that concatenates the checkpoint's separate projections
    (HF names) into our fused one, along the output dimension."""

    def hook(state: dict[str, torch.Tensor], prefix: str, *_: Any) -> None:
        for kind in ("weight", "bias"):
            names = [f"{prefix}{part}.{kind}" for part in parts]
            if all(name in state for name in names):
                state[f"{prefix}{fused}.{kind}"] = torch.cat([state.pop(name) for name in names])

    return hook


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self._register_load_state_dict_pre_hook(_fuse_checkpoint(("gate_proj", "up_proj"), "gate_up_proj"))
        self.ops = TorchOps()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.ops.silu_and_mul(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                kv: torch.Tensor, batch: ForwardBatch,
                mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(this layer's MLP output, the residual stream before it); the stream is x + residual,
        added by the next layer's norm (x alone for the first layer)."""
        if residual is None:
            residual, h = x, self.input_layernorm(x)
        else:
            h, residual = self.input_layernorm.add(x, residual)
        h = self.self_attn(h, rope, kv, batch, mask)
        h, residual = self.post_attention_layernorm.add(h, residual)
        return self.mlp(h), residual


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = Rotary(cfg.head_dim, cfg.rope)


class LlamaForCausalLM(nn.Module, NativeKernelModel):
    """Module names follow HF so a checkpoint's state dict loads as is."""

    capabilities = TORCH_LLAMA

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.ops = TorchOps()

    def use_native_kernels(self, kernels: CpuKernels, dtype: torch.dtype) -> None:
        """Every block computes with `NativeOps` (`llama_ops`) from now on."""
        c = self.config
        fast_prefill = kernels.prefill_attention_fast(dtype, c.num_heads, c.num_kv_heads, c.head_dim)
        ops = NativeOps(kernels, fast_prefill)
        for module in self.modules():
            if isinstance(module, RMSNorm | Attention | MLP | LlamaForCausalLM):
                module.ops = ops

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> LlamaForCausalLM:
        return cls(LlamaConfig.from_hf(hf))

    @property
    def spec(self) -> ModelSpec:
        c = self.config
        return ModelSpec(c.num_layers, c.num_kv_heads, c.head_dim, c.vocab_size,
                         c.max_position_embeddings, c.tie_word_embeddings)

    def forward(self, batch: ForwardBatch, kv_cache: torch.Tensor) -> torch.Tensor:
        """Run one step; return fp32 logits [B, vocab] at `batch.logits_indices`.

        kv_cache: [layers, 2, num_blocks, block_size, kv_heads, head_dim], written in place; its
        last slot is the padding sink.
        """
        x = batch.with_images(self.model.embed_tokens(batch.input_ids))
        rope = self.model.rotary(batch.positions if batch.rope_positions is None else batch.rope_positions,
                                 x.dtype)
        mask = None if self.ops.attends_in_place(batch) else additive_mask(
            batch, batch.block_tables.shape[1] * kv_cache.shape[3], x.dtype, self.config.sliding_window)
        residual: torch.Tensor | None = None
        for i, layer in enumerate(self.model.layers):
            x, residual = layer(x, residual, rope, kv_cache[i], batch, mask)
        rows = (torch.arange(x.shape[0], device=x.device), batch.logits_indices)
        last = x[rows] if residual is None else x[rows] + residual[rows]  # [B, hidden]
        return self.lm_head(self.model.norm(last)).float()


class MistralForCausalLM(LlamaForCausalLM):
    """Llama with a sliding attention window (Mistral 7B v0.1; later versions set none)."""

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> LlamaForCausalLM:
        return cls(replace(LlamaConfig.from_hf(hf), sliding_window=hf.get("sliding_window")))


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Llama with biases on q, k and v (none on o)."""

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> LlamaForCausalLM:
        _reject_qwen_sliding_window(hf)
        return cls(replace(LlamaConfig.from_hf(hf), qkv_bias=True, o_bias=False))


class Qwen3ForCausalLM(LlamaForCausalLM):
    """Llama with per-head RMSNorm of q and k."""

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> LlamaForCausalLM:
        _reject_qwen_sliding_window(hf)
        return cls(replace(LlamaConfig.from_hf(hf), qk_norm=True))


def _reject_qwen_sliding_window(hf: dict[str, Any]) -> None:
    if hf.get("use_sliding_window"):
        raise ValueError("use_sliding_window=true (per-layer sliding attention) is not supported yet")
