"""The quantized linear layers of a GGUF checkpoint, read as the file holds them, and the swap of a
loaded model's layers onto them (`weight_dtype=quantized`, and `auto` where the plan keeps them:
devices/cpu/compute_plan.py). The swap, `swap_in_blocks`, also serves the blocks that
`weight_dtype=q8_0` / `q4_0` quantize at load (models/quantize_at_load.py).

The model itself still loads from the converted fp32 checkpoint (`checkpoint.py`: transformers
dequantizes the GGUF); this module reads the same file's Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K /
Q6_K blocks (`gguf_index.py` reads the file's tensor table) and replaces each linear layer (and the
token embedding) whose blocks dequantize to exactly the weight that was loaded: the check runs at
load, so a tensor the conversion treated differently stays dense rather than serving other weights.

Names follow llama.cpp's (`blk.N.attn_q.weight` ...). llama.cpp's converter permutes the rows of a
Llama's q and k weights (rotary pairs interleaved per head); transformers' GGUF loader undoes it
(`LlamaTensorProcessor`), and so does `_unpermute` here, on whole rows of blocks.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from tt_backend.devices.cpu import nibble_panels
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.devices.cpu.logits import is_head
from tt_backend.devices.cpu.panels import PanelsLinear
from tt_backend.devices.cpu.quant import (
    FORMAT_IDS,
    PANELS_BLOCK_ROWS,
    QuantFormat,
    QuantizedEmbedding,
    QuantizedLinear,
    QuantizedTensor,
    concat_rows,
)
from tt_backend.models.checkpoint import default_gguf_path
from tt_backend.models.gguf_index import GgufIndex

logger = logging.getLogger(__name__)

_GGUF_TYPES: dict[str, QuantFormat] = {"Q8_0": "q8_0", "Q4_0": "q4_0", "Q4_1": "q4_1", "Q5_0": "q5_0",
                                       "Q5_1": "q5_1", "Q4_K": "q4_k",
                                       "Q5_K": "q5_k", "Q6_K": "q6_k"}
_LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                "ffn_down": "mlp.down_proj"}
_FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
"""Our fused projections and the checkpoint's parts (models/llama.py fuses them on load)."""
_PERMUTED_ARCHS = ("llama",)
"""GGUF architectures whose q/k rows llama.cpp's converter permuted (transformers' TENSOR_PROCESSORS)."""


def gguf_source(model: str) -> Path | None:
    """The GGUF file the `model` option names ("" = the default model's), else None."""
    path = default_gguf_path() if not model else Path(model).expanduser()
    return path if path.suffix == ".gguf" and path.is_file() else None


@dataclass(frozen=True)
class GgufLinears:
    """A GGUF file's quantized linear weights by HF name (`model.layers.0.self_attn.q_proj.weight`,
    `model.embed_tokens.weight`, `lm_head.weight`), q and k rows in HF's order."""

    path: Path
    tensors: dict[str, QuantizedTensor]

    @classmethod
    def read(cls, path: Path) -> GgufLinears:
        index = GgufIndex.read(path)
        arch = index.fields.get("general.architecture")
        heads = int(index.fields.get(f"{arch}.attention.head_count") or 0)
        kv_heads = int(index.fields.get(f"{arch}.attention.head_count_kv") or heads)
        tensors: dict[str, QuantizedTensor] = {}
        for t in index.tensors:
            fmt, name = _GGUF_TYPES.get(t.type_name), _hf_name(t.name)
            if fmt is None or name is None:
                continue
            cols = int(t.shape[0])  # ggml lists the fastest dimension first
            blocks = torch.from_numpy(np.array(t.data, dtype=np.uint8)).reshape(int(t.shape[1]), -1)
            try:
                weight = QuantizedTensor(fmt, blocks, cols)
            except ValueError as exc:  # e.g. a K-quant row not whole super-blocks of 256: stays dense
                logger.warning("GGUF tensor %s kept dense: %s", t.name, exc)
                continue
            if arch in _PERMUTED_ARCHS and name.endswith(("q_proj.weight", "k_proj.weight")) and heads:
                weight = _unpermute(weight, heads if "q_proj" in name else kv_heads)
            tensors[name] = weight
        return cls(path, tensors)

    @property
    def formats(self) -> Counter[str]:
        return Counter(t.format for t in self.tensors.values())


def _hf_name(name: str) -> str | None:
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output.weight":
        return "lm_head.weight"
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.weight"
    return None


def _unpermute(weight: QuantizedTensor, heads: int) -> QuantizedTensor:
    """Undo the converter's row order: per head, row (d, a) of [dim, 2] moves to (a, d) of [2, dim]
    (transformers' `_reverse_permute_weights`, applied to row indices)."""
    dim = weight.rows // heads // 2
    order = torch.arange(weight.rows).reshape(heads, dim, 2).transpose(1, 2).reshape(-1)
    return weight.take_rows(order)


def use_quantized_layers(module: nn.Module, source: GgufLinears, plan: ComputePlan) -> list[str]:
    """Replace each linear layer (and the token embedding) of `module` whose weight the GGUF holds in
    blocks by one computing on the blocks; return the startup log's lines (layer, format, kernel)."""
    lines = swap_in_blocks(module, source.tensors, plan, exact=True)
    return [f"weights: {source.path.name} quantized blocks kept:", *lines]


def swap_in_blocks(module: nn.Module, blocks: dict[str, QuantizedTensor], plan: ComputePlan,
                   exact: bool) -> list[str]:
    """Replace each linear layer and embedding of `module` whose weight `blocks` holds (by HF name,
    or by the fused layer's own) by one computing on them; `exact`: only where they dequantize to the
    loaded weight (else the layer stays dense). Returns the log's lines (layer, format, kernel)."""
    kernels = plan.kernels
    assert kernels is not None, "quantized layers run on the native kernels"
    tensors = dict(blocks)
    if "lm_head.weight" not in tensors and "model.embed_tokens.weight" in tensors \
            and getattr(getattr(module, "spec", None), "tie_word_embeddings", False):
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    kept: Counter[str] = Counter()
    dense: list[str] = []
    for name, child in list(module.named_modules()):
        weight = _weight_for(name, child, tensors)
        if weight is None or (plan.decode_blocks and isinstance(child, nn.Embedding)):  # a lookup: one row
            continue
        assert isinstance(child, nn.Linear | nn.Embedding)
        layer = _quantized(child, weight, kernels, plan, exact, is_head(name))
        if layer is None:
            dense.append(name)
            continue
        parent_name, _, attr = name.rpartition(".")
        setattr(module.get_submodule(parent_name), attr, layer)
        kept[f"{_generic(name)} {weight.format}"] += 1
    ns = f"tt_backend_{kernels.level}"
    lines = [f"  {count} x {what}" for what, count in sorted(kept.items())]
    if plan.int8_activations:
        linear = f"{ns}::quant_linear_q8 (inputs quantized to int8 per 32, integer dots per block)"
    elif plan.decode_blocks and plan.linear == "bf16_panels":
        linear = f"{ns}::panels_linear (Q4_0/Q4_1 blocks repacked in panels up to {nibble_panels.MAX_ROWS} " \
                 f"rows, Q8_0/Q5_0 up to {nibble_panels.BYTE_MAX_ROWS}, other blocks up to " \
                 f"{PANELS_BLOCK_ROWS}, bf16 panels beyond)"
    elif plan.decode_blocks:
        linear = f"{ns}::blocks_or_packed_linear (blocks streamed up to {_stream_rows(module)} rows, " \
                 "oneDNN prepacked bf16 beyond)"
    else:
        linear = f"{ns}::quant_linear (blocks streamed up to {_stream_rows(module)} rows, dequantized in " \
                 "bands for torch's fp32 GEMM beyond)"
    embedding = "embedding dense" if plan.decode_blocks else "embedding rows dequantized on lookup"
    lines.append(f"  kernels: linear {linear}; {embedding}")
    if dense:
        lines.append(f"  kept dense (the blocks did not dequantize to the loaded weight): {', '.join(dense)}")
    return lines


def _weight_for(name: str, child: nn.Module, tensors: dict[str, QuantizedTensor]) -> QuantizedTensor | None:
    if not isinstance(child, nn.Linear | nn.Embedding):
        return None
    prefix, _, leaf = name.rpartition(".")
    own = f"{name}.weight"
    parts = [own] if own in tensors else [f"{prefix}.{p}.weight" if prefix else f"{p}.weight"
                                          for p in _FUSED.get(leaf, (leaf,))]
    if not all(p in tensors for p in parts):
        return None
    try:
        return concat_rows([tensors[p] for p in parts])
    except ValueError:  # parts in different formats (a Q4_K_M file mixes them): stays dense
        return None


def _quantized(child: nn.Linear | nn.Embedding, weight: QuantizedTensor, kernels: CpuKernels,
               plan: ComputePlan, exact: bool, head: bool) -> nn.Module | None:
    loaded = child.weight.detach()
    if tuple(loaded.shape) != (weight.rows, weight.cols):
        return None
    if exact and not torch.equal(kernels.dequantize_blocks(weight.blocks, FORMAT_IDS[weight.format],
                                                           weight.cols).to(loaded.dtype), loaded):
        return None
    if isinstance(child, nn.Embedding):
        return QuantizedEmbedding(weight, plan.activations, kernels)
    bias = child.bias.detach() if isinstance(child, nn.Linear) and child.bias is not None else None
    fmt = FORMAT_IDS[weight.format]
    if head and plan.fp32_logits:  # the blocks for decode rows, the bf16 weights in panels beyond
        return PanelsLinear(loaded, bias, kernels, weight.blocks, fmt, fp32_out=True)
    if plan.decode_blocks and plan.linear == "bf16_panels":
        return PanelsLinear(loaded, bias, kernels, weight.blocks, fmt)
    packed = None
    if plan.decode_blocks:  # the bf16 weight oneDNN serves larger calls with, beside the blocks
        packed = torch.ops.mkldnn._reorder_linear_weight(loaded.to(torch.bfloat16))
    return QuantizedLinear(weight, bias, kernels, plan.int8_activations, packed)


def _generic(name: str) -> str:
    """`model.layers.3.mlp.down_proj` -> `model.layers.*.mlp.down_proj` (the log's grouping)."""
    return ".".join("*" if p.isdigit() else p for p in name.split("."))


def _stream_rows(module: nn.Module) -> int:
    rows = {m.small_rows for m in module.modules() if isinstance(m, QuantizedLinear)}
    return max(rows, default=0)
