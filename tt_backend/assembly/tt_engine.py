"""The engine over a tt-metal generator on a Tenstorrent mesh (the load itself is
tt_backend/models/tt_loader.py): a lane per data-parallel submesh, one generator call per step for
all of them, tokens sampled on the host."""

from __future__ import annotations

import logging

from tt_backend.assembly.finish import finish_engine
from tt_backend.config import EngineConfig
from tt_backend.contract.modes import TraceMode
from tt_backend.devices.tt.generator import TTCallForms
from tt_backend.engine.engine import LLMEngine
from tt_backend.models.tt_loader import TTLoadedModel, load_tt_model
from tt_backend.runtime.config import TraceConfig
from tt_backend.runtime.generator_runner import GeneratorRunner

logger = logging.getLogger(__name__)


def build_tt_engine(config: EngineConfig) -> LLMEngine:
    if config.async_scheduling:
        raise ValueError("async_scheduling=true on device=tt: the generator runner reads every step's "
                         "outputs before the next (no async decode yet)")
    loaded = load_tt_model(config)
    try:
        runner = _runner_over(loaded)
    except BaseException:
        loaded.close()
        raise
    return finish_engine(loaded.config, runner, loaded.model_dir, loaded.hf_config.vocab_size)


def _runner_over(loaded: TTLoadedModel) -> GeneratorRunner:
    config = loaded.config
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    trace = TraceConfig.resolve(config.trace_mode, loaded.mesh.default_trace_mode)
    calls = loaded.traits.calls
    trace = _warmed_traces(trace, calls, type(loaded.generator).__qualname__)
    if trace.decode and config.trace_region_size == 0:
        raise ValueError(f"trace_mode={trace.mode.value} captures ttnn traces, but trace_region_size=0 "
                         "leaves them no room; set trace_region_size (bytes, e.g. 50000000) or "
                         "trace_mode=none")
    runner = GeneratorRunner(loaded.mesh.ttnn, loaded.generator, loaded.kv,
                             blocks_per_lane=config.num_kv_blocks,
                             table_width=-(-config.max_model_len // config.block_size),
                             decode_capacity=config.max_num_seqs, trace=trace, calls=calls,
                             batched_prefill=not config.disable_batched_prefill,
                             close_device=loaded.mesh.close)
    caps = loaded.capabilities
    logger.info("engine: %s on a %dx%d Tenstorrent mesh, %d lane(s); max_model_len=%d, %d KV blocks of %d "
                "(%s) per lane, decode capacity %d per lane, prefix caching %s, chunked prefill %s, prefill "
                "trace %s, decode trace %s, prefill batching %s",
                loaded.architecture, *loaded.mesh.shape, runner.lanes, config.max_model_len,
                config.num_kv_blocks, config.block_size, runner.cache_dtype, runner.decode_capacity,
                _on(config.enable_prefix_caching), _on(config.enable_chunked_prefill), _on(trace.prefill),
                _on(trace.decode), _on(runner.batched_prefill))
    logger.info("sampling: on the host for every batch (sample_on_device_mode=%s has no effect on device=tt "
                "yet; the generator %s supports_sample_on_device)", config.sample_on_device_mode.value,
                "declares" if caps.device_sampling else "does not declare")
    runner.warmup()
    return runner


def _warmed_traces(trace: TraceConfig, calls: TTCallForms, name: str) -> TraceConfig:
    """Trace only what the generator's warmup captures before serving: a step traced without its
    warmup hook would capture while serving (over programs compiled mid-capture)."""
    if trace.decode and not calls.warms_up_decode:
        logger.info("tt: decode and prefill run eager: %s has no warmup_model_decode", name)
        return TraceConfig(TraceMode.NONE)
    if trace.prefill and not calls.warms_up_prefill:
        logger.info("tt: prefill runs eager: %s has no warmup_model_prefill", name)
        return TraceConfig(TraceMode.DECODE_ONLY)
    return trace


def _on(flag: bool | None) -> str:
    return "on" if flag else "off"
