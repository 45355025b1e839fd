"""The Tenstorrent load: registry (TT<Arch>) → mesh → tt-metal generator → KV cache.

    config ─▶ TT registry (builtins: tt-metal's generator_vllm classes; bundles: EXTRA_MODELS_DIR)
           ─▶ generator capabilities ─▶ config resolved for the model (KV sized in bfloat8_b)
           ─▶ TTMesh.open (MESH_DEVICE, fabric, L1/trace sizes, dispatch axis, command queues)
           ─▶ Generator.initialize_vllm_model(hf_config, mesh, max_batch, max_seq_len, tt_data_parallel)
           ─▶ Generator.allocate_kv_cache(kv_cache_shape, dtype, num_layers), held by TTPagedKVCache

Anything failing after the mesh opened closes it again (KV cache first, then the mesh in its
order), so a failed load leaves no device open and the fabric reset. The engine over the loaded
model is assembled in `tt_backend/assembly/tt_engine.py`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tt_backend.config import EngineConfig, check_tt_block_size
from tt_backend.devices.cleanup import CleanupError, CleanupLog
from tt_backend.devices.tt.generator import LoadableTTGenerator
from tt_backend.devices.tt.kv_cache import TTPagedKVCache
from tt_backend.devices.tt.kv_layout import TTKVGeometry, deallocate_layer_caches
from tt_backend.devices.tt.mesh import TTMesh, import_ttnn
from tt_backend.mesh_options import MeshOptions
from tt_backend.models.capabilities import ModelCapabilities, check_lanes
from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.models.registry import build_registry
from tt_backend.models.tt_capabilities import generator_capabilities, takes_empty_slots

logger = logging.getLogger(__name__)

TT_AUTO_KV_BYTES = 1 << 30
"""kv_cache_memory_bytes=auto on a Tenstorrent device: its free DRAM after the generator loads is
not measured yet (ttnn's mock devices report none), so auto keeps this fixed budget."""


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
    capabilities: ModelCapabilities
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


def hf_model_config(model_dir: Path) -> Any:
    """transformers' config of the checkpoint, as tt-metal's generators take it (`_name_or_path`
    is the checkpoint folder)."""
    from transformers import AutoConfig
    return AutoConfig.from_pretrained(str(model_dir))


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
    caps = generator_capabilities(cls, config.max_num_seqs)
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    per_token = TTKVGeometry.bytes_per_token(hf.num_hidden_layers, hf.num_key_value_heads, head_dim)
    if config.kv_cache_memory_bytes is None and config.num_kv_blocks is None:
        logger.info("tt: kv_cache_memory_bytes=auto takes %d MiB (device DRAM is not measured yet)",
                    TT_AUTO_KV_BYTES >> 20)
        config = dataclasses.replace(config, kv_cache_memory_bytes=TT_AUTO_KV_BYTES)
    config = config.resolve_for_model(hf.max_position_embeddings, per_token, caps.prefix_caching,
                                      caps.chunked_prefill)
    check_lanes(entry.arch, caps, lanes)
    if lanes > 1 and not takes_empty_slots(cls):
        raise ValueError(f"data_parallel_size={lanes}: the prefill_forward of {entry.arch} takes no "
                         "empty_slots, so a prompt cannot be sent to its lane's submesh; serve it as one "
                         "lane per Triton model instance")
    assert config.num_kv_blocks is not None and config.max_model_len is not None
    # One more block per lane: the padding sink no request is given.
    geometry = TTKVGeometry(hf.num_hidden_layers, config.num_kv_blocks + 1, hf.num_key_value_heads,
                            config.block_size, head_dim)
    options = config.mesh_options(MeshOptions.shape_from(config.mesh_device))
    mesh = TTMesh.open(options)
    kv = TTPagedKVCache(geometry, lanes, lambda region: deallocate_layer_caches(ttnn, region))
    try:
        # tt_data_parallel only when there are lanes: a generator without it runs one lane
        extra = {"tt_data_parallel": lanes} if lanes > 1 else {}
        generator = cls.initialize_vllm_model(hf, mesh.mesh, config.total_num_seqs, config.max_model_len,
                                              **extra)
        kv.allocate(lambda: list(generator.allocate_kv_cache(geometry.shape, torch.bfloat16,
                                                             geometry.num_layers)))
    except BaseException:
        kv.release()
        mesh.close()
        raise
    logger.info("tt: %s (%s) on a %dx%d mesh, %d lane(s) of %d sequences, %d KV blocks of %d per lane",
                entry.arch, cls.__qualname__, *mesh.shape, lanes, config.max_num_seqs, config.num_kv_blocks,
                config.block_size)
    return TTLoadedModel(config, entry.arch, model_dir, hf, generator, caps, mesh, kv, CleanupLog())
