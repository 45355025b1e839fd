"""`quant_activations=int8`: `quant_linear_q8` (csrc/quant_linear_q8.cpp, llama.cpp's scheme of int8
inputs per 32 and integer dot products per block) at every level this machine has, portable forced,
against its arithmetic in torch ops (tests/unit/q8_reference.py) bit for bit, and the plan and the
engine that use it."""

from __future__ import annotations

import logging
import shutil

import pytest
import torch

from tests.conftest import CHAT_PROMPTS
from tests.unit import q8_reference
from tests.unit.test_engine_cpu_isa import greedy_tokens
from tests.unit.test_quant_k import random_k_blocks
from tests.unit.test_quant_linear import random_blocks
from tt_backend.config import EngineConfig
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.isa import IsaLevel, probe
from tt_backend.devices.cpu.kernels import CpuKernels, load_kernels
from tt_backend.devices.cpu.quant import FORMAT_IDS, QuantFormat, QuantizedTensor

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")

FORMATS: tuple[QuantFormat, ...] = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k")


@pytest.fixture(scope="module", params=probe().levels)
def kernels(request: pytest.FixtureRequest) -> CpuKernels:
    level: IsaLevel = request.param
    return load_kernels(level)


def blocks_of(fmt: QuantFormat, rows: int, cols: int) -> QuantizedTensor:
    return random_k_blocks(fmt, rows, cols) if fmt.endswith("_k") else random_blocks(fmt, rows, cols)


def test_inputs_quantize_as_the_reference_does(kernels: CpuKernels) -> None:
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(1)) * 3
    x[0, :32] = 0  # a block of zeros: d = 0, q = 0
    x[1, 32:64] = torch.arange(32) - 15.5  # halves on the grid: q * d ties round to even
    x[2, 64] = 1e-30  # a tiny maximum
    q, d, s = kernels.quantize_q8(x)
    rq, rd, rs = q8_reference.quantize_q8(x)
    assert torch.equal(q, rq) and torch.equal(d, rd) and torch.equal(s, rs)
    assert d[0, 0].item() == 0.0 and not q[0, :32].any()
    assert q.abs().max().item() == 127 and q.dtype == torch.int8


@pytest.mark.parametrize("fmt", FORMATS)
def test_equals_the_integer_reference_bit_for_bit(kernels: CpuKernels, fmt: QuantFormat) -> None:
    """Rows 1 to 9 (the kernel takes rows four at a time, then three, two, one) by 13 columns (four at
    a time, then a tail), with a bias; and each row alone gives its bits in the batch."""
    w = blocks_of(fmt, 13, 512)
    gen = torch.Generator().manual_seed(2)
    x, bias = torch.randn(9, 512, generator=gen), torch.randn(13, generator=gen)
    y = kernels.quant_linear_q8(x, w.blocks, FORMAT_IDS[fmt], 512, bias)
    assert torch.equal(y, q8_reference.quant_linear_q8(x, w.blocks, fmt, 512, bias))
    for r in (0, 4, 8):
        row = kernels.quant_linear_q8(x[r:r + 1], w.blocks, FORMAT_IDS[fmt], 512, bias)
        assert torch.equal(row, y[r:r + 1])


def test_is_within_int8_error_of_the_exact_layer(kernels: CpuKernels) -> None:
    """What the scheme costs against the fp32 sums of the dequantized weights: under 2% of the output's
    norm on random inputs (measured 0.4-0.6% for every format)."""
    w = blocks_of("q4_1", 64, 576)
    x = torch.randn(4, 576, generator=torch.Generator().manual_seed(3))
    exact = x @ w.dequantize().T
    y = kernels.quant_linear_q8(x, w.blocks, FORMAT_IDS["q4_1"], 576, None)
    assert 0 < ((y - exact).norm() / exact.norm()).item() < 0.02


def test_bf16_inputs_and_leading_dims_keep_their_shape(kernels: CpuKernels) -> None:
    w = blocks_of("q8_0", 8, 64)
    x = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(4)).bfloat16()
    y = kernels.quant_linear_q8(x, w.blocks, FORMAT_IDS["q8_0"], 64, None)
    assert y.shape == (2, 3, 8) and y.dtype == torch.bfloat16
    expected = q8_reference.quant_linear_q8(x.float().reshape(6, 64), w.blocks, "q8_0", 64)
    assert torch.equal(y.reshape(6, 8), expected.bfloat16())


def test_the_plan_needs_blocks_and_keeps_a_ggufs_under_auto() -> None:
    cpu = torch.device("cpu")
    plan = ComputePlan.resolve(cpu, quantized_checkpoint=True, quant_activations="int8")
    assert plan.quantized and plan.int8_activations  # auto keeps the blocks, even where bf16 is dense
    assert "quant_linear_q8 (int8 inputs)" in plan.describe()
    with pytest.raises(ValueError, match="quant_activations=int8 applies to linear layers on quantized"):
        ComputePlan.resolve(cpu, quantized_checkpoint=False, quant_activations="int8")
    with pytest.raises(ValueError, match="quant_activations=int8 applies"):
        ComputePlan.resolve(cpu, weight_dtype="bfloat16", quantized_checkpoint=True, quant_activations="int8")
    assert ComputePlan.resolve(cpu, weight_dtype="q4_0", quant_activations="int8").int8_activations
    with pytest.raises(ValueError, match="quant_activations='int4' is not one of float32, int8"):
        ComputePlan.resolve(cpu, quant_activations="int4")
    with pytest.raises(ValueError, match="quant_activations"):
        EngineConfig(quant_activations="int4")  # type: ignore[arg-type]


def test_the_default_model_serves_the_same_tokens_at_every_level(chat_ids: object,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The same integer sums and fp32 operations at every level: greedy tokens are equal between the
    portable build and this machine's best, and the startup log names the kernel."""
    prompts = [chat_ids(p) for p in CHAT_PROMPTS[:2]]  # type: ignore[operator]
    tokens = []
    with caplog.at_level(logging.INFO):
        for level in sorted({"portable", probe().best}):
            config = EngineConfig(cpu_isa=level, max_model_len=128, quant_activations="int8")  # type: ignore[arg-type]
            tokens.append(greedy_tokens(config, prompts))
    assert all(t == tokens[0] for t in tokens) and all(len(seq) > 0 for seq in tokens[0])
    assert "::quant_linear_q8 (inputs quantized to int8 per 32" in caplog.text
