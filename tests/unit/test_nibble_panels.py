"""A GGUF's Q4_0, Q4_1, Q8_0 and Q5_0 blocks repacked in panels for decode rows (csrc/nibble_panels.cpp,
devices/cpu/nibble_panels.py): the layouts hold every weight once, the kernel computes the fp32
dequantized weights (ggml's q * d + m) to within fp32 rounding, tighter than the weights' rounding to
bf16 would allow, reads each weight exactly, a row's result does not depend on its batch, and calls of
more than 8 rows take the bf16 panels. Needs AVX512-BF16."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from tests.unit.test_quant_linear import random_blocks
from tt_backend.devices.cpu import nibble_panels
from tt_backend.devices.cpu.compute_plan import BF16_LEVELS
from tt_backend.devices.cpu.isa import probe
from tt_backend.devices.cpu.kernels import load_kernels
from tt_backend.devices.cpu.panels import PanelsLinear
from tt_backend.devices.cpu.quant import BLOCK_BYTES, FORMAT_IDS, QuantizedTensor

BYTES = ("q8_0", "q5_0")  # held in the byte layout
LEVELS = [level for level in probe().levels if level in BF16_LEVELS]
pytestmark = [
    pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                       reason="no C++ compiler: the native kernels cannot be built here"),
    pytest.mark.skipif(not LEVELS, reason="panels_linear needs AVX512-BF16, which this CPU lacks"),
]


def block_scales(w: QuantizedTensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each weight's block d and m as the kernel takes them ([rows, cols] fp32; q4_0's m is -8 d; q8_0
    and q5_0, held as q8_0, have none)."""
    b = w.blocks.reshape(w.rows, w.cols // 32, BLOCK_BYTES[w.format])
    d = b[..., 0:2].contiguous().view(torch.float16).float()[..., 0]  # [rows, blocks]
    m = b[..., 2:4].contiguous().view(torch.float16).float()[..., 0] if w.format == "q4_1" else -8 * d
    m = torch.zeros_like(d) if w.format in BYTES else m
    return d.repeat_interleave(32, dim=1), m.repeat_interleave(32, dim=1)


def test_the_layout_holds_each_weight_of_a_panel_block_once() -> None:
    low, high = nibble_panels._source()
    assert np.array_equal(np.sort(np.concatenate([low, high])), np.arange(512))


def test_the_byte_layout_holds_each_weight_of_a_panel_block_once() -> None:
    assert np.array_equal(np.sort(nibble_panels._byte_source()), np.arange(512))


def test_the_byte_repack_puts_each_weight_where_the_layout_says() -> None:
    """The repack's transposition against a gather by `_byte_source` (37 rows: a padded panel)."""
    w = random_blocks("q8_0", 37, 64, seed=4)
    out = nibble_panels.nibble_panels(w.blocks, "q8_0", 37, 64).numpy()
    b = w.blocks.reshape(37, 2, 34).numpy()
    u = (b[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)  # [rows, blocks, 32]
    u = np.pad(u, [(0, 11), (0, 0), (0, 0)]).reshape(3, 16, 2, 32).transpose(0, 2, 1, 3).reshape(3, 2, 512)
    assert out.shape == (3, 2, 544) and np.array_equal(out[..., :512], u[..., nibble_panels._byte_source()])
    d = np.pad(b[..., :2].copy().view(np.float16)[..., 0], [(0, 11), (0, 0)])  # [rows, blocks]
    assert np.array_equal(out[..., 512:].copy().view(np.float16), d.reshape(3, 16, 2).transpose(0, 2, 1))


def test_only_q4_0_q4_1_q8_0_and_q5_0_blocks_are_repacked() -> None:
    with pytest.raises(ValueError, match="q5_1"):
        nibble_panels.nibble_panels(random_blocks("q5_1", 16, 64, seed=1).blocks, "q5_1", 16, 64)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fmt", nibble_panels.FORMATS)
def test_a_one_hot_row_reads_its_weights_exactly(level: str, fmt: str) -> None:
    """x = e_k: every product and sum the kernel forms is exact but the last (q d + m, ggml's own
    rounding), so y is column k of the fp32 dequantized weights bit for bit, not their bf16 roundings."""
    kernels = load_kernels(level)  # type: ignore[arg-type]
    w = random_blocks(fmt, 40, 128, seed=5)  # type: ignore[arg-type]
    dense = w.dequantize()
    layer = PanelsLinear(dense, None, kernels, w.blocks, FORMAT_IDS[fmt], fp32_out=True)  # type: ignore[index]
    ks = [0, 1, 31, 32, 77, 127]
    x = torch.zeros(len(ks), 128, dtype=torch.bfloat16)
    x[range(len(ks)), ks] = 1
    want = dense[:, ks].T
    most = layer.small_rows
    assert torch.equal(torch.cat([layer(x[i:i + most]) for i in range(0, len(ks), most)]), want)
    assert not torch.equal(want.bfloat16().float(), want)  # the test tells the weights from bf16's


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fmt", nibble_panels.FORMATS)
@pytest.mark.parametrize(("n", "k"), [(80, 256), (37, 64)])
def test_decode_rows_are_the_fp32_dequantized_weights(level: str, fmt: str, n: int, k: int) -> None:
    """Within fp32 rounding of the kernel's sums: a block's 16 dot products of x by 128 + q, its input
    sum (32 terms) times m - 128 d, and the blocks' running total each round at 2^-24 of at most the
    magnitudes of their terms (T: x by 143 d, m and 128 d), so the error is below 2^-24 (blocks + 40) T;
    rounding the weights to bf16 (the panels' values) leaves some result outside that bound. Q8_0: 32 dot
    products of x by 128 + l and 16 x by 128 + h, then the input sum times 2304 d (T: x by 2431 d and
    2304 d), below 2^-24 (blocks + 72) T: a bound bf16's rounding stays within (the one-hot test tells
    those apart)."""
    kernels = load_kernels(level)  # type: ignore[arg-type]
    w = random_blocks(fmt, n, k, seed=7)  # type: ignore[arg-type]
    dense = w.dequantize()
    bias = torch.randn(n)
    fp32 = PanelsLinear(dense, bias, kernels, w.blocks, FORMAT_IDS[fmt], fp32_out=True)  # type: ignore[index]
    bf16 = PanelsLinear(dense, bias, kernels, w.blocks, FORMAT_IDS[fmt])  # type: ignore[index]
    assert (fp32.fmt, fp32.small_rows) == nibble_panels.format_of(fmt)  # type: ignore[arg-type]
    d, m = block_scales(w)
    g = torch.Generator().manual_seed(3)
    for rows in range(1, fp32.small_rows + 1):
        x = torch.randn(rows, k, generator=g).bfloat16()
        y = fp32(x)
        want = x.double() @ dense.double().T + bias.double()
        scale, extra = (4735, 72) if fmt in BYTES else (271, 40)
        terms = x.double().abs() @ (scale * d.abs() + m.abs()).double().T + bias.double().abs()
        bound = 2.0 ** -24 * (k // 32 + extra) * terms
        assert bound.shape == want.shape == y.shape and ((y.double() - want).abs() <= bound).all(), rows
        rounded = x.double() @ dense.bfloat16().double().T + bias.double()
        if fmt not in BYTES:
            assert ((rounded - want).abs() > bound).any(), rows  # the bound tells the weights from bf16's
        assert torch.equal(bf16(x), y.bfloat16()), rows  # the same sums, rounded once
        assert torch.equal(y, torch.cat([fp32(x[r:r + 1]) for r in range(rows)])), rows


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("fmt", "most"), [("q4_1", 8), ("q8_0", 4), ("q5_0", 4)])
def test_more_rows_than_the_layout_takes_read_the_panels(level: str, fmt: str, most: int) -> None:
    kernels = load_kernels(level)  # type: ignore[arg-type]
    w = random_blocks(fmt, 48, 128, seed=2)  # type: ignore[arg-type]
    dense = w.dequantize()
    layer = PanelsLinear(dense, None, kernels, w.blocks, FORMAT_IDS[fmt])  # type: ignore[index]
    plain = PanelsLinear(dense, None, kernels)
    assert layer.small_rows == most
    x = torch.randn(most, 128).bfloat16()
    assert not torch.equal(layer(x), plain(x))  # up to `most` rows: the fp32 weights
    for rows in (most + 1, 17):
        x = torch.randn(rows, 128).bfloat16()
        assert torch.equal(layer(x), plain(x)), rows
