"""Rotary position embedding frequencies, with the RoPE scalings that Llama-family configs declare."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class RopeConfig:
    theta: float
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    mrope_section: tuple[int, ...] = ()
    """M-RoPE (Qwen2-VL): how many of the head's frequency pairs follow each of the (temporal, height,
    width) positions; empty: one position per token."""

    def __post_init__(self) -> None:
        if self.rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(f"rope_type={self.rope_type!r} is not supported; supported: "
                             f"{', '.join(SUPPORTED_ROPE_TYPES)}")

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> RopeConfig:
        """Read `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (older)."""
        params = dict(hf.get("rope_parameters") or {})
        scaling = hf.get("rope_scaling") or {}
        merged = {**scaling, **params}
        rope_type = merged.get("rope_type", merged.get("type", "default"))
        rope_type = "default" if rope_type == "mrope" else rope_type  # Qwen2-VL's before transformers 4.46
        theta = merged.get("rope_theta", hf.get("rope_theta", 10000.0))
        return cls(
            theta=float(theta),
            rope_type=rope_type,
            factor=float(merged.get("factor", 1.0)),
            low_freq_factor=float(merged.get("low_freq_factor", 1.0)),
            high_freq_factor=float(merged.get("high_freq_factor", 4.0)),
            original_max_position_embeddings=int(merged.get("original_max_position_embeddings",
                                                            hf.get("max_position_embeddings", 8192))),
            mrope_section=tuple(int(n) for n in merged.get("mrope_section") or ()),
        )


def inv_frequencies(head_dim: int, rope: RopeConfig) -> torch.Tensor:
    """[head_dim / 2] fp32 inverse frequencies (on CPU, even under a meta-device context)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    inv = 1.0 / (rope.theta**exponents)
    if rope.rope_type == "linear":
        return inv / rope.factor
    if rope.rope_type == "llama3":
        # Llama 3.1: long wavelengths are scaled by `factor`, short ones kept, the band between
        # interpolated smoothly.
        orig = rope.original_max_position_embeddings
        low_wavelen = orig / rope.low_freq_factor
        high_wavelen = orig / rope.high_freq_factor
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
        blended = (1 - smooth) * inv / rope.factor + smooth * inv
        out = torch.where(wavelen > low_wavelen, inv / rope.factor, inv)
        middle = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(middle, blended, out)
    return inv
