"""`weight_dtype=q8_0` / `q4_0`: a loaded model's linear layers quantized into GGUF blocks
(`devices/cpu/quantize.py`, byte for byte llama.cpp's reference quantizers) and swapped onto the block
kernels the way a GGUF's own blocks are (`gguf_linears.swap_in_blocks`).

Every linear layer whose in-features are a multiple of 32 is quantized, the fused projections
(`qkv_proj`, `gate_up_proj`) whole: a block never crosses a row, so the fused blocks are those of the
parts stacked. The others stay dense (listed in the log). The token embedding and the LM head (one
set of blocks when tied) take q8_0 at both values: llama.cpp's quantizer raises the output tensor,
and a tied model's embedding standing for it, above the body's type (src/llama-quant.cpp,
`llama_tensor_get_type`: Q6_K unless the type is Q8_0; Q6_K is not a format we serve, Q8_0 is the
nearest that is), and the default GGUF keeps its tied embedding at Q8_0 too. An untied embedding
llama.cpp leaves at the body's type; we keep it at q8_0 as well (a lookup reads one row a token).

The model served is the fp32 model of the dequantized weights (fp32 activations when dtype=auto). On
a GGUF source the weights quantized are transformers' dequantization of the file's (the converted
checkpoint): its blocks requantized, the errors of both added; `weight_dtype=quantized` serves the
file's own blocks instead.
"""

from __future__ import annotations

import time

from torch import nn

from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.quant import BLOCK, QuantFormat, QuantizedTensor
from tt_backend.devices.cpu.quantize import quantize
from tt_backend.models.gguf_linears import swap_in_blocks

OUTPUT_FORMAT: QuantFormat = "q8_0"
"""The token embedding's and the LM head's format."""
OUTPUT_LAYERS = ("lm_head",)


def quantize_at_load(module: nn.Module, plan: ComputePlan, source: str) -> list[str]:
    """Quantize `module`'s linear layers and embeddings to `plan.quantize_to` and serve them from the
    blocks; returns the startup log's lines (`source`: the checkpoint's name)."""
    fmt = plan.quantize_to
    assert fmt is not None and plan.kernels is not None
    start = time.perf_counter()
    blocks: dict[str, QuantizedTensor] = {}
    shared: dict[tuple[int, tuple[int, ...]], QuantizedTensor] = {}  # a tied LM head: the embedding's
    dense: list[str] = []
    for name, child in module.named_modules():
        if not isinstance(child, nn.Linear | nn.Embedding):
            continue
        weight = child.weight.detach()
        if weight.shape[1] % BLOCK:
            dense.append(name)
            continue
        key = (weight.data_ptr(), tuple(weight.shape))
        if key not in shared:
            output = isinstance(child, nn.Embedding) or name in OUTPUT_LAYERS
            shared[key] = quantize(weight, OUTPUT_FORMAT if output else fmt)
        blocks[f"{name}.weight"] = shared[key]
    seconds = time.perf_counter() - start
    nbytes = sum(b.nbytes for b in shared.values())
    lines = swap_in_blocks(module, blocks, plan, exact=False)
    if dense:
        lines.append(f"  kept dense (in-features not a multiple of {BLOCK}): {', '.join(dense)}")
    return [f"weights: {source} quantized at load to {fmt} (embedding and LM head {OUTPUT_FORMAT}) in "
            f"{seconds:.1f} s, {nbytes / 1e6:.1f} MB of blocks:", *lines]
