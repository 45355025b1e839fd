"""Gemma 3 text (`Gemma3ForCausalLM`) on torch, with paged attention over the explicitly passed KV
cache as in models/llama.py: one forward for prefill and decode, static shapes, no host sync, so it
is captured the same way; q/k/v and gate/up fused on load.

What differs from Llama (transformers models/gemma3/modeling_gemma3.py, read for each point):
- token embeddings scaled by sqrt(hidden_size), the scale rounded to the activations' dtype first;
- RMSNorm by (1 + weight), computed in fp32 and rounded once at the end; four per layer (input,
  post-attention, pre- and post-feedforward), the residual added after the post-norms;
- a GeGLU MLP (gelu, tanh approximation); per-head RMSNorm of q and k before RoPE;
- scores scaled by query_pre_attn_scalar ** -0.5; tanh soft-capping of the logits when set;
- sliding layers attend within `sliding_window` and rotate with their own RoPE (local base frequency,
  unscaled); global layers attend to the whole context with rope_theta and its scaling.

Every op is torch's: the native CPU kernels (llama_ops.NativeOps) round RMSNorm before the weight
(Llama's order), have no GeGLU, and their decode attention reads no per-layer window, so this is not a
NativeKernelModel (cpu_kernels=native refuses it at load; a GGUF's quantized linear layers still
compute on the kernels' blocks). The KV cache keeps every layer's whole context, sliding or not
(ModelSpec sizes all layers full-length): a sliding layer's mask only hides older keys, which keeps
prefix reuse, chunked prefill and preemption exact.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.models.capabilities import TORCH_LLAMA
from tt_backend.models.gemma3_config import Gemma3Config
from tt_backend.models.llama import Rotary, _fuse_checkpoint
from tt_backend.models.llama_ops import Heads, TorchOps
from tt_backend.models.paged_kv import additive_mask, gather_kv
from tt_backend.models.spec import ModelSpec

Rope = tuple[torch.Tensor, torch.Tensor]


class GemmaRMSNorm(nn.Module):
    """x / rms(x) * (1 + weight) in fp32, rounded to x's dtype once at the end (Llama rounds before
    the weight); the weight is the checkpoint's, zero-centred."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: Gemma3Config) -> None:
        super().__init__()
        self.heads = Heads(cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
        q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, q_size + 2 * kv_size, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q_size, cfg.hidden_size, bias=cfg.attention_bias)
        self.q_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.scale = cfg.query_pre_attn_scalar ** -0.5
        self.ops = TorchOps()
        self._register_load_state_dict_pre_hook(_fuse_checkpoint(("q_proj", "k_proj", "v_proj"), "qkv_proj"))

    def forward(self, x: torch.Tensor, rope: Rope, kv: torch.Tensor, batch: ForwardBatch,
                mask: torch.Tensor) -> torch.Tensor:
        """x: [B, T, hidden]; kv: [2, num_blocks, block_size, kv_heads, head_dim]; mask: this layer
        kind's additive mask [B, 1, T, S]."""
        q = self.ops.rope_and_cache(self.qkv_proj(x), rope, kv, batch.slot_mapping, self.heads,
                                    (self.q_norm, self.k_norm))
        return self.o_proj(attend(q, kv, batch.block_tables, mask, self.scale))


def attend(q: torch.Tensor, kv: torch.Tensor, block_tables: torch.Tensor, mask: torch.Tensor,
           scale: float) -> torch.Tensor:
    """q: [B, T, H, D], rotated, its K/V already in the cache; returns [B, T, H * D]. The scale is
    passed on (TorchOps.attend leaves SDPA's head_dim ** -0.5)."""
    B, T = q.shape[:2]
    keys, values = gather_kv(kv, block_tables)  # [B, KVH, S, D]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask, scale=scale,
                                         enable_gqa=True)
    return out.transpose(1, 2).reshape(B, T, -1)


class MLP(nn.Module):
    """GeGLU: down(gelu_tanh(gate) * up)."""

    def __init__(self, cfg: Gemma3Config) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self._register_load_state_dict_pre_hook(_fuse_checkpoint(("gate_proj", "up_proj"), "gate_up_proj"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.gelu(gate, approximate="tanh") * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Gemma3Config) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, rope: Rope, kv: torch.Tensor, batch: ForwardBatch,
                mask: torch.Tensor) -> torch.Tensor:
        """x: the residual stream [B, T, hidden]; returns it after this layer."""
        h = self.self_attn(self.input_layernorm(x), rope, kv, batch, mask)
        x = x + self.post_attention_layernorm(h)
        h = self.mlp(self.pre_feedforward_layernorm(x))
        return x + self.post_feedforward_layernorm(h)


class Gemma3TextModel(nn.Module):
    embed_scale: torch.Tensor

    def __init__(self, cfg: Gemma3Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary_global = Rotary(cfg.head_dim, cfg.rope_global)
        self.rotary_local = Rotary(cfg.head_dim, cfg.rope_local)
        # fp32 on the CPU even under a meta-device context (not in the checkpoint); HF rounds it to the
        # weights' dtype before multiplying: sqrt(640) = 25.298 is 25.25 in bf16.
        scale = torch.tensor(cfg.hidden_size**0.5, dtype=torch.float32, device="cpu")
        self.register_buffer("embed_scale", scale, persistent=False)


class Gemma3ForCausalLM(nn.Module):
    """Module names follow HF so a checkpoint's state dict loads as is."""

    capabilities = TORCH_LLAMA
    """As the Llama family's: paged attention over the whole context of every layer keeps caching,
    chunking and batched prefill exact, and the step reads no host state (async decode)."""

    def __init__(self, cfg: Gemma3Config) -> None:
        super().__init__()
        self.config = cfg
        self.model = Gemma3TextModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.bidirectional_images = False
        """Gemma 3's vision model sets it: a prefill's image tokens see their whole image
        (ForwardBatch.image_ends), as HF's mask from token_type_ids."""

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> Gemma3ForCausalLM:
        return cls(Gemma3Config.from_hf(hf))

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
        x = self.model.embed_tokens(batch.input_ids)
        x = batch.with_images(x * self.model.embed_scale.to(x.dtype))  # image features unscaled, as HF's
        ropes, masks = self._per_layer_kind(batch, kv_cache.shape[3], x.dtype)
        for i, (layer, sliding) in enumerate(zip(self.model.layers, self.config.sliding, strict=True)):
            x = layer(x, ropes[sliding], kv_cache[i], batch, masks[sliding])
        rows = (torch.arange(x.shape[0], device=x.device), batch.logits_indices)
        logits = self.lm_head(self.model.norm(x[rows]))  # [B, vocab]
        cap = self.config.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits.float()

    def _per_layer_kind(self, batch: ForwardBatch, block_size: int,
                        dtype: torch.dtype) -> tuple[dict[bool, Rope], dict[bool, torch.Tensor]]:
        """RoPE (cos, sin) and the additive mask of each layer kind present (key: sliding), built once
        per step."""
        num_keys = batch.block_tables.shape[1] * block_size
        ropes: dict[bool, Rope] = {}
        masks: dict[bool, torch.Tensor] = {}
        for sliding in sorted(set(self.config.sliding)):
            rotary = self.model.rotary_local if sliding else self.model.rotary_global
            ropes[sliding] = rotary(batch.positions, dtype)
            window = self.config.sliding_window if sliding else None
            ends = batch.image_ends if self.bidirectional_images else None
            masks[sliding] = additive_mask(batch, num_keys, dtype, window, ends)
        return ropes, masks
