"""The native CPU kernels of every instruction-set level this machine has, against the torch ops
they replace (an AMX machine checks amx, avx512_bf16, avx512, avx2 and portable)."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from tt_backend.devices.cpu.isa import IsaLevel, probe
from tt_backend.devices.cpu.kernels import CpuKernels, load_kernels
from tt_backend.devices.cpu.linears import SMALL_ROWS, PackedLinear, WideLinear, tile_layout
from tt_backend.models.llama import RMSNorm
from tt_backend.models.llama_ops import rotate_half
from tt_backend.models.paged_kv import gather_kv, write_kv

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")

BLOCK = 16


@pytest.fixture(scope="module", params=probe().levels)
def kernels(request: pytest.FixtureRequest) -> CpuKernels:
    level: IsaLevel = request.param
    return load_kernels(level)  # a compiler is present, so every level's build must work


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
def test_matches_gather_and_sdpa(kernels: CpuKernels, dtype: torch.dtype, heads: int, kv_heads: int,
                                 head_dim: int) -> None:
    """Rows ending mid-block, on a block boundary, after one key; the bf16 shapes (64, 128) take the
    AVX512-BF16 path where the CPU has it, 48 the portable one."""
    q, kv, tables, lens = case(dtype, heads, kv_heads, head_dim, [1, 16, 17, 100, 255])
    positions = lens - 1
    out = kernels.paged_decode_attention(q, kv, tables, lens, positions, 0, head_dim ** -0.5)
    assert out.dtype == dtype and out.shape == q.shape
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.float(), reference(q, kv, tables, lens, positions, 0), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sliding_window_and_a_position_before_the_context_end(kernels: CpuKernels,
                                                             dtype: torch.dtype) -> None:
    q, kv, tables, lens = case(dtype, 9, 3, 64, [40, 90, 130])
    positions = torch.tensor([39, 60, 129])  # row 1 sees keys up to its position, not its context
    for window in (0, 7, 32):
        out = kernels.paged_decode_attention(q, kv, tables, lens, positions, window, 0.125)
        tol = TOLERANCE[dtype]
        torch.testing.assert_close(out.float(), reference(q, kv, tables, lens, positions, window),
                                   atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_does_not_depend_on_its_batch(kernels: CpuKernels, dtype: torch.dtype) -> None:
    """Bit for bit: alone, in a batch, with another table width, on one thread; a padding row
    (no context) gives zeros."""
    q, kv, tables, lens = case(dtype, 9, 3, 64, [33, 200, 7, 0])
    positions = (lens - 1).clamp(min=0)
    batch = kernels.paged_decode_attention(q, kv, tables, lens, positions, 0, 0.125)
    alone = kernels.paged_decode_attention(q[1:2], kv, tables[1:2], lens[1:2], positions[1:2], 0, 0.125)
    narrow = kernels.paged_decode_attention(q[:3], kv, tables[:3, :13].contiguous(), lens[:3],
                                            positions[:3], 0, 0.125)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = kernels.paged_decode_attention(q, kv, tables, lens, positions, 0, 0.125)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(batch[1], alone[0])
    assert torch.equal(batch[:3], narrow)
    assert torch.equal(batch, single)
    assert torch.count_nonzero(batch[3]) == 0


def test_bad_shapes_name_the_problem(kernels: CpuKernels) -> None:
    q, kv, tables, lens = case(torch.float32, 9, 3, 64, [5])
    with pytest.raises(RuntimeError, match="head shapes do not match"):
        kernels.paged_decode_attention(q[:, :8], kv, tables, lens, lens - 1, 0, 0.125)
    with pytest.raises(RuntimeError, match="dtypes differ"):
        kernels.paged_decode_attention(q.bfloat16(), kv, tables, lens, lens - 1, 0, 0.125)


DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def torch_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    norm = RMSNorm(x.shape[-1], eps).to(x.dtype)
    norm.weight.data.copy_(weight)
    return norm(x)


def near(out: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to one rounding step of the dtype (the kernels sum in another order than torch)."""
    assert out.dtype == expected.dtype and out.shape == expected.shape
    ulp = {torch.float32: 1e-6, torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10}[out.dtype]
    torch.testing.assert_close(out.float(), expected.float(), rtol=ulp, atol=ulp)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_and_the_fused_residual_add(kernels: CpuKernels, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    x = (3 * torch.randn(2, 5, 576, generator=gen)).to(dtype)
    residual = torch.randn(2, 5, 576, generator=gen).to(dtype)
    weight = (1 + 0.1 * torch.randn(576, generator=gen)).to(dtype)
    near(kernels.rms_norm(x, weight, 1e-5), torch_rms_norm(x, weight, 1e-5))
    normed, total = kernels.add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(total, x + residual)  # one rounding, as torch's add
    near(normed, torch_rms_norm(x + residual, weight, 1e-5))


def fixed_order_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The kernels' RMSNorm of one bf16 row, step by step in fp32: squares summed in 16 lanes
    (element i into lane i % 16), the lanes in turn, then the tail; normalised, rounded, weighted."""
    v, n = x.float(), x.numel()
    lanes = torch.zeros(16)
    whole = n - n % 16
    for i in range(0, whole, 16):
        lanes = lanes + v[i:i + 16] * v[i:i + 16]
    total = torch.zeros((), dtype=torch.float32)
    for value in (*lanes, *(v[whole:] * v[whole:])):
        total = total + value
    inv = 1 / torch.sqrt(total / n + torch.tensor(eps))
    return (weight.float() * (v * inv).bfloat16().float()).bfloat16()


@pytest.mark.parametrize("width", [576, 72])  # the AVX512 rows (multiples of 16) and the portable ones
def test_bf16_rms_norm_is_exactly_the_fixed_order_computation(kernels: CpuKernels, width: int) -> None:
    gen = torch.Generator().manual_seed(width)
    x = (3 * torch.randn(4, width, generator=gen)).bfloat16()
    residual = torch.randn(4, width, generator=gen).bfloat16()
    weight = (1 + 0.1 * torch.randn(width, generator=gen)).bfloat16()
    normed, total = kernels.add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(total, x + residual)
    for r in range(4):
        assert torch.equal(normed[r], fixed_order_rms_norm(total[r], weight, 1e-5))
        assert torch.equal(kernels.rms_norm(x, weight, 1e-5)[r], fixed_order_rms_norm(x[r], weight, 1e-5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(kernels: CpuKernels, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(2)
    x = (4 * torch.randn(3, 7, 2 * 1536, generator=gen)).to(dtype)
    x[0, 0, :4] = torch.tensor([-100.0, 100.0, 0.0, -0.0])  # the exp's clamps and zero
    gate, up = x.chunk(2, dim=-1)
    near(kernels.silu_and_mul(x), F.silu(gate) * up)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_and_cache_matches_rotate_half_and_write_kv(kernels: CpuKernels, dtype: torch.dtype) -> None:
    """Rows of a strided qkv view; the padding row (slot -1) leaves the cache untouched."""
    gen = torch.Generator().manual_seed(3)
    heads, kv_heads, d, n = 9, 3, 64, 6
    wide = torch.randn(n, (heads + 2 * kv_heads) * d + 8, generator=gen).to(dtype)
    qkv = wide[:, : (heads + 2 * kv_heads) * d]  # rows strided, as a slice of a bigger output
    angles = torch.randn(n, d // 2, generator=gen) * 50
    cos = torch.cat((angles, angles), -1).cos().to(dtype)
    sin = torch.cat((angles, angles), -1).sin().to(dtype)
    slots = torch.tensor([5, 17, 0, -1, 40, 33])
    kv = torch.randn(2, 4, 16, kv_heads, d, generator=gen).to(dtype)
    expected_kv = kv.clone()
    q, k, v = qkv.split((heads * d, kv_heads * d, kv_heads * d), dim=-1)
    q, k = q.reshape(n, heads, d), k.reshape(n, kv_heads, d)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        return x * cos[:, None] + rotate_half(x) * sin[:, None]

    real = slots >= 0
    write_kv(expected_kv, slots[real][None], rotate(k)[real][None], v.reshape(n, kv_heads, d)[real][None])
    out = kernels.rope_and_cache(qkv, cos, sin, kv, slots, heads, kv_heads)
    assert torch.equal(out, rotate(q))  # the same roundings as torch's ops, in the same order
    assert torch.equal(kv, expected_kv)


def test_elementwise_bad_inputs_name_the_problem(kernels: CpuKernels) -> None:
    with pytest.raises(RuntimeError, match="weight has 5 elements, rows have 6"):
        kernels.rms_norm(torch.ones(2, 6), torch.ones(5), 1e-5)
    with pytest.raises(RuntimeError, match="must be even"):
        kernels.silu_and_mul(torch.ones(2, 7))
    kv = torch.zeros(2, 1, 16, 1, 4)
    with pytest.raises(RuntimeError, match="slot 16 is outside the cache"):
        kernels.rope_and_cache(torch.ones(1, 12), torch.ones(1, 4), torch.ones(1, 4), kv,
                                   torch.tensor([16]), 1, 1)


@pytest.fixture(scope="module")
def tile_kernels() -> CpuKernels:
    if "amx" not in probe().levels:
        pytest.skip("this CPU (or its OS) gives no AMX bf16 tiles: tile_linear is tested where it does")
    kernels = load_kernels("amx")
    assert kernels.tile_linear_supported()
    return kernels


@pytest.mark.parametrize("rows", [1, 5, 16, 17, 32, 40, 64])
def test_tile_linear_matches_an_fp32_linear(tile_kernels: CpuKernels, rows: int) -> None:
    g = torch.Generator().manual_seed(rows)
    w, x, bias = (torch.randn(*shape, generator=g).bfloat16() for shape in ((96, 64), (rows, 64), (96,)))
    got = tile_kernels.tile_linear(x, tile_layout(w), bias)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, 96)
    # One rounding of an fp32 sum: within a bf16 ulp (2^-8 relative, at most) of the fp32 result.
    assert within_a_bf16_ulp(got, F.linear(x.float(), w.float(), bias.float()))
    unbiased = tile_kernels.tile_linear(x.view(1, rows, 64), tile_layout(w), None)
    assert unbiased.shape == (1, rows, 96)
    assert within_a_bf16_ulp(unbiased[0], F.linear(x.float(), w.float()))


def within_a_bf16_ulp(got: torch.Tensor, want: torch.Tensor) -> bool:
    return bool(((got.float() - want).abs() <= 2 ** -8 * want.abs() + 1e-4).all())


def test_a_traced_packed_linear_takes_tiles_up_to_small_rows_and_onednn_beyond(
        tile_kernels: CpuKernels) -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 96).bfloat16()
    packed = PackedLinear(layer, tile_kernels)
    assert packed.tiles is not None
    traced = torch.jit.trace(packed, torch.randn(1, 64).bfloat16(), check_trace=False)  # traced at 1 row
    for rows in (1, SMALL_ROWS, SMALL_ROWS + 1, 300):
        x = torch.randn(rows, 64).bfloat16()
        tiles = tile_kernels.tile_linear(x, packed.tiles, packed.bias)
        onednn = torch.ops.mkldnn._linear_pointwise(x, packed.packed_weight, packed.bias, "none", [], "")
        assert torch.equal(traced(x), tiles if rows <= SMALL_ROWS else onednn), rows
        want = F.linear(x.float(), layer.weight.float(), layer.bias.float())
        assert ((traced(x).float() - want).abs() <= 2 ** -7 * want.abs() + 1e-2).all()


def test_tile_linear_bad_inputs_name_the_problem(tile_kernels: CpuKernels) -> None:
    with pytest.raises(RuntimeError, match="multiples of 32, got 48 and 64"):
        tile_kernels.tile_linear(torch.ones(2, 64).bfloat16(), torch.ones(48, 64).bfloat16(), None)
    with pytest.raises(RuntimeError, match="x has 32 features, the weight 64"):
        tile_kernels.tile_linear(torch.ones(2, 32).bfloat16(), torch.ones(64, 64).bfloat16(), None)
    with pytest.raises(RuntimeError, match="must be bfloat16"):
        tile_kernels.tile_linear(torch.ones(2, 64), torch.ones(64, 64).bfloat16(), None)


@pytest.mark.parametrize("rows", [1, 2, 5, 63, 64, 65, 300])
@pytest.mark.parametrize("n, k", [(96, 576), (7, 70)])  # whole blocks, and a tail of columns and inputs
def test_wide_linear_is_the_fp32_product_of_the_bf16_weight(kernels: CpuKernels, rows: int, n: int,
                                                            k: int) -> None:
    g = torch.Generator().manual_seed(rows * n)
    x, w, bias = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g).bfloat16(), torch.randn(n)
    want = x.double() @ w.double().T + bias.double()
    bound = 1e-6 * (x.double().abs() @ w.double().abs().T) + 1e-6  # fp32 sums of k terms
    for b in (bias, None):
        got = kernels.wide_linear(x, w, b, SMALL_ROWS)
        assert got.dtype == torch.float32 and got.shape == (rows, n)
        assert ((got.double() - (want if b is not None else want - bias.double())).abs() <= bound).all()


def test_wide_linear_rows_do_not_depend_on_their_batch(kernels: CpuKernels) -> None:
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(SMALL_ROWS, 576, generator=g), torch.randn(200, 576, generator=g).bfloat16()
    batch = kernels.wide_linear(x.view(4, 16, 576), w, None, SMALL_ROWS)
    assert batch.shape == (4, 16, 200)
    for r in (0, 7, SMALL_ROWS - 1):
        alone = kernels.wide_linear(x[r:r + 1], w, None, SMALL_ROWS)
        assert torch.equal(batch.view(SMALL_ROWS, 200)[r], alone[0])


def test_a_traced_wide_linear_streams_up_to_its_rows_and_widens_beyond(kernels: CpuKernels) -> None:
    """Up to SMALL_ROWS rows, fewer where the level's stream loses to widening sooner (portable)."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 96)
    wide = WideLinear(layer, kernels)
    assert wide.weight.dtype == torch.bfloat16
    assert wide.small_rows == (4 if kernels.level in ("portable", "neon") else SMALL_ROWS)
    traced = torch.jit.trace(wide, torch.randn(1, 64), check_trace=False)
    for rows in (1, SMALL_ROWS, SMALL_ROWS + 1, 300):
        x = torch.randn(rows, 64)
        streamed = kernels.wide_linear(x, wide.weight, wide.bias, rows)  # the kernel at any row count
        widened = F.linear(x, wide.weight.float(), wide.bias)
        assert torch.equal(traced(x), streamed if rows <= wide.small_rows else widened), rows
        torch.testing.assert_close(streamed, widened, rtol=1e-5, atol=1e-5)


def test_wide_linear_bad_inputs_name_the_problem(kernels: CpuKernels) -> None:
    w = torch.ones(8, 16).bfloat16()
    with pytest.raises(RuntimeError, match="x must be float32"):
        kernels.wide_linear(torch.ones(2, 16).bfloat16(), w, None, SMALL_ROWS)
    with pytest.raises(RuntimeError, match="x has 12 inputs, the weight 16"):
        kernels.wide_linear(torch.ones(2, 12), w, None, SMALL_ROWS)
    with pytest.raises(RuntimeError, match="the weight must be a 2-d bfloat16 tensor"):
        kernels.wide_linear(torch.ones(2, 16), w.float(), None, SMALL_ROWS)
    with pytest.raises(RuntimeError, match="the bias must be float32 with 8 elements"):
        kernels.wide_linear(torch.ones(2, 16), w, torch.ones(7), SMALL_ROWS)
