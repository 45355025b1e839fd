"""The LM head of a bf16 plan keeps its logits in fp32 (`panels_linear`, devices/cpu/logits.py): the
panels kernel against the exact sums of the bf16 products, the blocks path against the bf16 blocks
kernel before its rounding, and the default model's first answer token to "What is the capital of
France?", which bf16 logits tied with the runner-up and lost to it. Needs AVX512-BF16."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import CHAT_PROMPTS
from tests.unit.test_quant_k import random_k_blocks
from tt_backend.contract.step import PlannedRow
from tt_backend.devices.cpu.compute_plan import BF16_LEVELS, ComputePlan
from tt_backend.devices.cpu.isa import probe
from tt_backend.devices.cpu.kernels import load_kernels
from tt_backend.devices.cpu.panels import PanelsLinear, panels
from tt_backend.devices.cpu.quant import FORMAT_IDS, PANELS_BLOCK_ROWS, QuantizedLinear
from tt_backend.models.gguf_linears import GgufLinears, gguf_source
from tt_backend.models.loader import load_model
from tt_backend.runtime.inputs import prepare_host_inputs

LEVELS = [level for level in probe().levels if level in BF16_LEVELS]
pytestmark = [
    pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                       reason="no C++ compiler: the native kernels cannot be built here"),
    pytest.mark.skipif(not LEVELS, reason="panels_linear needs AVX512-BF16, which this CPU lacks"),
]
CPU = torch.device("cpu")


def exact_sums(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """x @ bf16(W).T + bias in fp64 (exact for these sizes), and the sum of the terms' magnitudes."""
    w = weight.bfloat16().double()
    want = x.double() @ w.T + (0 if bias is None else bias.double())
    scale = x.double().abs() @ w.abs().T + (0 if bias is None else bias.double().abs())
    return want, scale


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("n", "k", "biased"), [(100, 75, True), (96, 64, False), (49, 576, False)])
def test_the_panels_sum_the_bf16_products_in_fp32_each_row_as_if_alone(level: str, n: int, k: int,
                                                                        biased: bool) -> None:
    """N not a multiple of 16 and an odd K (padded panels); up to 33 rows (tiles of 8 and a rest): each
    logit is the fp32 sum of K exact products, off the exact sum by at most one rounding per pair."""
    kernels = load_kernels(level)  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(n + k)
    weight = torch.randn(n, k, generator=g) * 0.05
    bias = torch.randn(n, generator=g) if biased else None
    head = PanelsLinear(weight, bias, kernels, fp32_out=True)
    assert head.panels.shape == ((n + 15) // 16, (k + 1) // 2, 16, 2)
    for rows in (1, 3, 8, 9, 17, 33):
        x = (torch.randn(rows, k, generator=g) * 4).bfloat16()
        y = head(x)
        assert y.dtype == torch.float32 and y.shape == (rows, n)
        want, scale = exact_sums(x, weight, bias)
        assert ((y.double() - want).abs() <= 2.0 ** -24 * ((k + 1) // 2 + 2) * scale).all(), rows
        assert not torch.equal(y, y.bfloat16().float()), rows  # the logits are not rounded to bf16
        assert torch.equal(y, torch.cat([head(x[r:r + 1]) for r in range(rows)])), rows


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fp32_out", [True, False])
def test_with_a_ggufs_blocks_small_calls_read_them_and_larger_ones_the_panels(level: str,
                                                                              fp32_out: bool) -> None:
    """Up to PANELS_BLOCK_ROWS rows the layer reads the blocks: rounded to bf16, its result is exactly what
    blocks_or_packed_linear gives (fp32_out: the same sums before that rounding); beyond, the panels of
    the same bf16 weights, in bf16 the fp32 sums (bias added) rounded once. Q6_K: blocks read as they are
    (Q4_0, Q4_1 and Q8_0 are repacked: test_nibble_panels.py)."""
    kernels = load_kernels(level)  # type: ignore[arg-type]
    w = random_k_blocks("q6_k", 80, 256, seed=5)
    dense = w.dequantize()
    bias = torch.randn(80).bfloat16()
    packed = torch.ops.mkldnn._reorder_linear_weight(dense.bfloat16())
    layer = QuantizedLinear(w, bias, kernels, packed=packed)
    head = PanelsLinear(dense, bias, kernels, w.blocks, FORMAT_IDS["q6_k"], fp32_out=fp32_out)
    plain = PanelsLinear(dense, bias, kernels, fp32_out=True)
    g = torch.Generator().manual_seed(1)
    for rows in (1, 2, PANELS_BLOCK_ROWS, PANELS_BLOCK_ROWS + 1, 8, 20):
        x = torch.randn(rows, 256, generator=g).bfloat16()
        y = head(x)
        assert y.dtype == (torch.float32 if fp32_out else torch.bfloat16)
        if rows <= PANELS_BLOCK_ROWS:
            assert torch.equal(y.bfloat16(), layer(x)), rows
            assert not fp32_out or not torch.equal(y, y.bfloat16().float()), rows
        else:
            assert torch.equal(y, plain(x) if fp32_out else plain(x).bfloat16()), rows


def test_only_bf16_plans_with_bf16_arithmetic_take_the_fp32_head() -> None:
    for level in probe().levels:
        for dtype in ("auto", "float32", "bfloat16"):
            plan = ComputePlan.resolve(CPU, dtype, level, "native" if level != "neon" else "auto")
            assert plan.fp32_logits == (level in BF16_LEVELS and dtype != "float32"), (level, dtype)
            paths = plan.op_paths()["linear layers and LM head"]
            assert ("LM head: tt_backend_" in paths) == plan.fp32_logits
    assert not ComputePlan.resolve(CPU, "bfloat16", LEVELS[0], "torch").fp32_logits


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("source", ["checkpoint", "gguf"])
def test_the_default_models_france_answer_no_longer_ties(level: str, source: str, model_dir: Path,
                                                         chat_ids: Any) -> None:
    """The first token of HF fp32's answer, "The" (id 504), leads "L" (id 60) by 0.08; bf16 logits put both
    at 25.375 and argmax took "L". The default plan at the level, on the bf16 checkpoint and on the GGUF
    (`decode_blocks`: the head's Q8_0 blocks for the one-row steps, the panels for the prompt): fp32 logits
    with "The" on top."""
    gguf = gguf_source("") if source == "gguf" else None
    plan = ComputePlan.resolve(CPU, "auto", level, "native", quantized_checkpoint=gguf is not None)
    loaded = load_model(model_dir, plan, quantized=GgufLinears.read(gguf) if gguf is not None else None)
    head = loaded.module.get_submodule("lm_head")
    assert isinstance(head, PanelsLinear) and head.fp32_out
    assert (head.blocks is not None) == (gguf is not None)
    layers = [m for m in loaded.module.modules() if isinstance(m, PanelsLinear) and not m.fp32_out]
    assert len(layers) == 120 and all((m.blocks is not None) == (gguf is not None) for m in layers)
    spec = loaded.spec
    kv = torch.zeros(spec.num_layers, 2, 8, 16, spec.num_kv_heads, spec.head_dim, dtype=torch.bfloat16)
    prompt = chat_ids(CHAT_PROMPTS[0])
    with torch.inference_mode():
        logits = loaded.module(prepare_host_inputs([PlannedRow(tuple(prompt), 0, (5, 0, 7, 2), True)], 16),
                               kv)[0]
    assert logits.dtype == torch.float32
    assert int(logits.argmax()) == 504 and float(logits[504]) != float(logits[60])
    assert sorted(logits.topk(2).indices.tolist()) == [60, 504]


def test_the_panels_layout() -> None:
    """[N / 16, K / 2, 16, 2]: panel p, pair j, lane l holds W[16 p + l, 2 j] and W[16 p + l, 2 j + 1]."""
    weight = torch.arange(18 * 5, dtype=torch.float32).reshape(18, 5)
    laid = panels(weight)
    assert laid.shape == (2, 3, 16, 2) and laid.dtype == torch.bfloat16
    assert laid[1, 1, 0].tolist() == [weight[16, 2].item(), weight[16, 3].item()]
    assert laid[0, 2, 3].tolist() == [weight[3, 4].item(), 0.0]  # K padded with a zero
    assert laid[1, 0, 5].tolist() == [0.0, 0.0]  # rows past N are zeros
