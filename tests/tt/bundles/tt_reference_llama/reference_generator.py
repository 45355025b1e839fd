"""A reference tt-metal generator for the tests: the class methods and return contracts of
tt-metal's `models.tt_transformers.tt.generator_vllm.LlamaForCausalLM`, with the mesh, its
submeshes and the paged KV cache real ttnn objects on the (mock) device, and the numbers computed
by our torch Llama on the host (a mock device's read-backs are all zeros, so any token a test
compares comes from this host compute, not from the device).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import ttnn

from tt_backend.devices.compute_plan import ComputePlan
from tt_backend.devices.tt_kv_layout import TTKVGeometry, allocate_layer_caches
from tt_backend.mesh_options import submesh_shape
from tt_backend.models.loader import load_model


def create_submeshes(mesh_device: Any, data_parallel: int) -> list[Any]:
    """Split the mesh into `data_parallel` equal submeshes (the mesh itself for one)."""
    if data_parallel == 1:
        return [mesh_device]
    rows, cols = submesh_shape(tuple(mesh_device.shape), data_parallel)  # type: ignore[arg-type]
    return list(mesh_device.create_submeshes(ttnn.MeshShape(rows, cols)))


class TTLlamaForCausalLM:
    model_capabilities = {"supports_prefix_caching": True}

    def __init__(self, host_model: torch.nn.Module, submeshes: list[Any], mesh_device: Any,
                 max_batch_size: int, max_seq_len: int) -> None:
        self.host_model = host_model
        self.submeshes = submeshes
        self.mesh_device = mesh_device
        self.max_batch_size = max_batch_size
        self.max_seq_len = max_seq_len

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                              n_layers: int | None = None, tt_data_parallel: int = 1,
                              optimizations: str = "performance") -> TTLlamaForCausalLM:
        submeshes = create_submeshes(mesh_device, tt_data_parallel)
        plan = ComputePlan.resolve(torch.device("cpu"), "float32", "auto", "torch")
        loaded = load_model(Path(hf_config._name_or_path), plan)
        return cls(loaded.module, submeshes, mesh_device, max_batch_size // tt_data_parallel, max_seq_len)

    def allocate_kv_cache(self, kv_cache_shape: tuple[int, int, int, int], dtype: torch.dtype,
                          num_layers: int) -> list[list[list[Any]]]:
        """Per submesh, per layer, [K, V] of `kv_cache_shape` in TILE layout, bfloat8_b, in DRAM."""
        blocks, heads, block_size, head_dim = kv_cache_shape
        geometry = TTKVGeometry(num_layers, blocks, heads, block_size, head_dim)
        return [allocate_layer_caches(ttnn, submesh, geometry) for submesh in self.submeshes]
