"""GGUF quantized blocks on the CPU: the native `quant_linear` and `dequantize_blocks` of every
instruction-set level this machine has against gguf's own dequantization and a dequantize-then-matmul
reference, and the compute plan's `weight_dtype`."""

from __future__ import annotations

import shutil

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize

from tt_backend.config import EngineConfig
from tt_backend.devices.cpu.compute_plan import BF16_LEVELS, ComputePlan
from tt_backend.devices.cpu.isa import IsaLevel, probe
from tt_backend.devices.cpu.kernels import CpuKernels, load_kernels
from tt_backend.devices.cpu.quant import (
    BLOCK_BYTES,
    FORMAT_IDS,
    STREAM_ROWS,
    QuantFormat,
    QuantizedLinear,
    QuantizedTensor,
    concat_rows,
    dequantize_rows,
)

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")

FORMATS: tuple[QuantFormat, ...] = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1")
GGML = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
        "q4_1": gguf.GGMLQuantizationType.Q4_1, "q5_0": gguf.GGMLQuantizationType.Q5_0,
        "q5_1": gguf.GGMLQuantizationType.Q5_1}
U = 2.0 ** -24  # fp32 unit roundoff


@pytest.fixture(scope="module", params=probe().levels)
def kernels(request: pytest.FixtureRequest) -> CpuKernels:
    level: IsaLevel = request.param
    return load_kernels(level)


def random_blocks(fmt: QuantFormat, rows: int, cols: int, seed: int = 0) -> QuantizedTensor:
    """Random quants with scales (and q4_1 minimums) of a real model's size, fp16 subnormals included."""
    gen = torch.Generator().manual_seed(seed)
    nb = cols // 32
    b = torch.randint(0, 256, (rows, nb, BLOCK_BYTES[fmt]), dtype=torch.uint8, generator=gen)
    scales = torch.rand(rows, nb, generator=gen) * 0.02
    scales[0, 0] = 3e-6  # an fp16 subnormal
    b[..., 0:2] = scales.half().view(torch.uint8).view(rows, nb, 2)
    if fmt in ("q4_1", "q5_1"):
        b[..., 2:4] = (-torch.rand(rows, nb, generator=gen) * 0.1).half().view(torch.uint8).view(rows, nb, 2)
    return QuantizedTensor(fmt, b.reshape(rows, -1).contiguous(), cols)


def gguf_dequantized(w: QuantizedTensor) -> torch.Tensor:
    values = dequantize(w.blocks.numpy(), GGML[w.format]).astype(np.float32)
    return torch.from_numpy(values).view(w.rows, w.cols)


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantization_equals_ggufs_bit_for_bit(kernels: CpuKernels, fmt: QuantFormat) -> None:
    w = random_blocks(fmt, 37, 416)
    want = gguf_dequantized(w)
    assert torch.equal(kernels.dequantize_blocks(w.blocks, FORMAT_IDS[fmt], w.cols), want)
    assert torch.equal(w.dequantize(), want)
    assert torch.equal(dequantize_rows(w.blocks[5:9], fmt, w.cols), want[5:9])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("out_features, in_features", [(37, 416), (5, 96), (130, 1568)])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 7, 40, 70])
def test_matches_dequantize_then_matmul(kernels: CpuKernels, fmt: QuantFormat, out_features: int,
                                        in_features: int, rows: int) -> None:
    """Against the float64 product of the dequantized weight: within fp32 summation's bound
    (K u sum |x_k w_k|: the kernel sums in 8 or 16 lanes then a fixed tree, torch's GEMM in its own
    order); at decode sizes (streamed) a row's result does not depend on the rows beside it."""
    w = random_blocks(fmt, out_features, in_features, seed=rows)
    x = torch.randn(rows, in_features, generator=torch.Generator().manual_seed(1))
    dense = gguf_dequantized(w).double()
    small = STREAM_ROWS.get(kernels.level, 32)
    y = kernels.quant_linear(x, w.blocks, FORMAT_IDS[fmt], in_features, None, small)
    assert y.dtype == torch.float32 and y.shape == (rows, out_features)
    bound = in_features * U * (x.double().abs() @ dense.abs().T)
    assert ((y.double() - x.double() @ dense.T).abs() <= bound).all()
    if rows <= small:
        alone = [kernels.quant_linear(x[r:r + 1], w.blocks, FORMAT_IDS[fmt], in_features, None, small)
                 for r in range(rows)]
        assert torch.equal(y, torch.cat(alone))


def test_every_path_on_one_layer_with_a_bias_and_bf16_inputs(kernels: CpuKernels) -> None:
    """Streamed, through the dequantized tile (more rows than a register block) and band by band:
    the bias added in fp32; bf16 inputs widened exactly and the result rounded to bf16."""
    w = random_blocks("q4_1", 19, 160)
    bias = torch.randn(19)
    x = torch.randn(9, 160)
    layer = QuantizedLinear(w, bias, kernels)
    want = x.double() @ gguf_dequantized(w).double().T + bias.double()
    bound = 160 * U * (x.double().abs() @ gguf_dequantized(w).double().abs().T) + U * bias.double().abs()
    for small_rows in (0, 4, 64):
        layer.small_rows = small_rows
        assert ((layer(x).double() - want).abs() <= 2 * bound).all(), small_rows
    xb = x.bfloat16()
    assert layer(xb).dtype == torch.bfloat16
    assert torch.equal(layer(xb), layer(xb.float()).bfloat16())


def test_fused_rows_and_reordered_rows_are_exact() -> None:
    q, k = random_blocks("q8_0", 6, 64, seed=1), random_blocks("q8_0", 4, 64, seed=2)
    fused = concat_rows([q, k])
    assert torch.equal(fused.dequantize(), torch.cat([q.dequantize(), k.dequantize()]))
    order = torch.tensor([3, 0, 2, 1])
    assert torch.equal(k.take_rows(order).dequantize(), k.dequantize()[order])
    with pytest.raises(ValueError, match="cannot fuse"):
        concat_rows([q, random_blocks("q4_1", 4, 64)])
    with pytest.raises(ValueError, match="do not hold rows of 96"):
        QuantizedTensor("q4_0", q.blocks, 96)


def test_the_plan_keeps_quantized_blocks_in_fp32_unless_widened() -> None:
    cpu = torch.device("cpu")
    best = probe().best
    kept = ComputePlan.resolve(cpu, "auto", best, weight_dtype="quantized", quantized_checkpoint=True)
    assert (kept.quantized, kept.activations) == (True, torch.float32)
    assert "quant_linear" in kept.op_paths()["linear layers and LM head"]
    bf16 = ComputePlan.resolve(cpu, "bfloat16", best, weight_dtype="quantized", quantized_checkpoint=True)
    assert (bf16.quantized, bf16.activations) == (True, torch.bfloat16)
    # auto keeps the blocks unless the dense plan would be bf16 on oneDNN / AMX (batched decode is
    # faster widened there): below avx512_bf16 with dtype=auto, and with dtype=float32 at any level
    for level in ("portable", "avx2", "avx512", "avx512_bf16", "amx"):
        if level in probe().levels:
            auto = ComputePlan.resolve(cpu, "auto", level, quantized_checkpoint=True)  # type: ignore[arg-type]
            assert auto.quantized == (level not in BF16_LEVELS), level
            fp32 = ComputePlan.resolve(cpu, "float32", level, quantized_checkpoint=True)  # type: ignore[arg-type]
            assert fp32.quantized, level
    assert not ComputePlan.resolve(cpu, "bfloat16", best, quantized_checkpoint=True).quantized
    widened = ComputePlan.resolve(cpu, "auto", best, weight_dtype="bfloat16", quantized_checkpoint=True)
    assert widened == ComputePlan.resolve(cpu, "auto", best)  # as before: the file widened
    fp32 = ComputePlan.resolve(cpu, "auto", best, weight_dtype="float32", quantized_checkpoint=True)
    assert (fp32.quantized, fp32.activations, fp32.weights) == (False, torch.float32, torch.float32)
    assert not ComputePlan.resolve(cpu, "auto", best, "torch", weight_dtype="quantized",
                                   quantized_checkpoint=True).quantized
    with pytest.raises(ValueError, match="weight_dtype=float32 with dtype=bfloat16"):
        ComputePlan.resolve(cpu, "bfloat16", best, weight_dtype="float32")
    with pytest.raises(ValueError, match="weight_dtype='q2_k'"):
        EngineConfig(weight_dtype="q2_k")  # type: ignore[arg-type]
