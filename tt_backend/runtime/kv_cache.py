"""PagedKVCacheManager: the sole owner of the physical K/V tensors.

It is built against a ceiling (`PagedKVCacheConfig.num_blocks`); the physical capacity may be
decided later (`configure`), shrinking the page-table geometry without rebuilding the model.
`allocate` creates the tensors (one extra block: the padding sink that no request is given) and
binds them transactionally: the returned `PagedKVCacheContext` is the only handle a step may use.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from tt_backend.runtime.config import PageTableLayout


@dataclass(frozen=True)
class PagedKVCacheConfig:
    num_layers: int
    num_blocks: int
    """Usable blocks; the physical cache holds one more (the padding sink)."""
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        # [layers, k/v, blocks + sink, block_size, kv_heads, head_dim]
        return (self.num_layers, 2, self.num_blocks + 1, self.block_size, self.num_kv_heads, self.head_dim)

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * dtype.itemsize


@dataclass(frozen=True)
class PagedKVCacheContext:
    """A borrowed view of the bound cache: what steps, programs and traces run against."""

    cache: torch.Tensor
    layout: PageTableLayout


class PagedKVCacheManager:
    def __init__(self, config: PagedKVCacheConfig, layout: PageTableLayout, device: torch.device) -> None:
        assert layout.num_blocks == config.num_blocks and layout.block_size == config.block_size
        self.config = config
        self.layout = layout
        self.device = device
        self._context: PagedKVCacheContext | None = None

    def configure(self, num_blocks: int) -> PageTableLayout:
        """Decide the physical capacity before allocation; it may only shrink the ceiling."""
        if self._context is not None:
            raise RuntimeError("the KV cache is already allocated; capacity is final")
        self.layout = self.layout.with_capacity(num_blocks)
        self.config = replace(self.config, num_blocks=num_blocks)
        return self.layout

    def allocate(self) -> PagedKVCacheContext:
        if self._context is not None:
            return self._context
        cache = torch.zeros(self.config.shape, dtype=self.config.dtype, device=self.device)
        self._context = PagedKVCacheContext(cache, self.layout)
        return self._context

    @property
    def context(self) -> PagedKVCacheContext:
        if self._context is None:
            raise RuntimeError("the KV cache is not allocated (allocate() it before compiling or running)")
        return self._context

    @property
    def bound(self) -> bool:
        return self._context is not None

    def validate(self, context: PagedKVCacheContext) -> None:
        """A step may only present the exact handle this manager returned."""
        if self._context is None or context is not self._context or context.cache is not self._context.cache:
            raise RuntimeError("a step presented a KV cache this manager does not own")

    def release(self) -> None:
        self._context = None
