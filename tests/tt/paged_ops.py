"""The paged-attention ttnn ops at our step shapes, over the cache tt-metal lays out
(`tt_kv_layout`): page tables as ttnn tensors, `paged_fill_cache` for a prefill row,
`paged_update_cache` and paged decode SDPA for a decode step at the fixed decode capacity.

They run with real argument and shape validation on any device ttnn opens (mock devices too, where
every value is zero), so a shape, layout or page-table mistake fails with ttnn's own error. The
contract generator of the tests (tests/tt/bundles/tt_contract_llama) calls them on every step it serves.
"""

from __future__ import annotations

from typing import Any

import torch

TILE = 32


def _mapper(ttnn: Any, device: Any) -> Any:
    return ttnn.ReplicateTensorToMesh(device) if device.get_num_devices() > 1 else None


def to_device(ttnn: Any, device: Any, host: torch.Tensor, dtype: Any, layout: Any,
              memory_config: Any = None) -> Any:
    return ttnn.from_torch(host, dtype=dtype, layout=layout, device=device, mesh_mapper=_mapper(ttnn, device),
                           memory_config=memory_config or ttnn.DRAM_MEMORY_CONFIG)


def page_table_tensor(ttnn: Any, device: Any, table: torch.Tensor) -> Any:
    """[rows, W] int32 block ids, ROW_MAJOR in DRAM: how tt-metal's paged ops take a page table."""
    return to_device(ttnn, device, table.to(torch.int32), ttnn.int32, ttnn.ROW_MAJOR_LAYOUT)


def positions_tensor(ttnn: Any, device: Any, positions: torch.Tensor) -> Any:
    """[C] int32 position of each decode row's token; -1 marks a padding row (skipped)."""
    return to_device(ttnn, device, positions.to(torch.int32), ttnn.int32, ttnn.ROW_MAJOR_LAYOUT)


def fill_row(ttnn: Any, device: Any, caches: list[list[Any]], table_row: torch.Tensor, length: int,
             num_kv_heads: int, head_dim: int) -> None:
    """paged_fill_cache of one prefill row into every layer's K and V: its `length` tokens padded
    to a tile, written from the first block of `table_row` ([1, W']), in the cache's dtype (ttnn
    refuses a bfloat16 input into a bfloat8_b cache)."""
    padded = -(-length // TILE) * TILE
    # kv: [1, kv_heads, padded, head_dim]
    kv = to_device(ttnn, device, torch.zeros(1, num_kv_heads, padded, head_dim), caches[0][0].dtype,
                   ttnn.TILE_LAYOUT)
    table = page_table_tensor(ttnn, device, table_row)
    for pair in caches:
        for cache in pair:
            ttnn.experimental.paged_fill_cache(cache, kv, table, batch_idx=0)
    ttnn.deallocate(kv)
    ttnn.deallocate(table)


def decode_step(ttnn: Any, device: Any, caches: list[list[Any]], table: torch.Tensor, positions: torch.Tensor,
                num_heads: int, num_kv_heads: int, head_dim: int) -> Any:
    """paged_update_cache of every layer's K and V at each row's position, then paged decode SDPA
    over layer 0; returns the attention output [1, C, heads, head_dim] (on the device)."""
    capacity = positions.shape[0]
    table_tt = page_table_tensor(ttnn, device, table)
    pos_tt = positions_tensor(ttnn, device, positions)
    grid = device.compute_with_storage_grid_size()
    cores = ttnn.num_cores_to_corerangeset(capacity, grid, row_wise=True)
    shard = ttnn.ShardSpec(cores, [TILE, head_dim], ttnn.ShardOrientation.ROW_MAJOR)
    sharded = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1, shard)
    # new K/V of the step: [1, C, kv_heads (a tile high), head_dim], one row per core
    new_kv = to_device(ttnn, device, torch.zeros(1, capacity, num_kv_heads, head_dim), ttnn.bfloat16,
                       ttnn.TILE_LAYOUT, sharded)
    for pair in caches:
        for cache in pair:
            ttnn.experimental.paged_update_cache(cache, new_kv, update_idxs_tensor=pos_tt,
                                                 page_table=table_tt)
    # q: [1, C, heads, head_dim]
    q = to_device(ttnn, device, torch.zeros(1, capacity, num_heads, head_dim), ttnn.bfloat16,
                  ttnn.TILE_LAYOUT)
    k, v = caches[0]
    out = ttnn.transformer.paged_scaled_dot_product_attention_decode(
        q, k, v, page_table_tensor=table_tt, cur_pos_tensor=pos_tt, scale=head_dim ** -0.5)
    for tensor in (new_kv, q, table_tt, pos_tt):
        ttnn.deallocate(tensor)
    return out
