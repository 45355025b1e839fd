"""The Tenstorrent load: registry (TT<Arch>) → mesh → tt-metal generator → KV cache.

    config ─▶ TT registry (builtins: tt-metal's generator_vllm classes; bundles: EXTRA_MODELS_DIR)
           ─▶ generator traits (model_capabilities, then signatures; models/tt_capabilities.py)
           ─▶ the mesh it will open (MESH_DEVICE or every chip) ─▶ KV heads per chip
           ─▶ config resolved for the model (KV blocks from num_kv_blocks, a per-chip
              kv_cache_memory_bytes, or the generator's get_max_tokens_all_users)
           ─▶ HF_MODEL set for tt-metal's ModelArgs ─▶ TTMesh.open (fabric, L1/trace sizes, ...)
           ─▶ Generator.initialize_vllm_model(hf_config, mesh, max_batch, max_seq_len, tt_data_parallel)
           ─▶ Generator.allocate_kv_cache(per-chip kv_cache_shape, dtype, num_layers), held by TTPagedKVCache

Anything failing after the mesh opened closes it again (KV cache first, then the generator, then
the mesh in its order), so a failed load leaves no device open and the fabric reset. The engine
over the loaded model is assembled in `tt_backend/assembly/tt_engine.py`.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tt_backend.config import EngineConfig, check_tt_block_size
from tt_backend.devices.cleanup import CleanupError, CleanupLog
from tt_backend.devices.tt.generator import LoadableTTGenerator
from tt_backend.devices.tt.kv_cache import TTPagedKVCache
from tt_backend.devices.tt.kv_layout import TTKVGeometry, deallocate_layer_caches
from tt_backend.devices.tt.mesh import TTMesh, check_decode_batch, import_ttnn, planned_shape
from tt_backend.mesh_options import MeshOptions, submesh_shape
from tt_backend.models.capabilities import ModelCapabilities, check_lanes, instance_hint
from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.models.registry import TT_IMAGES_UNREACHABLE, build_registry
from tt_backend.models.tt_capabilities import TTGeneratorTraits, generator_traits, text_config, without_images

logger = logging.getLogger(__name__)

FALLBACK_MAX_TOKENS_ALL_USERS = 131_072
"""kv_cache_memory_bytes=auto on a Tenstorrent device, for a generator class without
`get_max_tokens_all_users`: the tokens every user of a lane may hold together (tt-metal's
FALLBACK_MAX_TOKENS_ALL_USERS, models/common/model_capabilities.py; the plugin's
get_num_available_blocks_tt)."""


@dataclass
class TTLoadedModel:
    """An open mesh with its generator and the generator's KV cache; `close` releases them."""

    config: EngineConfig
    """Resolved for the model (max_model_len, num_kv_blocks per lane)."""
    architecture: str
    model_dir: Path
    hf_config: Any
    """transformers' config of the checkpoint (what the generator was initialized with)."""
    generator: LoadableTTGenerator
    traits: TTGeneratorTraits
    mesh: TTMesh
    kv: TTPagedKVCache
    cleanup_log: CleanupLog

    def close(self) -> None:
        """KV cache, then the mesh (submeshes, mesh, fabric). Idempotent."""
        log = self.cleanup_log
        log.retry_orphans()
        if not log.events:
            log.release("kv_cache", self.kv.release)
            log.release("device", self.mesh.close)
        if log.orphans:
            raise CleanupError(list(log.orphans))

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.traits.capabilities


def hf_model_config(model_dir: Path) -> Any:
    """transformers' config of the checkpoint, as tt-metal's generators take it (`_name_or_path`
    is the checkpoint folder)."""
    from transformers import AutoConfig
    return AutoConfig.from_pretrained(str(model_dir))


def kv_heads_per_chip(num_kv_heads: int, chips_per_lane: int) -> int:
    """The KV heads each chip holds: tt-metal replicates the shape `allocate_kv_cache` is given to
    every chip of a submesh and splits the heads over them, so the shape carries a chip's share
    (the plugin's `_kv_cache_shape`: num_kv_heads // min(chips per submesh, num_kv_heads))."""
    return num_kv_heads // min(chips_per_lane, num_kv_heads)


def tt_kv_blocks(config: EngineConfig, cls: Any, chip_bytes_per_token: int, chips: int) -> int | None:
    """Blocks per lane when num_kv_blocks is unset: kv_cache_memory_bytes is each chip's budget
    (every chip of a lane holds its share of every block); auto asks the generator class
    (`get_max_tokens_all_users`, the plugin's rule, plus a block per sequence of slack), else
    tt-metal's fallback of 131072 tokens."""
    if config.num_kv_blocks is not None:
        return config.num_kv_blocks
    if config.kv_cache_memory_bytes is not None:
        return max(1, config.kv_cache_memory_bytes // (chip_bytes_per_token * config.block_size))
    tokens = FALLBACK_MAX_TOKENS_ALL_USERS
    source = "tt-metal's fallback"
    ask = getattr(cls, "get_max_tokens_all_users", None)
    if ask is not None:
        tokens = int(ask(model_name=config.model, num_devices=chips,
                         tt_data_parallel=config.data_parallel_size, max_model_len=config.max_model_len,
                         max_num_seqs=config.max_num_seqs))
        source = f"{cls.__qualname__}.get_max_tokens_all_users"
    blocks = -(-(tokens + config.block_size * config.max_num_seqs) // config.block_size)
    logger.info("tt: kv_cache_memory_bytes=auto: %d tokens per lane (%s) + a block per sequence = %d blocks",
                tokens, source, blocks)
    return blocks


def set_hf_model(model_dir: Path) -> None:
    """tt-metal's ModelArgs reads the checkpoint from the env HF_MODEL (and asserts on it): set it
    to the model being served, unless the user set it."""
    current = os.environ.get("HF_MODEL")
    if current is None:
        os.environ["HF_MODEL"] = str(model_dir)
    elif Path(current).resolve() != model_dir.resolve():
        logger.warning("tt: HF_MODEL=%s is set and differs from the model served (%s); tt-metal's ModelArgs "
                       "loads HF_MODEL's weights", current, model_dir)


def load_tt_model(config: EngineConfig) -> TTLoadedModel:
    ttnn = import_ttnn()  # fail first, and clearly, without ttnn
    check_tt_block_size(config.block_size)
    model_dir = resolve_model_dir(config.model)
    hf = hf_model_config(model_dir)
    registry = build_registry("tt", extra_models_dir=config.extra_models_dir, builtin=config.builtin_models)
    entry = registry.find(list(hf.architectures or []))
    try:
        cls: Any = entry.resolve()
    except ImportError as exc:
        raise ValueError(f"{entry.arch} resolves to {entry.class_path}, which does not import here ({exc}); "
                         "install tt-metal's models package, or add a bundle with extra_models_dir") from None
    lanes = config.data_parallel_size
    traits = generator_traits(cls, hf, config.max_num_seqs, config.block_size)
    if entry.arch in TT_IMAGES_UNREACHABLE and traits.capabilities.takes_images:
        logger.warning("tt: %s: images off: %s", entry.arch, TT_IMAGES_UNREACHABLE[entry.arch])
        traits = without_images(traits)
    caps = traits.capabilities
    check_lanes(entry.arch, caps, lanes)
    if lanes > 1 and not traits.calls.takes_empty_slots:
        raise ValueError(f"data_parallel_size={lanes}: the prefill_forward of {entry.arch} takes no "
                         "empty_slots, so a prompt cannot be sent to its lane's submesh; "
                         f"{instance_hint(lanes)}")
    options = config.mesh_options(MeshOptions.shape_from(config.mesh_device))
    rows, cols = planned_shape(ttnn, options)
    chips_per_lane = rows * cols // lanes
    check_decode_batch(config.max_num_seqs, submesh_shape((rows, cols), lanes))
    text = text_config(hf)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    heads = kv_heads_per_chip(text.num_key_value_heads, chips_per_lane)
    per_token = TTKVGeometry.bytes_per_token(text.num_hidden_layers, heads, head_dim)
    max_len = config.max_model_len or text.max_position_embeddings
    blocks = tt_kv_blocks(dataclasses.replace(config, max_model_len=max_len), cls, per_token, rows * cols)
    config = dataclasses.replace(config, num_kv_blocks=blocks).resolve_for_model(
        text.max_position_embeddings, per_token, caps.prefix_caching, caps.chunked_prefill)
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    # One more block per lane: the padding sink no request is given.
    geometry = TTKVGeometry(text.num_hidden_layers, config.num_kv_blocks + 1, heads, config.block_size,
                            head_dim)
    set_hf_model(model_dir)
    mesh = TTMesh.open(options)
    kv = TTPagedKVCache(geometry, lanes, lambda region: deallocate_layer_caches(ttnn, region))
    generator: Any = None
    try:
        # tt_data_parallel only when there are lanes: a generator without it runs one lane
        extra = {"tt_data_parallel": lanes} if lanes > 1 else {}
        generator = cls.initialize_vllm_model(hf, mesh.mesh, config.total_num_seqs, config.max_model_len,
                                              **extra)
        # tt-metal's Generator.__del__ closes its submeshes itself when data parallel (tt-metal #19052)
        mesh.submeshes_closed_by_generator = lanes > 1 and hasattr(type(generator), "__del__")
        kv.allocate(lambda: list(generator.allocate_kv_cache(geometry.shape, torch.bfloat16,
                                                             geometry.num_layers)))
    except BaseException:
        kv.release()
        del generator  # its __del__ (closing submeshes) before the mesh closes
        gc.collect()
        mesh.close()
        raise
    logger.info("tt: %s (%s) on a %dx%d mesh, %d lane(s) of %d sequences, %d KV blocks of %d per lane, %d of "
                "%d KV heads per chip", entry.arch, cls.__qualname__, *mesh.shape, lanes, config.max_num_seqs,
                config.num_kv_blocks, config.block_size, heads, text.num_key_value_heads)
    caps.log_undeclared(entry.arch)
    return TTLoadedModel(config, entry.arch, model_dir, hf, generator, traits, mesh, kv, CleanupLog())
