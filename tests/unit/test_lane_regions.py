"""The torch runner's lane regions: a planned row holds its lane's own block ids, and the host inputs
map lane l's block b to physical block l × blocks_per_lane + b of the one cache every lane shares.
(The tt-metal generator runner keeps the ids as they are: tests/unit/test_generator_runner.py.)"""

from pathlib import Path
from typing import Any

import pytest
import torch

from tt_backend.contract.modes import StepMode
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.torch.device import TorchDevice
from tt_backend.models.loader import load_model
from tt_backend.runtime.config import DecodeRuntimeConfig, PageTableLayout, PrefillRuntimeConfig
from tt_backend.runtime.executor import EagerExecutor, model_steps
from tt_backend.runtime.inputs import prepare_host_inputs
from tt_backend.runtime.kv_cache import PagedKVCacheConfig, PagedKVCacheManager
from tt_backend.runtime.prefill_plan import PrefillPlanConfig
from tt_backend.runtime.program_compiler import ProgramCompiler

BLOCK, LANES, PER_LANE = 4, 2, 8
MODEL_BLOCK = 16


def test_page_table_and_slots_map_lane_local_blocks_into_the_lanes_region() -> None:
    rows = [PlannedRow((5,), 5, (0, 1), True, lane=0, slot=0),
            PlannedRow((6,), 6, (0, 2), True, lane=1, slot=0)]
    batch = prepare_host_inputs(rows, BLOCK, padded_batch=4, padded_len=1, table_width=4,
                                blocks_per_lane=PER_LANE)
    # lane 1's blocks 0 and 2 are physical 8 and 10; padding rows and columns stay -1
    assert batch.block_tables.tolist() == [[0, 1, -1, -1], [8, 10, -1, -1], [-1] * 4, [-1] * 4]
    # position 5 is offset 1 of logical block 1; position 6 offset 2 of logical block 1
    assert batch.slot_mapping[:, 0].tolist() == [1 * BLOCK + 1, 10 * BLOCK + 2, -1, -1]


def test_ids_that_are_not_lane_local_or_a_lane_without_regions_are_refused() -> None:
    with pytest.raises(AssertionError, match=r"^block ids \(3, 8\) are not lane-local \(each lane has 8\)$"):
        prepare_host_inputs([PlannedRow((1,), 4, (3, 8), True, lane=1)], BLOCK, blocks_per_lane=PER_LANE)
    with pytest.raises(AssertionError, match="^a lane 1 row over a cache of one lane$"):
        prepare_host_inputs([PlannedRow((1,), 0, (0,), True, lane=1)], BLOCK)


def test_layout_splits_its_blocks_into_equal_lane_regions() -> None:
    layout = PageTableLayout.resolve(BLOCK, 64, LANES * PER_LANE, LANES)
    assert (layout.num_blocks, layout.blocks_per_lane) == (16, 8)
    assert layout.with_capacity(12).blocks_per_lane == 6  # a late, smaller capacity keeps the split
    with pytest.raises(ValueError, match="^KV capacity of 11 blocks does not split into 2 lanes$"):
        layout.with_capacity(11)
    assert PageTableLayout.resolve(BLOCK, 64, 16).blocks_per_lane == 16  # one lane: the whole cache


def test_a_lane_1_row_computes_what_the_same_row_does_in_lane_0_into_its_own_region(
        model_dir: Path, chat_ids: Any) -> None:
    model = load_model(model_dir, ComputePlan.resolve(torch.device("cpu"), "float32"))
    cfg = model.spec
    ids = tuple(chat_ids("Name a colour."))
    blocks = tuple(range(-(-len(ids) // MODEL_BLOCK)))
    assert 1 < len(blocks) < PER_LANE

    def run(lane: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        layout = PageTableLayout.resolve(MODEL_BLOCK, 256, LANES * PER_LANE, LANES)
        kv = PagedKVCacheManager(PagedKVCacheConfig(cfg.num_layers, LANES * PER_LANE, MODEL_BLOCK,
                                                    cfg.num_kv_heads, cfg.head_dim, torch.float32),
                                 layout, torch.device("cpu"))
        kv.allocate()
        prefill = PrefillRuntimeConfig.resolve(layout, PrefillPlanConfig(True, 32, 256), 256)
        executor = EagerExecutor(model_steps(model.module, TorchDevice.for_device(torch.device("cpu"))), kv,
                                 torch.device("cpu"),
                                 DecodeRuntimeConfig.resolve(layout, 8), prefill, ProgramCompiler(kv))
        plan = StepPlan(StepMode.PREFILL, (PlannedRow(ids, 0, blocks, True, lane=lane, slot=0),))
        (call,) = executor.prepare(plan)
        return executor.execute(plan), call.inputs.block_tables[0], kv.context.cache

    logits_0, table_0, cache_0 = run(lane=0)
    logits_1, table_1, cache_1 = run(lane=1)
    assert table_0[:len(blocks)].tolist() == list(blocks)
    assert table_1[:len(blocks)].tolist() == [PER_LANE + b for b in blocks]  # lane 1's block b: 8 + b
    assert torch.equal(logits_0, logits_1)
    n = len(blocks)
    # [layers, k/v, blocks + sink, block_size, kv_heads, head_dim]: lane 1 wrote lane 0's K/V into its region
    assert torch.equal(cache_1[:, :, PER_LANE:PER_LANE + n], cache_0[:, :, :n])
    assert cache_1[:, :, :PER_LANE].abs().sum().item() == 0  # lane 0's region untouched
    assert cache_0[:, :, n:].abs().sum().item() == 0 and cache_1[:, :, PER_LANE + n:].abs().sum().item() == 0
