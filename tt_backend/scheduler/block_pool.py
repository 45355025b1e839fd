"""The pool of physical KV blocks: ids handed out and returned, with free-block accounting."""

from __future__ import annotations

from collections import deque


class BlockPool:
    """Blocks are ids in [0, num_blocks). A block is owned by at most one request.

    Invariant: every id is either in the free queue or held by exactly one request, so
    `num_free + held == num_blocks` at all times.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int]:
        """Take `count` blocks in free-queue order; the caller checks `num_free` first."""
        assert 0 <= count <= len(self._free), f"asked for {count} blocks, {len(self._free)} free"
        return [self._free.popleft() for _ in range(count)]

    def free(self, block_ids: list[int]) -> None:
        """Return blocks; freed blocks are reused last (FIFO), which keeps ids stable in tests."""
        self._free.extend(block_ids)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks
