"""The preconditions tt-metal's vLLM generators rely on, as checks that raise `ContractViolation`.

Each check cites where the rule comes from. Sources (read, not copied):
- G   tt-metal models/tt_transformers/tt/generator.py @ 290fd31c03680911ee060c1adf33804555055cbb
- GV  tt-metal models/tt_transformers/tt/generator_vllm.py @ 290fd31c
- AT  tt-metal's host-only test of `Generator._align_resume_offsets` (the newer generator that floors
      resume offsets) and MC, models/common/model_capabilities.py (ModelCapabilitiesMixin doc)
- CO  tt-metal models/tt_transformers/tt/common.py `get_padded_prefill_len`
- P   vllm-tt-plugin e3fc849 src/vllm_tt_plugin/model_runner.py
RULES.md lists every rule once, with whether the mock checks it or only hardware shows it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

TILE = 32


class ContractViolation(RuntimeError):
    """A call tt-metal's generator would mishandle (wrong numbers, a crash, or a trace captured
    while serving). The message starts with "tt-metal contract: "."""

    def __init__(self, what: str) -> None:
        super().__init__(f"tt-metal contract: {what}")


def require(ok: bool, what: str) -> None:
    if not ok:
        raise ContractViolation(what)


# ---- argument forms ---------------------------------------------------------------------------

def int_list(name: str, value: Any, length: int) -> list[int]:
    """A per-row integer sequence (list, tuple, numpy array or 1-D tensor) of `length` entries: G
    reads prompt_lens with `.tolist()`/`int(x[idx])` and start_pos with `int(start_pos[idx])`."""
    if isinstance(value, torch.Tensor):
        require(value.dim() == 1 and not value.is_floating_point(),
                f"{name} must be a 1-D integer tensor, got shape {tuple(value.shape)} dtype {value.dtype}")
        out = [int(v) for v in value.tolist()]
    else:
        tolist = getattr(value, "tolist", None)
        items = tolist() if callable(tolist) else value
        require(isinstance(items, Sequence) and all(isinstance(v, int) and not isinstance(v, bool)
                                                    for v in items),
                f"{name} must be a sequence of ints, got {type(value).__name__} {value!r:.200}")
        out = [int(v) for v in items]
    require(len(out) == length, f"{name} has {len(out)} entries for {length} rows")
    return out


def int_tensor(name: str, value: Any, dims: int) -> torch.Tensor:
    """G asserts `isinstance(page_table, torch.Tensor)` and torch.chunk()s decode tokens, start_pos
    and page_table: they must be torch tensors of integers, not lists."""
    require(isinstance(value, torch.Tensor), f"{name} must be a torch.Tensor, got {type(value).__name__}")
    require(value.dim() == dims and not value.is_floating_point() and value.dtype != torch.bool,
            f"{name} must be a {dims}-D integer tensor, got shape {tuple(value.shape)} dtype {value.dtype}")
    return value


def same_regions(kv_cache: Any, allocated: list[list[list[Any]]]) -> None:
    """GV/G index `kv_cache[model_id]` per submesh: the list allocate_kv_cache returned (its regions)."""
    require(isinstance(kv_cache, (list, tuple)) and len(kv_cache) == len(allocated)
            and all(a is b for a, b in zip(kv_cache, allocated, strict=True)),
            "kv_cache must be the per-submesh list allocate_kv_cache returned "
            f"({len(allocated)} regions), got {type(kv_cache).__name__}")


# ---- the KV cache -----------------------------------------------------------------------------

def per_chip_kv_heads(num_kv_heads: int, chips_per_submesh: int) -> int:
    """P `_kv_cache_shape`: `num_kv_heads // min(num_devices // tt_data_parallel, num_kv_heads)`;
    GV allocate_vllm_kv_cache replicates (ReplicateTensorToMesh) that per-chip shape to every chip."""
    return num_kv_heads // min(chips_per_submesh, num_kv_heads)


def check_kv_request(shape: Any, dtype: Any, num_layers: int, *, layers: int, kv_heads: int,
                     head_dim: int) -> tuple[int, int, int, int]:
    """allocate_kv_cache(kv_cache_shape, dtype, num_layers): the per-chip (blocks, kv_heads,
    block_size, head_dim) of P `_kv_cache_shape`, the torch dtype P passes (bfloat16; GV makes the
    device tensors bfloat8_b whatever it is), one [K, V] pair per model layer."""
    require(isinstance(shape, (tuple, list, torch.Size)) and len(shape) == 4
            and all(isinstance(d, int) and d > 0 for d in shape),
            f"kv_cache_shape must be 4 positive ints (blocks, kv_heads, block_size, head_dim), got {shape!r}")
    blocks, heads, block_size, dim = (int(d) for d in shape)
    require(heads == kv_heads, f"kv_cache_shape {tuple(shape)} has {heads} kv heads; per chip tt-metal "
            f"holds {kv_heads} (num_kv_heads // min(chips per submesh, num_kv_heads))")
    require(dim == head_dim, f"kv_cache_shape {tuple(shape)} has head_dim {dim}, the model {head_dim}")
    require(block_size % TILE == 0, f"block_size {block_size} is not a multiple of the {TILE}-row tile")
    require(dtype == torch.bfloat16, f"allocate_kv_cache dtype must be torch.bfloat16 (vLLM's cache dtype); "
            f"got {dtype!r}")
    require(num_layers == layers, f"allocate_kv_cache num_layers={num_layers}, the model has {layers}")
    return blocks, heads, block_size, dim


# ---- resumed prefill offsets (AT, MC, CO) -----------------------------------------------------

def padded_prefill_len(seq_len: int) -> int:
    """CO get_padded_prefill_len: 128 up to 128, else the smaller of the next power of two and
    the next multiple of 2048."""
    if seq_len <= 128:
        return 128
    return min(2 ** math.ceil(math.log2(seq_len)), 2048 * math.ceil(seq_len / 2048))


def llama_q_chunk_size(padded_len: int) -> int:
    """The q_chunk_size Llama's chunked-SDPA program pins (ModelArgs.get_attn_sdpa_prefill_program_config
    at chunk_start_idx 0, as AT states it)."""
    return 256 if padded_len >= 2048 else 64


def align_resume_offset(start: int, prompt_len: int, block_size: int, declared: int | None) -> int:
    """AT `_align_resume_offsets`: floor a nonzero offset to lcm(block_size, q_chunk_size of the
    padded suffix), re-settled until it stops moving (flooring lengthens the suffix, which can raise
    the pin). `declared` (MC resumed_prefill_token_alignment) stands in for q_chunk_size."""
    if start == 0:
        return 0
    offset = start - start % block_size
    while True:
        q = declared if declared is not None else llama_q_chunk_size(padded_prefill_len(prompt_len - offset))
        step = math.lcm(block_size, q)
        settled = offset - offset % step
        if settled == offset:
            return offset
        offset = settled


def check_prefill_row(i: int, start: int, prompt_len: int, width: int, *, block_size: int,
                      max_seq_len: int, tokens_width: int) -> None:
    """One prefill row: 0 <= start_pos < prompt_lens (AT: the `0 <= num_cached < seq_len` guard);
    start_pos a whole number of blocks (G slices the chunk page table at start // block_size);
    tokens hold the whole sequence (G takes tokens[idx, start:prompt_len]); the page table covers
    ceil(prompt_len / block_size) blocks (G pads a short one with block 0)."""
    require(0 <= start < prompt_len, f"row {i}: start_pos={start} must be in [0, prompt_lens={prompt_len})")
    require(prompt_len <= max_seq_len, f"row {i}: prompt_lens={prompt_len} exceeds max_seq_len={max_seq_len}")
    require(start % block_size == 0, f"row {i}: start_pos={start} is not a multiple of "
            f"block_size={block_size}")
    require(tokens_width >= prompt_len, f"row {i}: tokens has {tokens_width} columns, "
            f"prompt_lens={prompt_len}: tokens must hold the whole sequence, cached prefix included")
    need = -(-prompt_len // block_size)
    require(width >= need, f"row {i}: page table has {width} blocks, prompt_lens={prompt_len} needs {need} "
            f"(tt-metal pads a short table with block 0)")


def check_block_ids(what: str, ids: list[int], num_blocks: int) -> None:
    bad = [b for b in ids if not 0 <= b < num_blocks]
    require(not bad, f"{what}: block ids {bad[:8]} outside the cache's {num_blocks} blocks")
