"""The engine over a tt-metal generator on a Tenstorrent mesh (the load itself is
tt_backend/models/tt_loader.py): a lane per data-parallel submesh, one generator call per step for
all of them, tokens sampled on the device where the generator declares it (per batch: the host
when a row needs it), and decode run ahead of the host where it declares async decode."""

from __future__ import annotations

import logging

from tt_backend.assembly.finish import finish_engine
from tt_backend.config import EngineConfig
from tt_backend.contract.modes import StepMode, TraceMode
from tt_backend.devices.tt.generator import TTCallForms
from tt_backend.engine.engine import LLMEngine
from tt_backend.models.tt_capabilities import text_config
from tt_backend.models.tt_loader import TTLoadedModel, load_tt_model
from tt_backend.runtime.config import SamplingConfig, TraceConfig
from tt_backend.runtime.generator_runner import GeneratorRunner
from tt_backend.runtime.generator_sampling import TT_MAX_TOP_K

logger = logging.getLogger(__name__)


def build_tt_engine(config: EngineConfig) -> LLMEngine:
    loaded = load_tt_model(config)
    try:
        per_tile, max_images = _cross_images(loaded) if loaded.traits.calls.cross_attention else (0, None)
        runner = _runner_over(loaded)
    except BaseException:
        loaded.close()
        raise
    return finish_engine(loaded.config, runner, loaded.model_dir, text_config(loaded.hf_config).vocab_size,
                         loaded.capabilities.takes_images, cross_tokens_per_tile=per_tile,
                         max_images=max_images)


MLLAMA_IMAGE_TOKEN_ID = 128256
"""tt-metal's MllamaForConditionalGeneration finds a row's image by this id, hard-coded."""


def _cross_images(loaded: TTLoadedModel) -> tuple[int, int]:
    """(an image tile's tokens in the cross-attention KV, the most images a request may bring) for
    tt-metal's Mllama generator: its max_cross_attn_tokens over the tower's max_num_tiles (tiles of
    nearest_32 of their tokens, the padding tiles too), and one image (it asserts one a row)."""
    name = type(loaded.generator).__qualname__
    token = getattr(loaded.hf_config, "image_token_index", None)
    if token != MLLAMA_IMAGE_TOKEN_ID:
        raise ValueError(f"{name} finds a row's image by the token id {MLLAMA_IMAGE_TOKEN_ID} (tt-metal "
                         f"hard-codes it), but this checkpoint's image_token_index is {token}")
    tiles = int(loaded.hf_config.vision_config.max_num_tiles)
    tokens = int(getattr(loaded.generator, "max_cross_attn_tokens", 0))
    if tokens <= 0 or tokens % tiles:
        raise ValueError(f"{name}.max_cross_attn_tokens={tokens} is not a whole number of tokens for each of "
                         f"its {tiles} tiles")
    logger.info("tt: %s reads one image a request by cross-attention: %d tokens of cross-attention KV an "
                "image (%d tiles), in the request's own blocks", name, tokens, tiles)
    return tokens // tiles, 1


def _runner_over(loaded: TTLoadedModel) -> GeneratorRunner:
    config = loaded.config
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    trace = TraceConfig.resolve(config.trace_mode, loaded.mesh.default_trace_mode)
    calls = loaded.traits.calls
    name = type(loaded.generator).__qualname__
    trace = _warmed_traces(trace, calls, name)
    if trace.decode and config.trace_region_size == 0:
        raise ValueError(f"trace_mode={trace.mode.value} captures ttnn traces, but trace_region_size=0 "
                         "leaves them no room; set trace_region_size (bytes, e.g. 50000000) or "
                         "trace_mode=none")
    caps = loaded.capabilities
    if config.async_scheduling:
        _check_async(name, caps.async_decode, caps.device_sampling, calls.async_read)
    sampling = _sampling(config, name, caps.device_sampling)
    runner = GeneratorRunner(loaded.mesh.ttnn, loaded.generator, loaded.kv,
                             blocks_per_lane=config.num_kv_blocks,
                             table_width=-(-config.max_model_len // config.block_size),
                             decode_capacity=config.max_num_seqs, trace=trace, calls=calls,
                             batched_prefill=not config.disable_batched_prefill,
                             close_device=loaded.mesh.close, sampling=sampling)
    logger.info("engine: %s on a %dx%d Tenstorrent mesh, %d lane(s); max_model_len=%d, %d KV blocks of %d "
                "(%s) per lane, decode capacity %d per lane, prefix caching %s, chunked prefill %s, prefill "
                "trace %s, decode trace %s, prefill batching %s, async decode %s",
                loaded.architecture, *loaded.mesh.shape, runner.lanes, config.max_model_len,
                config.num_kv_blocks, config.block_size, runner.cache_dtype, runner.decode_capacity,
                _on(config.enable_prefix_caching), _on(config.enable_chunked_prefill), _on(trace.prefill),
                _on(trace.decode), _on(runner.batched_prefill), _on(config.async_scheduling))
    runner.warmup()
    return runner


def _check_async(name: str, async_decode: bool, device_sampling: bool, async_read: bool) -> None:
    """async_scheduling on device=tt needs the generator's async decode (the deferred read) and its
    device sampling (a step's input tokens are the previous step's sampled ones)."""
    missing = [key for key, declared in (("supports_async_decode", async_decode and async_read),
                                         ("supports_sample_on_device", device_sampling)) if not declared]
    if missing:
        raise ValueError(f"async_scheduling=true on device=tt, but the generator {name} does not declare "
                         f"{' or '.join(missing)} (its model_capabilities); set async_scheduling=false")


def _sampling(config: EngineConfig, name: str, declared: bool) -> SamplingConfig:
    """Device sampling where the generator declares it, within tt-metal's sampler's limits."""
    if not declared:
        logger.info("sampling: prefill on the host, decode on the host (the generator %s does not declare "
                    "supports_sample_on_device; sample_on_device_mode=%s has no effect)", name,
                    config.sample_on_device_mode.value)
        return SamplingConfig.resolve("none", always_compat=True)
    sampling = SamplingConfig.resolve(config.sample_on_device_mode.value, config.always_compat_sampling,
                                      device_max_top_k=TT_MAX_TOP_K, device_min_p=False)
    where = {op: "on the device" if sampling.on_device(op) else "on the host"
             for op in (StepMode.PREFILL, StepMode.DECODE)}
    logger.info("sampling: prefill %s, decode %s (sample_on_device_mode=%s%s); a batch samples on the host "
                "for that step when a row asks for logprobs, penalties, logit bias, allowed or bad words, a "
                "grammar, min_tokens, min_p or a top_k of 0 or above %d (tt-metal's sampler's limit)",
                where[StepMode.PREFILL], where[StepMode.DECODE], config.sample_on_device_mode.value,
                ", always_compat_sampling" if config.always_compat_sampling else "", TT_MAX_TOP_K)
    if sampling.on_device(StepMode.DECODE) and not sampling.on_device(StepMode.PREFILL):
        logger.warning("sampling: with prefill on the host, seeds do not reach tt-metal's sampler (it seeds "
                       "a slot at a device-sampled prefill): seeded requests are not reproducible on the "
                       "device; use sample_on_device_mode=all")
    return sampling


def _warmed_traces(trace: TraceConfig, calls: TTCallForms, name: str) -> TraceConfig:
    """Trace only what the generator's warmup captures before serving: a step traced without its
    warmup hook would capture while serving (over programs compiled mid-capture)."""
    if trace.decode and not calls.warms_up_decode:
        logger.info("tt: decode and prefill run eager: %s has no warmup_model_decode this runner calls", name)
        return TraceConfig(TraceMode.NONE)
    if trace.prefill and not calls.warms_up_prefill:
        logger.info("tt: prefill runs eager: %s has no warmup_model_prefill", name)
        return TraceConfig(TraceMode.DECODE_ONLY)
    return trace


def _on(flag: bool | None) -> str:
    return "on" if flag else "off"
