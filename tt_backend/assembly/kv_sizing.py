"""The KV cache sized after the model loads (`kv_cache_memory_bytes=auto`), through the runtime's
late, shrink-only capacity step (`ModelRunner.configure_capacity`, before allocation).

The gpu_memory_utilization idea of vLLM, on any torch device: once the weights are resident, read
the memory the device has free (CUDA: mem_get_info; CPU: MemAvailable, bounded by the cgroup's
limit), measure the peak one prefill step of the model reaches on a scratch runner, scale it to the
step's token budget (max_num_batched_tokens), and give the KV cache `kv_cache_memory_fraction` of
what is left, at most the ceiling the config resolved to (every seat of every lane at
max_model_len: more blocks than that could only hold prefix-cache entries) and at most the device's
cap for an auto cache (`TorchDevice.auto_kv_cache_cap`: 4 GiB on the CPU, as vLLM's CPU backend
reserves; none on CUDA).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tt_backend.config import EngineConfig
from tt_backend.contract.modes import StepMode, TraceMode
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.torch.memory import PeakReading, free_bytes, measure_peak
from tt_backend.runtime.runner import ModelRunner

logger = logging.getLogger(__name__)

PROFILE_TOKENS = 128
"""Tokens of the profiled prefill step: enough for the activations to dominate the allocator's
noise, few enough to cost a fraction of a second at load on two CPU cores."""

RunnerFactory = Callable[[EngineConfig], ModelRunner]


@dataclass(frozen=True)
class KVSizing:
    blocks_per_lane: int
    free: int
    free_how: str
    step_peak: int
    peak: PeakReading
    profiled_tokens: int
    ceiling: int
    cap: int | None

    def describe(self, config: EngineConfig, block_bytes: int) -> str:
        mib = 1 << 20
        total = self.blocks_per_lane * config.data_parallel_size * block_bytes
        return (f"kv cache: kv_cache_memory_bytes=auto: {self.free / mib:.0f} MiB free after the weights "
                f"({self.free_how}), step peak {self.step_peak / mib:.0f} MiB "
                f"({self.peak.bytes / mib:.1f} MiB at {self.profiled_tokens} prefill tokens by "
                f"{self.peak.how}, scaled to max_num_batched_tokens={config.max_num_batched_tokens}); "
                f"{config.kv_cache_memory_fraction} of the rest"
                f"{'' if self.cap is None else f', at most {self.cap / mib:.0f} MiB on this device'}"
                f" -> {self.blocks_per_lane} blocks of "
                f"{config.block_size} per lane x {config.data_parallel_size} lane(s) = {total / mib:.0f} MiB "
                f"(ceiling {self.ceiling} blocks per lane: max_num_seqs x max_model_len)")


def size_kv_cache(config: EngineConfig, block_bytes: int, device: torch.device,
                  scratch_runner: RunnerFactory, cap: int | None) -> KVSizing:
    """Blocks per lane for an auto-sized cache of `config` (resolved for the model: its
    num_kv_blocks is the ceiling). `scratch_runner` builds a runner for a config (the profile's);
    `cap`: the most the device lets an auto cache take (`TorchDevice.auto_kv_cache_cap`)."""
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    free, free_how = free_bytes(device)
    tokens = min(PROFILE_TOKENS, config.max_num_batched_tokens, config.max_model_len)
    peak = _profile_prefill(config, tokens, device, scratch_runner)
    step_peak = peak.bytes * config.max_num_batched_tokens // tokens
    budget = int(config.kv_cache_memory_fraction * max(0, free - step_peak))
    if cap is not None:
        budget = min(budget, cap)
    blocks = min(config.num_kv_blocks, budget // (block_bytes * config.data_parallel_size))
    sizing = KVSizing(blocks, free, free_how, step_peak, peak, tokens, config.num_kv_blocks, cap)
    per_request = -(-config.max_model_len // config.block_size)
    if blocks < per_request:
        raise ValueError(
            f"kv_cache_memory_bytes=auto: {sizing.describe(config, block_bytes)}, fewer than one request of "
            f"max_model_len={config.max_model_len} needs ({per_request}); lower max_model_len or "
            "max_num_batched_tokens, raise kv_cache_memory_fraction, or set kv_cache_memory_bytes or "
            "num_kv_blocks")
    return sizing


def _profile_prefill(config: EngineConfig, tokens: int, device: torch.device,
                     scratch_runner: RunnerFactory) -> PeakReading:
    """The memory peak of one eager prefill step of `tokens` tokens, above the scratch cache it
    runs over (allocated before the measurement). The step runs once unmeasured first: the first
    forward pages in memory-mapped weights and fills the allocators' caches (it measured 270 MiB at
    128 tokens on the default model in float32 in the server, against 5 MiB for the same step again)."""
    blocks = -(-tokens // config.block_size)
    scratch = scratch_runner(dataclasses.replace(config, num_kv_blocks=blocks, trace_mode=TraceMode.NONE,
                                                 data_parallel_size=1))
    try:
        scratch.allocate()
        plan = StepPlan(StepMode.PREFILL, (PlannedRow(tuple([0] * tokens), 0, tuple(range(blocks)), True),))
        scratch.execute(plan)
        _, peak = measure_peak(device, lambda: scratch.execute(plan))
    finally:
        scratch.close()
    return peak
