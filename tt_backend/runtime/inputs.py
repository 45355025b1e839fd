"""Host preparation of a step's inputs: planned rows become padded tensors, then a device copy.

Rows are padded to `padded_len` tokens, the batch to `padded_batch` rows and page tables to
`table_width` blocks. Padding tokens get slot −1 (the model sends them to its sink slot) and
position 0; padding rows get page-table rows of −1 and a context of 1 so their (discarded)
attention stays finite. Their logits are never read.

A row's block ids are its lane's own; the cache is one physical tensor of every lane's region in
lane order, and this is the one place a row's ids become physical ones (`physical_blocks`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.contract.step import PlannedRow


def physical_blocks(row: PlannedRow, blocks_per_lane: int | None) -> torch.Tensor:
    """[blocks] int64: the row's lane-local block b of lane l as physical block l × blocks_per_lane + b.
    `blocks_per_lane` None: a cache of one lane, whose ids are its physical ones."""
    if blocks_per_lane is None:
        assert row.lane == 0, f"a lane {row.lane} row over a cache of one lane"
        return torch.tensor(row.block_ids, dtype=torch.long)
    assert all(0 <= b < blocks_per_lane for b in row.block_ids), \
        f"block ids {row.block_ids} are not lane-local (each lane has {blocks_per_lane})"
    return torch.tensor(row.block_ids, dtype=torch.long) + row.lane * blocks_per_lane


def prepare_host_inputs(rows: Sequence[PlannedRow], block_size: int, padded_batch: int | None = None,
                        padded_len: int | None = None, table_width: int | None = None,
                        blocks_per_lane: int | None = None) -> ForwardBatch:
    B = padded_batch or len(rows)
    T = padded_len or max(len(r.token_ids) for r in rows)
    max_blocks = table_width or max(len(r.block_ids) for r in rows)
    assert B >= len(rows) and T >= max(len(r.token_ids) for r in rows)
    input_ids = torch.zeros(B, T, dtype=torch.long)
    positions = torch.zeros(B, T, dtype=torch.long)
    slot_mapping = torch.full((B, T), -1, dtype=torch.long)
    block_tables = torch.full((B, max_blocks), -1, dtype=torch.long)
    context_lens = torch.ones(B, dtype=torch.long)
    logits_indices = torch.zeros(B, dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row.token_ids)
        table = physical_blocks(row, blocks_per_lane)
        pos = torch.arange(row.start_position, row.start_position + n)
        input_ids[i, :n] = torch.tensor(row.token_ids)
        positions[i, :n] = pos
        # slot = physical block of the position's logical block * block_size + offset
        slot_mapping[i, :n] = table[pos // block_size] * block_size + pos % block_size
        used = min(len(row.block_ids), max_blocks)  # blocks past the context are never read
        assert row.context_len <= used * block_size, "the page table is narrower than the context"
        block_tables[i, :used] = table[:used]
        context_lens[i] = row.context_len
        logits_indices[i] = n - 1
    return ForwardBatch(input_ids, positions, slot_mapping, block_tables, context_lens, logits_indices)


def to_device(batch: ForwardBatch, device: torch.device) -> ForwardBatch:
    """The batch on `device`; a tensor already there is itself (`Tensor.to` copies nothing), so a
    CPU step reads the host tensors as they are."""
    ids, positions, slots, tables, lens, indices = (t.to(device, non_blocking=True) for t in batch.tensors)
    return ForwardBatch(ids, positions, slots, tables, lens, indices, batch.decode)
