"""The ops of a Llama block, in two implementations picked once per model: `TorchOps` (any
device) and `NativeOps`, the native CPU kernels (`devices/cpu/kernels.py`), which round where the
torch ops round. `NativeKernelModel` is a model that can switch to them; the loader switches it
when the compute plan has them.

The native kernels replace: RMSNorm and the residual add fused into it, SiLU x up, RoPE with the
K/V write, decode attention read straight from the paged cache (no gather and no mask), and prefill
attention the same way where the kernel's fast task runs (bf16 on AVX-512, `prefill_in_place`). What
they do not cover (other prefill attention, RoPE after a per-head q/k norm) is torch's in both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.models.paged_kv import gather_kv, write_kv


class NativeKernelModel(ABC):
    """A model that can run on the native CPU kernels of one instruction-set level."""

    @abstractmethod
    def use_native_kernels(self, kernels: CpuKernels, dtype: torch.dtype) -> None:
        """Compute with `kernels` from now on, on activations of `dtype`; called once, after the
        weights load and before any step runs or is captured."""


@dataclass(frozen=True)
class Heads:
    """An attention layer's head geometry."""

    num_heads: int
    num_kv_heads: int
    head_dim: int


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class TorchOps:
    """The torch ops, on any device."""

    def attends_in_place(self, batch: ForwardBatch) -> bool:
        """Whether this step's attention reads the paged cache in place (then it needs no mask)."""
        return False

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        # Normalise in fp32 and cast back before the weight, as HF Llama does (one fused op).
        h = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
        return weight * h.to(x.dtype)

    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm(x + residual), x + residual)."""
        residual = x + residual
        return self.rms_norm(residual, weight, eps), residual

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., 2I] = (gate, up) -> SiLU(gate) * up [..., I]."""
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def rope_and_cache(self, qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], kv: torch.Tensor,
                       slot_mapping: torch.Tensor, heads: Heads,
                       qk_norm: tuple[nn.Module, nn.Module] | None) -> torch.Tensor:
        """qkv [B, T, (H + 2 KVH) D]; rope (cos, sin) [B, 1, T, D]. Rotates q and k (after the
        per-head norms, if any), stores k and v at their slots, returns q [B, T, H, D]."""
        B, T, _ = qkv.shape
        H, KVH, D = heads.num_heads, heads.num_kv_heads, heads.head_dim
        q, k, v = qkv.split((H * D, KVH * D, KVH * D), dim=-1)
        q, k, v = q.reshape(B, T, H, D), k.reshape(B, T, KVH, D), v.reshape(B, T, KVH, D)
        if qk_norm is not None:
            q, k = qk_norm[0](q), qk_norm[1](k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        cos, sin = rope
        q = q * cos + rotate_half(q) * sin  # [B, H, T, D]
        k = (k * cos + rotate_half(k) * sin).transpose(1, 2)  # [B, T, KVH, D]
        write_kv(kv, slot_mapping, k, v)
        return q.transpose(1, 2)

    def attend(self, q: torch.Tensor, kv: torch.Tensor, batch: ForwardBatch, mask: torch.Tensor | None,
               window: int, scale: float) -> torch.Tensor:
        """q: [B, T, H, D], rotated, its K/V already in the cache; returns [B, T, H * D]. The mask
        carries the causal rule and the window."""
        assert mask is not None, "torch attention reads the gathered keys through a mask"
        B, T = q.shape[:2]
        keys, values = gather_kv(kv, batch.block_tables)  # [B, KVH, S, D]
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask, enable_gqa=True)
        return out.transpose(1, 2).reshape(B, T, -1)


@dataclass(frozen=True)
class NativeOps(TorchOps):
    """The native CPU kernels of one level, torch's ops where they have no kernel."""

    kernels: CpuKernels
    prefill_in_place: bool = False
    """Prefill attention through `paged_prefill_attention` too (else torch's SDPA over a mask)."""

    def attends_in_place(self, batch: ForwardBatch) -> bool:
        return batch.decode or self.prefill_in_place

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return self.kernels.rms_norm(x, weight, eps)

    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        return self.kernels.add_rms_norm(x, residual, weight, eps)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.silu_and_mul(x)

    def rope_and_cache(self, qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], kv: torch.Tensor,
                       slot_mapping: torch.Tensor, heads: Heads,
                       qk_norm: tuple[nn.Module, nn.Module] | None) -> torch.Tensor:
        if qk_norm is not None:  # the kernel has no per-head norm between the split and the rotation
            return super().rope_and_cache(qkv, rope, kv, slot_mapping, heads, qk_norm)
        B, T, _ = qkv.shape
        cos, sin = (t.reshape(B * T, heads.head_dim) for t in rope)
        q = self.kernels.rope_and_cache(qkv.view(B * T, -1), cos, sin, kv, slot_mapping.reshape(-1),
                                        heads.num_heads, heads.num_kv_heads)  # [B * T, H, D]
        return q.view(B, T, heads.num_heads, heads.head_dim)

    def attend(self, q: torch.Tensor, kv: torch.Tensor, batch: ForwardBatch, mask: torch.Tensor | None,
               window: int, scale: float) -> torch.Tensor:
        """Without a mask through the paged kernels (decode: one token a row; prefill: T); with one,
        as torch."""
        if mask is not None:
            return super().attend(q, kv, batch, mask, window, scale)
        B, T = q.shape[:2]
        if batch.decode:
            out = self.kernels.paged_decode_attention(q[:, 0], kv, batch.block_tables, batch.context_lens,
                                                      batch.positions[:, 0], window, scale)
        else:
            out = self.kernels.paged_prefill_attention(q, kv, batch.block_tables, batch.context_lens,
                                                       batch.positions, window, scale)
        return out.reshape(B, T, -1)
