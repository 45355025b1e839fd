"""`paged_prefill_attention`, the native kernel of a prefill wave's attention over the paged KV cache, at
every instruction-set level this machine has: each token is the decode kernel's task at its position (bit
for bit), the wave equals fp32 causal SDPA over the gathered context, and the model picks it only where
its fast task runs."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.devices.cpu.isa import IsaLevel, probe
from tt_backend.devices.cpu.kernels import CpuKernels, load_kernels
from tt_backend.models.llama import LlamaForCausalLM
from tt_backend.models.llama_ops import NativeOps
from tt_backend.models.paged_kv import gather_kv

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")

BLOCK = 16


@pytest.fixture(scope="module", params=probe().levels)
def kernels(request: pytest.FixtureRequest) -> CpuKernels:
    level: IsaLevel = request.param
    return load_kernels(level)


def wave(dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int, rows: list[tuple[int, int]],
         seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A padded wave of rows (start, tokens): row b's tokens sit at positions start..start+tokens-1
    and its context ends with them; shorter rows are padded (position 0, as prepare_host_inputs pads),
    blocks are shuffled across the cache, and the table has a spare column."""
    gen = torch.Generator().manual_seed(seed)
    T = max(n for _, n in rows)
    lens = torch.tensor([s + n for s, n in rows])
    width = int(max(-(-n // BLOCK) for n in lens.tolist())) + 1
    num_blocks = len(rows) * width + 3
    kv = torch.randn(2, num_blocks, BLOCK, kv_heads, head_dim, generator=gen).to(dtype)
    tables = torch.randperm(num_blocks, generator=gen)[: len(rows) * width].view(len(rows), width)
    q = torch.randn(len(rows), T, heads, head_dim, generator=gen).to(dtype)
    positions = torch.zeros(len(rows), T, dtype=torch.long)
    for b, (s, n) in enumerate(rows):
        positions[b, :n] = torch.arange(s, s + n)
    return q, kv, tables, lens, positions


def causal_reference(q: torch.Tensor, kv: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor,
                     positions: torch.Tensor, window: int) -> torch.Tensor:
    """fp32 SDPA over the gathered context: key s visible to the query at p iff s <= p, s < the
    context and (with a window) p - s < window. [B, T, H, D]."""
    keys, values = gather_kv(kv.float(), tables)
    s = torch.arange(keys.shape[2])
    p = positions[:, :, None]
    visible = (s[None, None] <= p) & (s[None, None] < lens[:, None, None])
    if window:
        visible &= s[None, None] > p - window
    out = F.scaled_dot_product_attention(q.float().transpose(1, 2), keys, values, attn_mask=visible[:, None],
                                         enable_gqa=True)
    return out.transpose(1, 2)


ROWS = [(0, 100), (0, 37), (48, 21), (5, 1), (0, 16)]
"""A fresh prompt, a shorter one (padded), a later chunk after 48 cached tokens, one token after a
prefix, and a row ending on a block boundary."""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("heads, kv_heads, head_dim", [(9, 3, 64), (4, 4, 128), (6, 2, 48)])
def test_each_token_is_the_decode_task_at_its_position(kernels: CpuKernels, dtype: torch.dtype, heads: int,
                                                       kv_heads: int, head_dim: int) -> None:
    """Bit for bit: the wave's token (b, t) equals the decode kernel's row at position p with the
    context p + 1, for every token of every row, padding included."""
    q, kv, tables, lens, positions = wave(dtype, heads, kv_heads, head_dim, ROWS)
    B, T = positions.shape
    out = kernels.paged_prefill_attention(q, kv, tables, lens, positions, 0, head_dim ** -0.5)
    assert out.dtype == dtype and out.shape == q.shape
    per_token = kernels.paged_decode_attention(
        q.reshape(B * T, heads, head_dim), kv, tables.repeat_interleave(T, 0), lens.repeat_interleave(T),
        positions.reshape(-1), 0, head_dim ** -0.5)
    assert torch.equal(out.reshape(B * T, heads, head_dim), per_token)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", [0, 7, 40])
def test_matches_causal_sdpa_over_the_gathered_context(kernels: CpuKernels, dtype: torch.dtype,
                                                       window: int) -> None:
    q, kv, tables, lens, positions = wave(dtype, 9, 3, 64, ROWS, seed=1)
    out = kernels.paged_prefill_attention(q, kv, tables, lens, positions, window, 0.125)
    expected = causal_reference(q, kv, tables, lens, positions, window)
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    for b, (_, n) in enumerate(ROWS):  # the padding tokens' outputs are never read
        torch.testing.assert_close(out[b, :n].float(), expected[b, :n], atol=tol, rtol=tol)


def test_one_thread_or_two_and_alone_or_in_a_wave_give_the_same_bits(kernels: CpuKernels) -> None:
    """The task order spreads a row's growing tasks over the threads; no result depends on it."""
    q, kv, tables, lens, positions = wave(torch.bfloat16, 9, 3, 64, ROWS, seed=2)
    both = kernels.paged_prefill_attention(q, kv, tables, lens, positions, 0, 0.125)
    alone = kernels.paged_prefill_attention(q[2:3, :21], kv, tables[2:3], lens[2:3], positions[2:3, :21], 0,
                                            0.125)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = kernels.paged_prefill_attention(q, kv, tables, lens, positions, 0, 0.125)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(both, single)
    assert torch.equal(both[2, :21], alone[0])


def test_bad_shapes_name_the_problem(kernels: CpuKernels) -> None:
    q, kv, tables, lens, positions = wave(torch.float32, 9, 3, 64, [(0, 5)])
    with pytest.raises(RuntimeError, match="paged_prefill_attention: expected q"):
        kernels.paged_prefill_attention(q[0], kv, tables, lens, positions, 0, 0.125)
    with pytest.raises(RuntimeError, match="paged_prefill_attention: batch sizes do not match"):
        kernels.paged_prefill_attention(q, kv, tables, lens, positions[:, :3], 0, 0.125)


def test_the_fast_task_decides_where_prefill_runs_on_the_kernel(kernels: CpuKernels) -> None:
    """Only the AVX-512 bf16 task beats SDPA; fp32, other head sizes, and the levels below keep SDPA."""
    fast_level = kernels.level in ("avx512", "avx512_bf16", "amx")
    assert kernels.prefill_attention_fast(torch.bfloat16, 9, 3, 64) is fast_level
    assert kernels.prefill_attention_fast(torch.bfloat16, 32, 8, 128) is fast_level
    assert not kernels.prefill_attention_fast(torch.float32, 9, 3, 64)
    assert not kernels.prefill_attention_fast(torch.bfloat16, 6, 2, 48)
    assert not kernels.prefill_attention_fast(torch.bfloat16, 18, 1, 64)  # 18 query heads per kv head


SMALL_LLAMA = {"architectures": ["LlamaForCausalLM"], "vocab_size": 300, "hidden_size": 576,
               "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 9,
               "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "max_position_embeddings": 512, "tie_word_embeddings": True}


def test_a_model_prefill_on_the_kernel_follows_the_masked_sdpa_path(kernels: CpuKernels) -> None:
    """The same bf16 model and wave (a fresh row and a later chunk, padded): prefill attention in place
    on the kernel (no mask) against torch's gathered SDPA over the mask, the logits within bf16."""
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_hf_config(SMALL_LLAMA)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.05)
    model.to(torch.bfloat16).eval().requires_grad_(False)
    spec = model.spec
    rows = [(0, 40), (32, 9)]
    _, kv, tables, lens, positions = wave(torch.bfloat16, 9, 3, 64, rows, seed=3)
    cache = torch.randn(spec.num_layers, *kv.shape).to(torch.bfloat16)  # the prefix's K/V already there
    slots = torch.full(positions.shape, -1, dtype=torch.long)
    for b, (s, n) in enumerate(rows):
        p = torch.arange(s, s + n)
        slots[b, :n] = tables[b, p // BLOCK] * BLOCK + p % BLOCK
    batch = ForwardBatch(torch.randint(0, 300, positions.shape), positions, slots, tables, lens,
                         torch.tensor([n - 1 for _, n in rows]))
    logits = {}
    for in_place in (False, True):
        for module in model.modules():
            if hasattr(module, "ops"):
                module.ops = NativeOps(kernels, prefill_in_place=in_place)
        assert model.ops.attends_in_place(batch) is in_place
        logits[in_place] = model(batch, cache.clone())
    torch.testing.assert_close(logits[True], logits[False], atol=0.05, rtol=0.02)
