"""The native paged decode-attention kernel against the portable path (gather + SDPA)."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from tt_backend.devices.cpu_kernels import load_kernels, paged_decode_attention
from tt_backend.models.llama import gather_kv

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")

BLOCK = 16


@pytest.fixture(scope="module", autouse=True)
def kernels() -> None:
    error = load_kernels()
    assert error is None, error  # a compiler is present, so the build must work


def reference(q: torch.Tensor, kv: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor,
              positions: torch.Tensor, window: int) -> torch.Tensor:
    """fp32 gather + SDPA with the model's visibility rule."""
    keys, values = gather_kv(kv.float(), tables)
    s = torch.arange(keys.shape[2])
    visible = (s[None] < lens[:, None]) & (s[None] <= positions[:, None])
    if window:
        visible &= s[None] > positions[:, None] - window
    out = F.scaled_dot_product_attention(q.float()[:, :, None], keys, values,
                                         attn_mask=visible[:, None, None], enable_gqa=True)
    return out[:, :, 0]


def case(dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int, lens: list[int],
         seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    width = max(-(-n // BLOCK) for n in lens) + 1  # one spare column: the kernel must stop at the context
    num_blocks = len(lens) * width + 3
    kv = torch.randn(2, num_blocks, BLOCK, kv_heads, head_dim, generator=gen).to(dtype)
    tables = torch.randperm(num_blocks, generator=gen)[: len(lens) * width].view(len(lens), width)
    q = torch.randn(len(lens), heads, head_dim, generator=gen).to(dtype)
    context = torch.tensor(lens)
    return q, kv, tables, context


TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("heads, kv_heads, head_dim", [(9, 3, 64), (4, 4, 128), (8, 1, 64), (6, 2, 48)])
def test_matches_gather_and_sdpa(dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int) -> None:
    """Rows ending mid-block, on a block boundary, after one key; the bf16 shapes (64, 128) take the
    AVX512-BF16 path where the CPU has it, 48 the portable one."""
    q, kv, tables, lens = case(dtype, heads, kv_heads, head_dim, [1, 16, 17, 100, 255])
    positions = lens - 1
    out = paged_decode_attention(q, kv, tables, lens, positions, 0, head_dim ** -0.5)
    assert out.dtype == dtype and out.shape == q.shape
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.float(), reference(q, kv, tables, lens, positions, 0), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sliding_window_and_a_position_before_the_context_end(dtype: torch.dtype) -> None:
    q, kv, tables, lens = case(dtype, 9, 3, 64, [40, 90, 130])
    positions = torch.tensor([39, 60, 129])  # row 1 sees keys up to its position, not its context
    for window in (0, 7, 32):
        out = paged_decode_attention(q, kv, tables, lens, positions, window, 0.125)
        tol = TOLERANCE[dtype]
        torch.testing.assert_close(out.float(), reference(q, kv, tables, lens, positions, window),
                                   atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_does_not_depend_on_its_batch(dtype: torch.dtype) -> None:
    """Bit for bit: alone, in a batch, with another table width, on one thread; a padding row
    (no context) gives zeros."""
    q, kv, tables, lens = case(dtype, 9, 3, 64, [33, 200, 7, 0])
    positions = (lens - 1).clamp(min=0)
    batch = paged_decode_attention(q, kv, tables, lens, positions, 0, 0.125)
    alone = paged_decode_attention(q[1:2], kv, tables[1:2], lens[1:2], positions[1:2], 0, 0.125)
    narrow = paged_decode_attention(q[:3], kv, tables[:3, :13].contiguous(), lens[:3], positions[:3], 0,
                                    0.125)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = paged_decode_attention(q, kv, tables, lens, positions, 0, 0.125)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(batch[1], alone[0])
    assert torch.equal(batch[:3], narrow)
    assert torch.equal(batch, single)
    assert torch.count_nonzero(batch[3]) == 0


def test_bad_shapes_name_the_problem() -> None:
    q, kv, tables, lens = case(torch.float32, 9, 3, 64, [5])
    with pytest.raises(RuntimeError, match="head shapes do not match"):
        paged_decode_attention(q[:, :8], kv, tables, lens, lens - 1, 0, 0.125)
    with pytest.raises(RuntimeError, match="dtypes differ"):
        paged_decode_attention(q.bfloat16(), kv, tables, lens, lens - 1, 0, 0.125)
