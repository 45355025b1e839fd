"""prepare_host_inputs: a step's planned rows as padded tensors, checked value by value on a hand-worked
case (a fresh row, a row past a cached prefix in another lane, a padding row and padding tokens)."""

from __future__ import annotations

import pytest
import torch

from tt_backend.contract.step import PlannedRow
from tt_backend.runtime.inputs import physical_blocks, prepare_host_inputs

BLOCK = 4
PER_LANE = 10


def test_rows_padding_and_lanes_become_these_tensors() -> None:
    fresh = PlannedRow((11, 12, 13, 14, 15), 0, (3, 7), True, lane=0, slot=0)
    # lane 1, positions 6..8 past 6 cached tokens; its blocks 2, 5, 9 are physical 12, 15, 19
    later = PlannedRow((21, 22, 23), 6, (2, 5, 9), True, lane=1, slot=1, prefix_token_ids=(1,) * 6)
    batch = prepare_host_inputs([fresh, later], BLOCK, padded_batch=3, padded_len=6, table_width=3,
                                blocks_per_lane=PER_LANE)
    assert batch.input_ids.tolist() == [[11, 12, 13, 14, 15, 0], [21, 22, 23, 0, 0, 0], [0] * 6]
    assert batch.positions.tolist() == [[0, 1, 2, 3, 4, 0], [6, 7, 8, 0, 0, 0], [0] * 6]
    # slot = physical block * 4 + offset: fresh 3*4+0.., 7*4+0; later position 6 -> block 15, offset 2
    assert batch.slot_mapping.tolist() == [[12, 13, 14, 15, 28, -1], [62, 63, 76, -1, -1, -1], [-1] * 6]
    assert batch.block_tables.tolist() == [[3, 7, -1], [12, 15, 19], [-1, -1, -1]]
    assert batch.context_lens.tolist() == [5, 9, 1]
    assert batch.logits_indices.tolist() == [4, 2, 0]
    assert all(t.dtype == torch.long for t in batch.tensors)


def test_a_narrower_table_keeps_the_context_blocks_and_slots_use_every_block() -> None:
    row = PlannedRow((5,), 3, (4, 6, 8), True)  # context 4: one block read; blocks past it unused
    batch = prepare_host_inputs([row], BLOCK, table_width=1)
    assert batch.block_tables.tolist() == [[4]]
    assert batch.slot_mapping.tolist() == [[19]]


def test_a_row_with_another_lanes_ids_is_refused() -> None:
    with pytest.raises(AssertionError, match="not lane-local"):
        physical_blocks(PlannedRow((1,), 0, (PER_LANE,), True, lane=1), PER_LANE)
    assert physical_blocks(PlannedRow((1,), 0, (9,), True, lane=2), PER_LANE).tolist() == [29]
