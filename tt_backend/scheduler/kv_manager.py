"""KVCacheManager: the one owner of each request's KV blocks in one lane, over its BlockPool.

In the spirit of vLLM v1's `KVCacheManager`: the scheduler asks for a request's cached prefix
(`get_computed_blocks`), for blocks covering its next tokens (`allocate_slots`, a typed result or
None when the free blocks cannot hold them, with nothing changed), publishes full blocks once their
K/V is computed (`cache_full_blocks`) and frees them (`free`). The request object holds no block
state: block ids, content hashes and how many leading blocks are published live here, by request id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tt_backend.scheduler.block_pool import BlockPool, hash_block
from tt_backend.scheduler.request import Request


@dataclass(frozen=True)
class ComputedBlocks:
    """A cached prefix found for a request: blocks to reference, and the tokens they hold."""

    block_ids: tuple[int, ...] = ()

    def num_tokens(self, block_size: int) -> int:
        return len(self.block_ids) * block_size


NO_COMPUTED_BLOCKS = ComputedBlocks()


class AllocatedSlots(NamedTuple):
    """What `allocate_slots` gave (a tuple: it is made for every running request at every step)."""

    block_ids: tuple[int, ...]
    """Every block the request holds now, in logical order."""
    new_block_ids: tuple[int, ...]
    """Of those, the ones this call took from the free queue."""


@dataclass
class _Held:
    block_ids: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)
    """Content hashes of the full blocks of the request's known tokens (with prefix caching)."""
    num_cached: int = 0
    """Leading blocks whose content is published in the pool's prefix cache."""


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = False) -> None:
        self.pool = BlockPool(num_blocks, enable_caching)
        self.block_size = block_size
        self.enable_caching = enable_caching
        self._held: dict[str, _Held] = {}

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def block_ids(self, request_id: str) -> tuple[int, ...]:
        held = self._held.get(request_id)
        return () if held is None else tuple(held.block_ids)

    def blocks_needed(self, request: Request, num_tokens: int) -> int:
        """Blocks the request still lacks to hold `num_tokens` tokens (at least its kv_floor;
        negative: spare blocks)."""
        return -(-max(num_tokens, request.kv_floor) // self.block_size) - len(self._of(request).block_ids)

    def get_computed_blocks(self, request: Request) -> ComputedBlocks:
        """The cached blocks of the longest cached prefix of full blocks of the request's tokens,
        leaving at least its last token to compute (its logits are needed). Nothing is referenced
        yet: `allocate_slots` does that."""
        if not self.enable_caching:
            return NO_COMPUTED_BLOCKS
        held = self._of(request)
        self._extend_hashes(request, held)
        usable = (request.num_tokens - 1) // self.block_size
        return ComputedBlocks(tuple(self.pool.lookup(held.hashes[:usable])))

    def fitting_tokens(self, request: Request, start: int,
                       computed: ComputedBlocks = NO_COMPUTED_BLOCKS) -> int:
        """How many tokens after the first `start` fit in the request's blocks, `computed` and the
        blocks still free once `computed` is referenced."""
        held = len(self._of(request).block_ids) + len(computed.block_ids)
        room = (held + self._free_after(computed)) * self.block_size
        return room - start if room >= request.kv_floor else 0

    def allocate_slots(self, request: Request, num_tokens: int,
                       computed: ComputedBlocks = NO_COMPUTED_BLOCKS) -> AllocatedSlots | None:
        """Reference `computed` (a request holding no blocks yet) and allocate blocks until the
        request's blocks hold `num_tokens` tokens, and at least its kv_floor (its images'
        cross-attention keys and values). None, and nothing changed, when they cannot."""
        held = self._of(request)
        assert not computed.block_ids or not held.block_ids, "a cached prefix starts an empty block list"
        num_tokens = max(num_tokens, request.kv_floor)
        need = -(-num_tokens // self.block_size) - len(held.block_ids) - len(computed.block_ids)
        if need <= 0 and not computed.block_ids:  # most decode steps: the last block has room
            return AllocatedSlots(tuple(held.block_ids), ())
        if need > self._free_after(computed):
            return None
        if computed.block_ids:
            self.pool.share(computed.block_ids)
            held.block_ids = list(computed.block_ids)
            held.num_cached = len(computed.block_ids)
        new = self.pool.allocate(need) if need > 0 else []
        held.block_ids.extend(new)
        return AllocatedSlots(tuple(held.block_ids), tuple(new))

    def cache_full_blocks(self, request: Request) -> None:
        """Publish the content of the blocks the request's computed tokens fill."""
        if not self.enable_caching:
            return
        held = self._of(request)
        full = request.num_computed_tokens // self.block_size
        if full > held.num_cached:
            self._extend_hashes(request, held)
            for i in range(held.num_cached, full):
                self.pool.cache(held.block_ids[i], held.hashes[i])
            held.num_cached = full

    def free(self, request: Request) -> None:
        """Drop the request's references to its blocks (tail first); its hashes stay, for a resume."""
        held = self._held.get(request.request_id)
        if held is not None:
            self.pool.free(held.block_ids)
            held.block_ids = []
            held.num_cached = 0

    def free_block_hashes(self, request: Request) -> None:
        """Forget the request entirely (it finished); its blocks must be freed already."""
        held = self._held.pop(request.request_id, None)
        assert held is None or not held.block_ids, f"{request.request_id} still holds blocks"

    def _free_after(self, computed: ComputedBlocks) -> int:
        """Free blocks once `computed` is referenced (its unreferenced cached blocks leave the queue)."""
        if not computed.block_ids:
            return self.pool.num_free
        return self.pool.num_free - sum(1 for b in computed.block_ids if self.pool.ref_count(b) == 0)

    def _of(self, request: Request) -> _Held:
        held = self._held.get(request.request_id)
        if held is None:
            held = self._held[request.request_id] = _Held()
        return held

    def _extend_hashes(self, request: Request, held: _Held) -> None:
        bs = self.block_size
        while len(held.hashes) < request.num_tokens // bs:
            i = len(held.hashes)
            parent = held.hashes[-1] if i else None
            images = tuple(image.key for image in request.images_in(i * bs, (i + 1) * bs))
            held.hashes.append(hash_block(parent, request.token_slice(i * bs, (i + 1) * bs), images))
