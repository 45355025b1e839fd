"""The torch engine: checkpoint → compute plan → model → runner over every lane → KV capacity
(late, when auto) → allocate → warmup → the shared finishing step, on a thread of its own that ends
with the build (`on_own_thread` says why: the thread that steps the engine is then the only one
that holds OpenMP workers)."""

from __future__ import annotations

import dataclasses
import logging

import torch

from tt_backend.assembly.finish import finish_engine
from tt_backend.assembly.kv_sizing import size_kv_cache
from tt_backend.config import EngineConfig
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.torch.device import TorchDevice, select_device
from tt_backend.devices.torch.own_thread import on_own_thread
from tt_backend.engine.engine import LLMEngine
from tt_backend.models.capabilities import ModelCapabilities, check_lanes
from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.models.gguf_linears import GgufLinears, gguf_source
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

logger = logging.getLogger(__name__)


def build_torch_engine(config: EngineConfig) -> LLMEngine:
    return on_own_thread(lambda: _build(config), "tt-build")


def _build(config: EngineConfig) -> LLMEngine:
    model_dir = resolve_model_dir(config.model)
    device = select_device(config.device)
    gguf = gguf_source(config.model) if ComputePlan.may_keep_blocks(device, config.weight_dtype) else None
    plan = ComputePlan.resolve(device, config.dtype, config.cpu_isa, config.cpu_kernels,
                               weight_dtype=config.weight_dtype, quantized_checkpoint=gguf is not None,
                               quant_activations=config.quant_activations)
    # The blocks are read (~the file's size) only when the plan keeps them, not when it widens or
    # quantizes at load (weight_dtype=q8_0 / q4_0 requantize the loaded weights instead).
    keeps_file_blocks = plan.reads_file_blocks
    quantized = GgufLinears.read(gguf) if gguf is not None and keeps_file_blocks else None
    if keeps_file_blocks and not (quantized and quantized.tensors):  # a GGUF without quantized linears
        plan = ComputePlan.resolve(device, config.dtype, config.cpu_isa, config.cpu_kernels,
                                   weight_dtype=config.weight_dtype, quantized_checkpoint=False,
                                   quant_activations=config.quant_activations)
    logger.info("%s", plan.describe())
    dtype = plan.activations
    registry = build_registry("torch", extra_models_dir=config.extra_models_dir,
                              builtin=config.builtin_models)
    loaded = load_model(model_dir, plan, registry, quantized)
    spec, caps = loaded.spec, loaded.capabilities
    per_token = PagedKVCacheConfig.bytes_per_token(spec.num_layers, spec.num_kv_heads, spec.head_dim, dtype)
    caps.log_undeclared(loaded.architecture)
    auto_kv = config.num_kv_blocks is None and config.kv_cache_memory_bytes is None
    config = config.resolve_for_model(spec.max_position_embeddings, per_token,
                                      caps.prefix_caching, caps.chunked_prefill)
    if config.max_prefill_tokens is None:
        default = TorchDevice.for_device(device).max_prefill_tokens
        config = dataclasses.replace(config, max_prefill_tokens=default)
    if config.async_scheduling and not caps.async_decode:
        raise ValueError(f"async_scheduling=true, but {loaded.architecture} does not support async decode")
    lanes = config.data_parallel_size
    check_lanes(loaded.architecture, caps, lanes)
    if lanes > 1:
        logger.info("topology: %d in-process lanes x %d sequences, one forward per step for all lanes "
                    "(%s declares single-execute)", lanes, config.max_num_seqs, loaded.architecture)

    def runner_for(c: EngineConfig) -> ModelRunner:
        return build_runner(c, loaded.module, caps, spec, dtype, device)

    runner = runner_for(config)
    if auto_kv:  # the late, shrink-only capacity step, now that the weights are resident
        cap = TorchDevice.for_device(device).auto_kv_cache_cap
        sizing = size_kv_cache(config, per_token * config.block_size, device, runner_for, cap)
        logger.info("%s", sizing.describe(config, per_token * config.block_size))
        config = dataclasses.replace(config, num_kv_blocks=sizing.blocks_per_lane)
        runner.configure_capacity(lanes * sizing.blocks_per_lane)
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    logger.info("engine: %s (%s) from %s on %s in %s; max_model_len=%d, %d lane(s) of %d KV blocks of %d, "
                "prefix caching %s, max_prefill_tokens=%s, trace_mode=%s, async_scheduling=%s, "
                "sample_on_device_mode=%s%s",
                loaded.architecture, type(loaded.module).__qualname__, model_dir, device, plan.dtype_name,
                config.max_model_len, lanes, config.num_kv_blocks, config.block_size,
                "on" if config.enable_prefix_caching else "off",
                config.max_prefill_tokens or config.max_num_batched_tokens, runner.trace.mode,
                config.async_scheduling,
                config.sample_on_device_mode,
                " (always_compat_sampling)" if config.always_compat_sampling else "")
    try:
        runner.allocate()
        runner.warmup()
    except BaseException:
        runner.close()
        raise
    return finish_engine(config, runner, model_dir, spec.vocab_size, caps.takes_images,
                         caps.bidirectional_images, getattr(loaded.module, "cross_tokens_per_tile", 0))


def build_runner(config: EngineConfig, module: torch.nn.Module, caps: ModelCapabilities,
                 spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> ModelRunner:
    """The runner of one merged batch over every lane (each lane's blocks are a contiguous region
    of one physical cache); its KV cache is not allocated yet (capacity may still shrink)."""
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    lanes = config.data_parallel_size
    num_blocks = lanes * config.num_kv_blocks
    layout = PageTableLayout.resolve(config.block_size, config.max_model_len, num_blocks, lanes)
    kv = PagedKVCacheConfig(spec.num_layers, num_blocks, config.block_size, spec.num_kv_heads, spec.head_dim,
                            dtype)
    torch_device = TorchDevice.for_device(device)
    if config.async_scheduling:  # every step and its host sampling on the thread decode runs ahead on
        torch_device.start_device_thread()
    dense = torch_device.dense_prefill_shapes
    plan = PrefillPlanConfig.resolve(caps.batched_prefill, caps.max_prefill_batch,
                                     config.total_num_seqs, config.max_num_batched_tokens,
                                     DENSE_BATCHES if dense else PHYSICAL_BATCHES,
                                     batching_disabled=config.disable_batched_prefill, fine_lengths=dense)
    trace = TraceConfig.resolve(config.trace_mode, torch_device.default_trace_mode)
    return ModelRunner(module, kv, layout, torch_device, trace,
                       DecodeRuntimeConfig.resolve(layout, config.total_num_seqs),
                       PrefillRuntimeConfig.resolve(layout, plan, config.max_num_batched_tokens),
                       SamplingConfig.resolve(config.sample_on_device_mode, config.always_compat_sampling))
