"""The pool of physical KV blocks of one lane: ids, reference counts and prefix caching.

Invariants:
- Every block is either referenced (ref_count > 0, held by that many requests) or in the free
  queue; `num_free + referenced == num_blocks`.
- With caching, a full block may carry the hash of its content (its tokens and every token
  before them). A referenced block with a hash can be shared by a new request with the same
  prefix; an unreferenced one stays in the free queue, still findable, until it is evicted.
- The free queue is LRU: `allocate` takes from its front (evicting any cached content there);
  `free` appends, and a request frees its blocks tail first, so its prefix blocks, the most
  likely to be shared, are evicted last.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


def hash_block(parent: int | None, tokens: Sequence[int], images: tuple[str, ...] = ()) -> int:
    """Content hash of a full block, chained through its parent so it names the whole prefix; with
    the keys of the images whose placeholders it holds (placeholder ids are the same for every
    image: the block's content is the image's, as vLLM's extra block-hash keys)."""
    return hash((parent, tuple(tokens))) if not images else hash((parent, tuple(tokens), images))


def block_hashes(tokens: Sequence[int], block_size: int, parent: int | None = None) -> list[int]:
    """Hashes of every full block of `tokens`."""
    out: list[int] = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_block(parent, tokens[start:start + block_size])
        out.append(parent)
    return out


@dataclass
class _Block:
    ref_count: int = 0
    content_hash: int | None = None


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool = False) -> None:
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self._blocks = [_Block() for _ in range(num_blocks)]
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._by_hash: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        """Blocks no request references, cached ones included (they are evictable)."""
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    def ref_count(self, block_id: int) -> int:
        return self._blocks[block_id].ref_count

    def allocate(self, count: int) -> list[int]:
        """Take `count` blocks from the LRU front, evicting their cached content; the caller
        checks `num_free` first."""
        assert 0 <= count <= len(self._free), f"asked for {count} blocks, {len(self._free)} free"
        ids = []
        for _ in range(count):
            block_id, _ = self._free.popitem(last=False)
            block = self._blocks[block_id]
            if block.content_hash is not None:
                del self._by_hash[block.content_hash]
                block.content_hash = None
            block.ref_count = 1
            ids.append(block_id)
        return ids

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop one reference from each block, tail first; unreferenced blocks become free."""
        for block_id in reversed(block_ids):
            block = self._blocks[block_id]
            assert block.ref_count > 0, f"block {block_id} freed twice"
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[block_id] = None

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """Cached blocks of the longest prefix of `hashes` (not yet referenced by the caller)."""
        hits: list[int] = []
        for content_hash in hashes:
            block_id = self._by_hash.get(content_hash)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def share(self, block_ids: Sequence[int]) -> None:
        """Reference cached blocks returned by `lookup`, taking free ones out of the queue."""
        for block_id in block_ids:
            block = self._blocks[block_id]
            if block.ref_count == 0:
                del self._free[block_id]
            block.ref_count += 1

    def cache(self, block_id: int, content_hash: int) -> None:
        """Record that a full block holds the content named by `content_hash`."""
        if not self.enable_caching:
            return
        block = self._blocks[block_id]
        assert block.ref_count > 0 and block.content_hash in (None, content_hash)
        if block.content_hash is None and content_hash not in self._by_hash:
            block.content_hash = content_hash
            self._by_hash[content_hash] = block_id
