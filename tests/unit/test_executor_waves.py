"""Padded prefill waves: same logits as running rows one by one, and padding writes no KV."""

from pathlib import Path
from typing import Any

import torch

from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.torch.device import TorchDevice
from tt_backend.models.loader import load_model
from tt_backend.runtime.config import DecodeRuntimeConfig, PageTableLayout, PrefillRuntimeConfig
from tt_backend.runtime.executor import EagerExecutor, model_steps
from tt_backend.runtime.kv_cache import PagedKVCacheConfig, PagedKVCacheManager
from tt_backend.runtime.prefill_plan import PrefillPlanConfig, PrefillWave, plan_prefill
from tt_backend.runtime.program_compiler import ProgramCompiler

BLOCK = 16


def test_padded_wave_matches_sequential_and_leaves_other_blocks_untouched(model_dir: Path,
                                                                           chat_ids: Any) -> None:
    model = load_model(model_dir, ComputePlan.resolve(torch.device("cpu"), "float32"))
    cfg = model.spec
    prompts = [chat_ids(p) for p in ("Hi! How are you today?", "Name a colour.", "What is two plus two?")]
    rows = tuple(PlannedRow(tuple(ids), 0, tuple(range(4 * i, 4 * i + 4)), True)
                 for i, ids in enumerate(prompts))
    plan = StepPlan("prefill", rows)

    def run(batching: bool) -> tuple[torch.Tensor, torch.Tensor]:
        layout = PageTableLayout.resolve(BLOCK, 2048, 16)
        kv = PagedKVCacheManager(PagedKVCacheConfig(cfg.num_layers, 16, BLOCK, cfg.num_kv_heads,
                                                    cfg.head_dim, torch.float32), layout, torch.device("cpu"))
        kv.allocate()
        prefill = PrefillRuntimeConfig.resolve(layout, PrefillPlanConfig(batching, 32, 2048), 2048)
        device = TorchDevice.for_device(torch.device("cpu"))
        executor = EagerExecutor(model_steps(model.module, device), kv, device.device,
                                 DecodeRuntimeConfig.resolve(layout, 32), prefill, ProgramCompiler(kv))
        return executor.execute(plan), kv.context.cache[:, :, :16]  # without the padding sink

    config = PrefillPlanConfig(True, 32, 2048)
    assert plan_prefill(plan, config) == (PrefillWave((0, 1, 2), 4, 48),)  # one padded wave
    batched, kv_batched = run(batching=True)
    sequential, kv_sequential = run(batching=False)
    assert (batched.argmax(-1) == sequential.argmax(-1)).all()
    assert (batched - sequential).abs().max().item() < 1e-4
    # Blocks 12..15 belong to no row: the padding row and padding tokens wrote nothing there.
    assert kv_batched[:, :, 12:].abs().sum().item() == 0
    written = [slot for i, ids in enumerate(prompts) for slot in range(64 * i, 64 * i + len(ids))]
    flat_b = kv_batched.flatten(2, 3)  # [layers, 2, blocks * block_size, heads, dim]
    flat_s = kv_sequential.flatten(2, 3)
    # fp32 matmuls over different padded shapes sum in a different order: ~1e-5 apart
    assert torch.allclose(flat_b[:, :, written], flat_s[:, :, written], atol=1e-4)
    unwritten = sorted(set(range(12 * BLOCK)) - set(written))
    assert flat_b[:, :, unwritten].abs().sum().item() == 0
