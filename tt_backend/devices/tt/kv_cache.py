"""TTPagedKVCache: the KV manager's hold on the cache a tt-metal generator allocates.

The generator allocates (`allocate_kv_cache(kv_cache_shape, dtype, num_layers)`: one region per
data-parallel submesh, each [layer][k, v]); this object is the only owner of what it returns, and
the only place that frees it. A cache the device cannot hold fails here, at load, with a message
naming the options that size it; ttnn's own out-of-memory text follows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tt_backend.devices.tt.kv_layout import TTKVGeometry

logger = logging.getLogger(__name__)

OUT_OF_MEMORY = "Out of Memory"
"""What ttnn's allocator says (a TT_FATAL RuntimeError) when a buffer does not fit."""


class TTPagedKVCache:
    def __init__(self, geometry: TTKVGeometry, lanes: int, release: Callable[[Any], None]) -> None:
        self.geometry = geometry
        self.lanes = lanes
        self._release = release
        self._caches: list[Any] | None = None

    def allocate(self, allocate: Callable[[], list[Any]]) -> list[Any]:
        """Run the generator's allocation; an out-of-memory error becomes a ValueError naming
        num_kv_blocks and kv_cache_memory_bytes."""
        if self._caches is not None:
            return self._caches
        g = self.geometry
        try:
            caches = allocate()
        except RuntimeError as exc:
            if OUT_OF_MEMORY not in str(exc):
                raise
            detail = next((line for line in str(exc).splitlines() if OUT_OF_MEMORY in line), "")
            raise ValueError(
                f"the KV cache does not fit on the device: {self.lanes} lane(s) x {g.num_layers} layers x "
                f"K/V of {g.shape} in {g.dtype} ({g.bytes_per_lane / 2**30:.2f} GiB per lane); lower "
                f"num_kv_blocks (now {g.num_blocks - 1} per lane) or kv_cache_memory_bytes. ttnn: {detail}"
            ) from None
        if len(caches) != self.lanes:
            raise ValueError(f"the generator allocated {len(caches)} KV cache region(s) for "
                             f"{self.lanes} lane(s)")
        self._caches = caches
        logger.info("tt: KV cache of %d lane(s), %d layers, K/V %s in %s (%.2f GiB per lane)", self.lanes,
                    g.num_layers, g.shape, g.dtype, g.bytes_per_lane / 2**30)
        return caches

    @property
    def caches(self) -> list[Any]:
        if self._caches is None:
            raise RuntimeError("the TT KV cache is not allocated")
        return self._caches

    def lane(self, index: int) -> Any:
        """The cache region of one lane (submesh), as the generator's steps take it."""
        return self.caches[index]

    def release(self) -> None:
        """Free every region; idempotent. A region whose release fails stays held, with every
        region after it, so a retry frees what is left (the first failure propagates)."""
        while self._caches:
            self._release(self._caches[0])
            self._caches.pop(0)
        self._caches = None
