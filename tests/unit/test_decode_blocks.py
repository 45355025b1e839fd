"""A bf16 plan with a GGUF under weight_dtype=auto (`decode_blocks`): each quantized layer keeps its blocks
for calls of up to DECODE_BLOCK_ROWS rows and the bf16 weight beyond, in panels with AVX512-BF16
(`panels_linear`), else prepacked for oneDNN (`blocks_or_packed_linear`). Needs a CPU with AVX-512."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.conftest import CHAT_PROMPTS
from tests.unit.test_engine_cpu_isa import follows_hf_fp32_within_bf16
from tests.unit.test_quant_k import random_k_blocks
from tests.unit.test_quant_linear import random_blocks
from tt_backend.devices.cpu import nibble_panels
from tt_backend.devices.cpu.compute_plan import PREPACK_LEVELS, ComputePlan
from tt_backend.devices.cpu.isa import probe
from tt_backend.devices.cpu.kernels import load_kernels
from tt_backend.devices.cpu.panels import PanelsLinear
from tt_backend.devices.cpu.quant import (
    DECODE_BLOCK_ROWS,
    FORMAT_IDS,
    PANELS_BLOCK_ROWS,
    QuantizedLinear,
    QuantizedTensor,
)
from tt_backend.models.gguf_linears import GgufLinears, gguf_source
from tt_backend.models.loader import load_model

PREPACKED = [level for level in probe().levels if level in PREPACK_LEVELS and level != "amx"]
pytestmark = [
    pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                       reason="no C++ compiler: the native kernels cannot be built here"),
    pytest.mark.skipif(not PREPACKED or not torch.backends.mkldnn.is_available(),
                       reason="oneDNN's bf16 prepacked kernels need AVX-512, which this CPU lacks"),
]
CPU = torch.device("cpu")


def plan_at(level: str, **kw: Any) -> ComputePlan:
    """The plan at `level` with bf16 activations (auto where the level has bf16 hardware)."""
    dtype = "auto" if level == "avx512_bf16" else "bfloat16"
    return ComputePlan.resolve(CPU, dtype, level, **kw)


@pytest.mark.parametrize("level", PREPACKED)
def test_the_plan_keeps_decode_blocks_only_for_a_gguf_under_auto_on_onednn(level: str) -> None:
    plan = plan_at(level, quantized_checkpoint=True)
    linear = "bf16_panels" if bf16_dots(level) else "onednn_packed"  # beyond the blocks: panels or oneDNN
    assert (plan.decode_blocks, plan.quantized, plan.linear, plan.activations) == \
        (True, False, linear, torch.bfloat16)
    assert plan.reads_file_blocks
    op, rows = ("panels_linear", 4) if bf16_dots(level) else ("blocks_or_packed_linear", 8)
    paths = plan.op_paths()["linear layers and LM head"]
    assert f"{op}: the GGUF's quantized blocks up to {rows} rows" in paths
    assert "for decode" in plan.dtype_name
    assert not plan_at(level).decode_blocks  # no GGUF
    assert not plan_at(level, quantized_checkpoint=True, weight_dtype="bfloat16").decode_blocks
    assert not plan_at(level, quantized_checkpoint=True, cpu_kernels="torch").decode_blocks
    kept = plan_at(level, quantized_checkpoint=True, weight_dtype="quantized")
    assert (kept.decode_blocks, kept.quantized) == (False, True)


def bf16_dots(level: str) -> bool:
    """Whether the level's blocks_or_packed_linear reads the blocks as bf16 weights (AVX512-BF16)."""
    return level in ("avx512_bf16", "amx")


@pytest.mark.parametrize("level", PREPACKED)
@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k"])
def test_small_calls_read_the_blocks_and_larger_ones_the_prepacked_weight(level: str, fmt: Any) -> None:
    """Beyond DECODE_BLOCK_ROWS rows the layer is oneDNN's kernel on the bf16 weight, bit for bit. Up to it,
    it reads the blocks: with AVX512-BF16 as bf16 weights, each row as if alone and within fp32 rounding
    of x @ bf16(W); without, it is quant_linear on the exact fp32 weights, bit for bit."""
    kernels = load_kernels(level)  # type: ignore[arg-type]
    w = random_k_blocks(fmt, 96, 256, seed=3) if fmt.endswith("_k") else random_blocks(fmt, 96, 256, seed=3)
    dense = w.dequantize()
    bias = torch.randn(96).bfloat16()
    packed = torch.ops.mkldnn._reorder_linear_weight(dense.bfloat16())
    layer = QuantizedLinear(w, bias, kernels, packed=packed)
    for rows in (1, 3, DECODE_BLOCK_ROWS, DECODE_BLOCK_ROWS + 1, 17):
        x = torch.randn(rows, 256).bfloat16()
        y = layer(x)
        assert y.dtype == torch.bfloat16 and y.shape == (rows, 96)
        if rows > DECODE_BLOCK_ROWS:
            assert torch.equal(y, torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")), rows
        elif not bf16_dots(level):
            assert torch.equal(y, kernels.quant_linear(x, w.blocks, FORMAT_IDS[fmt], 256, bias, 32)), rows
        else:
            assert torch.equal(y, torch.cat([layer(x[r:r + 1]) for r in range(rows)])), rows
            want = x.float() @ dense.bfloat16().float().T + bias.float()
            scale = x.float().abs() @ dense.abs().T + bias.float().abs()
            assert ((y.float() - want).abs() <= 2 ** -8 * want.abs() + 2 ** -16 * scale).all(), rows


@pytest.mark.skipif(not any(bf16_dots(level) for level in PREPACKED), reason="no AVX512-BF16 on this CPU")
def test_with_bf16_dots_the_blocks_are_the_prepacked_weights_values() -> None:
    """Two inputs of 1 pick two weights: y = bf16(bf16(w_a) + bf16(w_b)) exactly, never bf16(w_a + w_b).
    Q4_1 with d = 3 * 2^-9 and m = 1: weight 3 (quant 1) is 1 + 3 * 2^-9 and weight 20 (quant 2) is
    1 + 3 * 2^-8, both more bits than bf16 holds, and the two roundings disagree."""
    kernels = load_kernels("avx512_bf16")
    d, m = torch.tensor([3 * 2.0 ** -9]).half(), torch.tensor([1.0]).half()
    nibbles = torch.zeros(16, dtype=torch.uint8)
    nibbles[3], nibbles[4] = 0x01, 0x20  # weight 3: byte 3's low nibble; weight 20: byte 4's high one
    blocks = torch.cat([d.view(torch.uint8), m.view(torch.uint8), nibbles]).repeat(8, 1)
    w = QuantizedTensor("q4_1", blocks.reshape(8, 20).contiguous(), 32)
    dense = w.dequantize()
    packed = torch.ops.mkldnn._reorder_linear_weight(dense.bfloat16())
    layer = QuantizedLinear(w, None, kernels, packed=packed)
    x = torch.zeros(1, 32, dtype=torch.bfloat16)
    x[0, 3] = x[0, 20] = 1
    want = (dense[:, 3].bfloat16().float() + dense[:, 20].bfloat16().float()).bfloat16()
    assert not torch.equal(want, (dense[:, 3] + dense[:, 20]).bfloat16())  # the case tells them apart
    assert torch.equal(layer(x)[0], want)


@pytest.fixture(scope="module")
def hybrid(model_dir: Path) -> tuple[Any, str]:
    """The default GGUF loaded as the default plan at the best prepacked level, and the load's log."""
    gguf = gguf_source("")
    assert gguf is not None
    plan = plan_at(PREPACKED[-1], quantized_checkpoint=True)
    log = logging.getLogger("tt_backend.models.loader")
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    log.addHandler(handler)
    old_level = log.level
    log.setLevel(logging.INFO)
    try:
        loaded = load_model(model_dir, plan, quantized=GgufLinears.read(gguf))
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
    return loaded, "\n".join(records)


def test_every_linear_layer_holds_both_forms_and_the_embedding_stays_dense(hybrid: tuple[Any, str]) -> None:
    loaded, log = hybrid
    head = loaded.module.get_submodule("lm_head")
    if bf16_dots(PREPACKED[-1]):  # blocks, then bf16 panels; the head's logits stay fp32 (cpu/logits.py)
        layers = [m for m in loaded.module.modules() if isinstance(m, PanelsLinear)]
        assert len(layers) == 121 and [m for m in layers if m.fp32_out] == [head]
        assert all(m.blocks is not None for m in layers) and head.small_rows == PANELS_BLOCK_ROWS
        # the Q4_1 layers' blocks repacked in panels (nibble_panels), read up to 8 rows
        assert all((m.fmt, m.small_rows) == (nibble_panels.FORMAT, nibble_panels.MAX_ROWS)
                   for m in layers if m is not head)
        # the Q8_0 head's too, read up to 4 rows
        assert (head.fmt, head.small_rows) == (nibble_panels.BYTE_FORMAT, nibble_panels.BYTE_MAX_ROWS)
        assert "1 x lm_head q8_0" in log and "::panels_linear" in log
    else:
        quantized = [m for m in loaded.module.modules() if isinstance(m, QuantizedLinear)]
        assert len(quantized) == 121 and head.format == "q8_0" and "blocks_or_packed_linear" in log
        assert all(m.packed is not None and m.small_rows == DECODE_BLOCK_ROWS for m in quantized)
    assert type(loaded.module.get_submodule("model.embed_tokens")) is nn.Embedding
    assert "30 x model.layers.*.mlp.gate_up_proj q4_1" in log
    assert "embedding dense" in log and "kept dense" not in log


def test_prefill_on_bf16_and_decode_on_the_blocks_follow_hf_fp32(hybrid: tuple[Any, str], model_dir: Path,
                                                                  chat_ids: Any, hf_greedy: Any) -> None:
    """The prompt goes through the prepacked bf16 weights, each decode step (one row) through the blocks:
    within bf16 precision of HF fp32 at every step, as the dense bf16 plan is."""
    follows_hf_fp32_within_bf16(hybrid[0], model_dir, chat_ids(CHAT_PROMPTS[0]), hf_greedy, "decode_blocks")
