"""Gemma 3's text config (`Gemma3TextConfig`, model_type gemma3_text) read into the fields our torch
implementation (models/gemma3.py) needs, refusing what it does not implement.

Both spellings transformers has written are read: transformers 5's `layer_types` and per-layer-type
`rope_parameters` ({"sliding_attention": ..., "full_attention": ...}), and the older hub configs'
`sliding_window_pattern`, `rope_theta` + `rope_scaling` (global layers) and `rope_local_base_freq`
(sliding layers), with transformers' defaults (configuration_gemma3.py: pattern 6, theta 1e6 global and
1e4 local, query_pre_attn_scalar 256).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tt_backend.models.rope import RopeConfig

SLIDING, FULL = "sliding_attention", "full_attention"
ACTIVATIONS = ("gelu_pytorch_tanh",)
"""The MLP activations implemented (transformers' ACT2FN names)."""


@dataclass(frozen=True)
class Gemma3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    sliding: tuple[bool, ...]
    """Per layer: whether it attends within `sliding_window` (else to the whole context)."""
    sliding_window: int | None
    rope_global: RopeConfig
    rope_local: RopeConfig
    """The sliding layers' RoPE: its own base frequency, never scaled."""
    query_pre_attn_scalar: float
    """Scores are scaled by query_pre_attn_scalar ** -0.5 (not head_dim ** -0.5)."""
    attention_bias: bool = False
    final_logit_softcapping: float | None = None

    def __post_init__(self) -> None:
        if len(self.sliding) != self.num_layers:
            raise ValueError(f"layer_types has {len(self.sliding)} entries for num_hidden_layers="
                             f"{self.num_layers}")

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> Gemma3Config:
        activation = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
        if activation not in ACTIVATIONS:
            raise ValueError(f"hidden_activation={activation!r} is not supported; supported: "
                             f"{', '.join(ACTIVATIONS)}")
        if hf.get("use_bidirectional_attention"):
            raise ValueError("use_bidirectional_attention=true (Gemma 3 as an encoder) is not supported; "
                             "this backend generates causally")
        if hf.get("attn_logit_softcapping") is not None:
            # transformers' Gemma3Attention keeps the value but never applies it (Gemma 2's passes it as
            # softcap); Gemma 3 checkpoints set none (QK-norm replaced it), so there is no reference.
            raise ValueError(f"attn_logit_softcapping={hf['attn_logit_softcapping']} is not supported for "
                             "Gemma 3 (its checkpoints set none; transformers ignores it)")
        num_heads, num_layers = hf["num_attention_heads"], hf["num_hidden_layers"]
        global_rope, local_rope = _ropes(hf)
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            max_position_embeddings=hf["max_position_embeddings"],
            tie_word_embeddings=hf.get("tie_word_embeddings", True),
            sliding=_sliding_layers(hf, num_layers),
            sliding_window=hf.get("sliding_window"),
            rope_global=global_rope,
            rope_local=local_rope,
            query_pre_attn_scalar=float(hf.get("query_pre_attn_scalar", 256)),
            attention_bias=bool(hf.get("attention_bias", False)),
            final_logit_softcapping=hf.get("final_logit_softcapping"),
        )


def _sliding_layers(hf: dict[str, Any], num_layers: int) -> tuple[bool, ...]:
    """`layer_types`, else every `sliding_window_pattern`-th layer global, the others sliding."""
    types = hf.get("layer_types")
    if types is None:
        pattern = int(hf.get("sliding_window_pattern") or hf.get("_sliding_window_pattern") or 6)
        return tuple(bool((i + 1) % pattern) for i in range(num_layers))
    unknown = sorted(set(types) - {SLIDING, FULL})
    if unknown:
        raise ValueError(f"layer_types has {unknown}; supported: {SLIDING}, {FULL}")
    return tuple(t == SLIDING for t in types)


def _ropes(hf: dict[str, Any]) -> tuple[RopeConfig, RopeConfig]:
    """(global, local) RoPE, as transformers' Gemma3TextConfig.convert_rope_params_to_dict reads them:
    `rope_scaling` updates the global layers' parameters (it wins over `rope_parameters`); a flat
    `rope_parameters` (not per layer type) is refused, as transformers would ignore it."""
    params = hf.get("rope_parameters") or {}
    if params and not (FULL in params or SLIDING in params):
        raise ValueError(f"rope_parameters={params} is not per layer type; Gemma 3 needs "
                         f"{{{FULL!r}: ..., {SLIDING!r}: ...}} (or the older rope_theta / rope_scaling)")
    full = {**(params.get(FULL) or {}), **(hf.get("rope_scaling") or {})}
    local = dict(params.get(SLIDING) or {})
    full.setdefault("rope_theta", hf.get("rope_theta", 1_000_000.0))
    local.setdefault("rope_theta", hf.get("rope_local_base_freq", 10_000.0))
    max_pos = hf["max_position_embeddings"]
    return (RopeConfig.from_hf({"rope_parameters": full, "max_position_embeddings": max_pos}),
            RopeConfig.from_hf({"rope_parameters": local, "max_position_embeddings": max_pos}))
