"""PagedKVCacheManager: the sole owner of the physical K/V tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PagedKVCacheConfig:
    num_layers: int
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        # [layers, k/v, blocks, block_size, kv_heads, head_dim]
        return (self.num_layers, 2, self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * dtype.itemsize


class PagedKVCacheManager:
    """Allocates the cache once and hands it to the executor; `release` drops it."""

    def __init__(self, config: PagedKVCacheConfig, device: torch.device) -> None:
        self.config = config
        self._cache: torch.Tensor | None = torch.zeros(config.shape, dtype=config.dtype, device=device)

    @property
    def cache(self) -> torch.Tensor:
        assert self._cache is not None, "KV cache used after release"
        return self._cache

    def release(self) -> None:
        self._cache = None
