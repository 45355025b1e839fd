"""Assemble an LLMEngine from an EngineConfig: checkpoint, tokenizer, model, KV cache, executor."""

from __future__ import annotations

import importlib
import logging

import torch

from tt_backend.config import EngineConfig
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.torch.device import TorchDevice, select_device
from tt_backend.devices.tt.mesh import tt_device_count
from tt_backend.engine.engine import LLMEngine
from tt_backend.models.capabilities import ModelCapabilities
from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.models.loader import load_model
from tt_backend.models.registry import build_registry
from tt_backend.models.spec import ModelSpec
from tt_backend.runtime.config import (
    DecodeRuntimeConfig,
    PageTableLayout,
    PrefillRuntimeConfig,
    SamplingConfig,
    TraceConfig,
)
from tt_backend.runtime.kv_cache import PagedKVCacheConfig
from tt_backend.runtime.prefill_plan import DENSE_BATCHES, PHYSICAL_BATCHES, PrefillPlanConfig
from tt_backend.runtime.runner import ModelRunner
from tt_backend.scheduler.scheduled_step import SchedulerConfig
from tt_backend.text.tokenizer import eos_token_ids, load_tokenizer

logger = logging.getLogger(__name__)


def import_processor_modules(names: str) -> None:
    """Import the modules of `logits_processor_modules`; each registers its processors."""
    for name in filter(None, (n.strip() for n in names.split(","))):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"logits_processor_modules: cannot import {name!r} ({exc})") from None


def uses_tt(config: EngineConfig) -> bool:
    """Whether the engine runs on a Tenstorrent mesh: device=tt, or auto when ttnn imports and
    reports a device."""
    if config.device == "tt":
        return True
    if config.device != "auto":
        return False
    found = tt_device_count()
    logger.info("device=auto: %s", f"ttnn reports {found} Tenstorrent chip(s)" if found
                else "no Tenstorrent device (ttnn missing or sees none); torch")
    return found > 0


def build_engine(config: EngineConfig) -> LLMEngine:
    import_processor_modules(config.logits_processor_modules)
    if uses_tt(config):
        from tt_backend.engine.tt_builder import build_tt_engine
        return build_tt_engine(config)
    model_dir = resolve_model_dir(config.model)
    device = select_device(config.device)
    plan = ComputePlan.resolve(device, config.dtype, config.cpu_isa, config.cpu_kernels)
    logger.info("%s", plan.describe())
    dtype = plan.activations
    registry = build_registry("torch", extra_models_dir=config.extra_models_dir,
                              builtin=config.builtin_models)
    loaded = load_model(model_dir, plan, registry)
    cfg = loaded.spec
    per_token = PagedKVCacheConfig.bytes_per_token(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, dtype)
    caps = loaded.capabilities
    for feature, declared in (("prefix caching", caps.prefix_caching),
                              ("chunked prefill", caps.chunked_prefill)):
        if not declared:
            logger.info("%s off: %s does not declare support for it", feature, loaded.architecture)
    config = config.resolve_for_model(cfg.max_position_embeddings, per_token,
                                      caps.prefix_caching, caps.chunked_prefill)
    if config.async_scheduling and not caps.async_decode:
        raise ValueError(f"async_scheduling=true, but {loaded.architecture} does not support async decode")
    lanes = config.data_parallel_size
    if lanes > 1 and not caps.single_execute:
        raise ValueError(
            f"data_parallel_size={lanes}: {loaded.architecture} does not declare single-execute, so its "
            "lanes cannot share one program; serve it as one lane per model instance instead (Triton "
            "instance_group count in config.pbtxt, each instance on its own device)")
    if lanes > 1:
        logger.info("topology: %d in-process lanes x %d sequences, one forward per step for all lanes "
                    "(%s declares single-execute)", lanes, config.max_num_seqs, loaded.architecture)
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    runner = build_runner(config, loaded.module, loaded.capabilities, cfg, dtype, device)
    tokenizer = load_tokenizer(model_dir)
    logger.info("engine: %s (%s) from %s on %s in %s; max_model_len=%d, %d lane(s) of %d KV blocks of %d, "
                "prefix caching %s, trace_mode=%s, async_scheduling=%s, sample_on_device_mode=%s%s",
                loaded.architecture,
                type(loaded.module).__qualname__, model_dir, device, plan.dtype_name, config.max_model_len,
                lanes, config.num_kv_blocks, config.block_size,
                "on" if config.enable_prefix_caching else "off", runner.trace.mode, config.async_scheduling,
                config.sample_on_device_mode,
                " (always_compat_sampling)" if config.always_compat_sampling else "")
    runner.allocate()
    runner.warmup()
    return LLMEngine(config, scheduler_config(config), runner, tokenizer, cfg.vocab_size,
                     eos_token_ids(model_dir, tokenizer.eos_token_id))


def scheduler_config(config: EngineConfig) -> SchedulerConfig:
    """The scheduler's part of a config resolved for the model (per lane)."""
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    return SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=config.max_model_len,
        block_size=config.block_size,
        num_blocks=config.num_kv_blocks,
        enable_chunked_prefill=bool(config.enable_chunked_prefill),
        enable_prefix_caching=bool(config.enable_prefix_caching),
        decode_steps_between_prefills=config.decode_steps_between_prefills,
    )


def build_runner(config: EngineConfig, module: torch.nn.Module, caps: ModelCapabilities,
                 spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> ModelRunner:
    """The runner of one merged batch over every lane (each lane's blocks are a contiguous region
    of one physical cache); its KV cache is not allocated yet (capacity may still shrink)."""
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    lanes = config.data_parallel_size
    num_blocks = lanes * config.num_kv_blocks
    layout = PageTableLayout.resolve(config.block_size, config.max_model_len, num_blocks)
    kv = PagedKVCacheConfig(spec.num_layers, num_blocks, config.block_size, spec.num_kv_heads, spec.head_dim,
                            dtype)
    # The CPU device traces one graph per step function for every shape, so denser waves cost it
    # only their capture; CUDA graphs and compiled programs cost memory or time per shape.
    batches = DENSE_BATCHES if device.type == "cpu" else PHYSICAL_BATCHES
    plan = PrefillPlanConfig.resolve(caps.batched_prefill, caps.max_prefill_batch,
                                     lanes * config.max_num_seqs, config.max_num_batched_tokens, batches,
                                     batching_disabled=config.disable_batched_prefill)
    trace = TraceConfig.resolve(config.trace_mode, device.type)
    return ModelRunner(module, kv, layout, TorchDevice(device), trace,
                       DecodeRuntimeConfig.resolve(layout, lanes * config.max_num_seqs),
                       PrefillRuntimeConfig.resolve(layout, plan, config.max_num_batched_tokens),
                       SamplingConfig.resolve(config.sample_on_device_mode, config.always_compat_sampling))
