from tt_backend.scheduler.block_pool import BlockPool, block_hashes


def test_allocate_and_free_in_lru_order() -> None:
    pool = BlockPool(4)
    a = pool.allocate(2)
    b = pool.allocate(1)
    assert (a, b, pool.num_free) == ([0, 1], [2], 1)
    pool.free(a)  # tail first: block 1 becomes older than block 0
    assert pool.allocate(3) == [3, 1, 0]


def test_prefix_reuse_and_eviction_order() -> None:
    pool = BlockPool(6, enable_caching=True)
    tokens = list(range(12))  # three full blocks of 4
    hashes = block_hashes(tokens, 4)
    first = pool.allocate(3)
    for block_id, h in zip(first, hashes, strict=True):
        pool.cache(block_id, h)
    # A second request with the same first two blocks and a different third.
    other = block_hashes(tokens[:8] + [99, 98, 97, 96], 4)
    hits = pool.lookup(other)
    assert hits == [0, 1]
    pool.share(hits)
    assert [pool.ref_count(i) for i in (0, 1, 2)] == [2, 2, 1]
    pool.free(first)  # freed tail first: 2, then 1 and 0 still held by the sharer
    assert pool.num_free == 4  # 3, 4, 5 and the cached, unreferenced block 2
    pool.free(hits)  # the sharer ends: LRU order is now 3, 4, 5, 2, 1, 0
    assert pool.num_free == 6
    assert pool.lookup(hashes) == [0, 1, 2]  # all still cached while unreferenced
    assert pool.allocate(4) == [3, 4, 5, 2]  # evicts block 2's content first
    assert pool.lookup(hashes) == [0, 1]
    assert pool.allocate(1) == [1]
    assert pool.lookup(hashes) == [0]


def test_hashes_name_the_whole_prefix() -> None:
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)
    b = block_hashes([9, 2, 3, 4, 5, 6, 7, 8], 4)
    assert a[1] != b[1]  # same block content, different prefix
    assert block_hashes([1, 2, 3], 4) == []
