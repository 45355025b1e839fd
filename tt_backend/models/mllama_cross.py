"""Llama 3.2 Vision's cross-attention decoder layer on torch (transformers
models/mllama/modeling_mllama.py: MllamaCrossAttentionDecoderLayer, MllamaTextCrossAttention and
`_prepare_cross_attention_mask`, read for each point), split where a server needs it: `cross_kv`
turns a request's projected image features into the layer's keys and values once (what a paged
cross-attention cache holds), and `forward` runs the layer's tokens against them.

- Keys are `k_norm(k_proj(features))` per head (Llama's RMSNorm over head_dim), values `v_proj(features)`;
  queries `q_norm(q_proj(x))`. No rotary embedding: the image has no position in the text.
- `sees[t, j]`: whether token t may attend to image token j (transformers' MllamaProcessor: a token
  sees the tiles of the images from the first `<|image|>` before it, the tiles holding the image,
  never padding tiles). A token that sees no image token keeps HF's arithmetic exactly: its additive
  mask row is all zeros, so it attends to every image token (padding tiles included), and its MLP
  output is zeroed (`full_text_row_masked_out_mask`); the gated attention output still counts.
- Both residual branches are tanh-gated (`cross_attn_attn_gate`, `cross_attn_mlp_gate`).
Module names follow HF's, so a checkpoint's `language_model.model.layers.<i>.*` load as they are.
The text model that interleaves these layers with Llama layers is models/mllama.py.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tt_backend.models.llama import RMSNorm


class MllamaCrossAttention(nn.Module):
    def __init__(self, text: dict[str, Any]) -> None:
        super().__init__()
        dim = text["hidden_size"]
        self.heads, self.kv_heads = text["num_attention_heads"], text["num_key_value_heads"]
        self.head_dim = dim // self.heads
        self.q_proj = nn.Linear(dim, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, dim, bias=False)
        eps = text.get("rms_norm_eps", 1e-5)
        self.q_norm, self.k_norm = RMSNorm(self.head_dim, eps), RMSNorm(self.head_dim, eps)


class MllamaMLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MllamaCrossAttentionLayer(nn.Module):
    """HF's MllamaCrossAttentionDecoderLayer."""

    def __init__(self, text: dict[str, Any]) -> None:
        super().__init__()
        dim, eps = text["hidden_size"], text.get("rms_norm_eps", 1e-5)
        if text.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={text.get('hidden_act')!r}: Mllama's text MLP is silu")
        self.cross_attn = MllamaCrossAttention(text)
        self.input_layernorm = RMSNorm(dim, eps)
        self.post_attention_layernorm = RMSNorm(dim, eps)
        self.mlp = MllamaMLP(dim, text["intermediate_size"])
        self.cross_attn_attn_gate = nn.Parameter(torch.zeros(1))
        self.cross_attn_mlp_gate = nn.Parameter(torch.zeros(1))

    def cross_kv(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features [image tokens, hidden] (the projector's output) -> keys and values
        [image tokens, kv_heads, head_dim]: written once per request."""
        attn = self.cross_attn
        k = attn.k_norm(attn.k_proj(features).view(-1, attn.kv_heads, attn.head_dim))
        return k, attn.v_proj(features).view(-1, attn.kv_heads, attn.head_dim)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sees: torch.Tensor) -> torch.Tensor:
        """x [tokens, hidden] of one request; k, v [image tokens, kv_heads, head_dim] (`cross_kv`);
        sees [tokens, image tokens] bool -> the layer's output [tokens, hidden]."""
        attn = self.cross_attn
        if sees.shape != (x.shape[0], k.shape[0]):
            raise ValueError(f"sees has shape {tuple(sees.shape)}; expected (tokens, image tokens) = "
                             f"{(x.shape[0], k.shape[0])}")
        sees_any = sees.any(dim=-1)
        # HF's additive mask: the dtype's minimum where hidden, zeroed on rows that see nothing.
        mask = torch.zeros(sees.shape, dtype=x.dtype, device=x.device)
        mask = mask.masked_fill(~sees & sees_any[:, None], torch.finfo(x.dtype).min)
        h = self.input_layernorm(x)
        q = attn.q_norm(attn.q_proj(h).view(-1, attn.heads, attn.head_dim))
        group = attn.heads // attn.kv_heads
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.repeat_interleave(group, dim=1).transpose(0, 1),
            v.repeat_interleave(group, dim=1).transpose(0, 1), attn_mask=mask)
        x = x + self.cross_attn_attn_gate.tanh() * attn.o_proj(out.transpose(0, 1).reshape(x.shape[0], -1))
        mlp = self.mlp(self.post_attention_layernorm(x)) * sees_any[:, None].to(x.dtype)
        return x + self.cross_attn_mlp_gate.tanh() * mlp
