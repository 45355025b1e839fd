"""The paged KV cache as tt-metal lays it out on a mesh: per submesh, per layer, a [K, V] pair of
DRAM tensors of shape (num_blocks, num_kv_heads, block_size, head_dim) in TILE layout, bfloat8_b
by default (tt-metal's `allocate_vllm_kv_cache`). Tensors are allocated on the device without a
host copy (`allocate_tensor_on_device`), so the device's own allocator decides whether they fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

TILE = 32
# Bytes per element in DRAM: a bfloat8_b tile is 1024 one-byte mantissas plus 64 shared exponents.
BYTES_PER_ELEMENT = {"bfloat8_b": 1088 / 1024, "bfloat4_b": 576 / 1024, "bfloat16": 2.0}


@dataclass(frozen=True)
class TTKVGeometry:
    num_layers: int
    num_blocks: int
    """Physical blocks per submesh (lane), the padding sink included."""
    num_kv_heads: int
    block_size: int
    head_dim: int
    dtype: str = "bfloat8_b"

    def __post_init__(self) -> None:
        assert self.dtype in BYTES_PER_ELEMENT, self.dtype
        assert self.block_size % TILE == 0 and self.head_dim % TILE == 0, (self.block_size, self.head_dim)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        # [blocks, kv_heads, block_size, head_dim]: the kv_cache_shape tt-metal's generators take
        return (self.num_blocks, self.num_kv_heads, self.block_size, self.head_dim)

    @property
    def bytes_per_lane(self) -> int:
        return math.ceil(2 * self.num_layers * math.prod(self.shape) * BYTES_PER_ELEMENT[self.dtype])

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: str = "bfloat8_b") -> int:
        return math.ceil(2 * num_layers * num_kv_heads * head_dim * BYTES_PER_ELEMENT[dtype])


def allocate_layer_caches(ttnn: Any, device: Any, geometry: TTKVGeometry) -> list[list[Any]]:
    """[layer][k, v] DRAM tensors on one (sub)mesh; a tensor that does not fit raises ttnn's own
    out-of-memory error (what was allocated before it is freed with the list)."""
    spec = ttnn.TensorSpec(geometry.shape, getattr(ttnn, geometry.dtype), ttnn.TILE_LAYOUT,
                           buffer_type=ttnn.BufferType.DRAM)
    return [[ttnn.allocate_tensor_on_device(spec, device) for _ in ("k", "v")]
            for _ in range(geometry.num_layers)]


def deallocate_layer_caches(ttnn: Any, caches: list[list[Any]]) -> None:
    for pair in caches:
        for tensor in pair:
            ttnn.deallocate(tensor)
