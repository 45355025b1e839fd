"""The engine over a tt-metal generator on a Tenstorrent mesh (the load itself is
tt_backend/models/tt_loader.py): a lane per data-parallel submesh, one generator call per step for
all of them, tokens sampled on the host."""

from __future__ import annotations

import logging

from tt_backend.assembly.finish import finish_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.engine import LLMEngine
from tt_backend.models.tt_capabilities import takes_empty_slots, takes_start_pos
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
    cls = type(loaded.generator)
    runner = GeneratorRunner(loaded.mesh.ttnn, loaded.generator, loaded.kv,
                             blocks_per_lane=config.num_kv_blocks,
                             table_width=-(-config.max_model_len // config.block_size),
                             decode_capacity=config.max_num_seqs, enable_trace=trace.decode,
                             takes_start_pos=takes_start_pos(cls), takes_empty_slots=takes_empty_slots(cls),
                             close_device=loaded.mesh.close)
    logger.info("engine: %s on a %dx%d Tenstorrent mesh, %d lane(s); max_model_len=%d, %d KV blocks of %d "
                "(%s) per lane, decode capacity %d per lane, prefix caching %s, decode trace %s, host "
                "sampling",
                loaded.architecture, *loaded.mesh.shape, runner.lanes, config.max_model_len,
                config.num_kv_blocks, config.block_size, runner.cache_dtype, runner.decode_capacity,
                "on" if config.enable_prefix_caching else "off", "on" if trace.decode else "off")
    runner.warmup()
    return runner
