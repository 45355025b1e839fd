"""Build the registered implementation for a checkpoint and load its weights."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tt_backend.config import CpuKernelsName
from tt_backend.devices.cpu_kernels import load_kernels, tile_linear_supported
from tt_backend.devices.torch_linear import can_pack, pack_linears
from tt_backend.models.capabilities import ModelCapabilities
from tt_backend.models.registry import ModelRegistry, build_registry
from tt_backend.models.spec import ModelSpec
from tt_backend.models.weights import load_safetensors

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    module: nn.Module
    spec: ModelSpec
    architecture: str
    capabilities: ModelCapabilities


def read_hf_config(model_dir: Path) -> dict[str, Any]:
    with open(model_dir / "config.json", encoding="utf-8") as f:
        config: dict[str, Any] = json.load(f)
    return config


def load_model(model_dir: Path, dtype: torch.dtype, device: torch.device,
               registry: ModelRegistry | None = None,
               kernels: CpuKernelsName = "auto") -> LoadedModel:
    hf_config = read_hf_config(model_dir)
    entry = (registry or build_registry()).find(hf_config.get("architectures") or [])
    cls = entry.resolve()
    with torch.device("meta"):
        module = cls.from_hf_config(hf_config)  # type: ignore[attr-defined]
    spec: ModelSpec = module.spec
    state = load_safetensors(model_dir, dtype)
    if spec.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    module.load_state_dict(state, strict=True, assign=True)
    module.to(device).eval().requires_grad_(False)
    native = select_kernels(module, device, kernels)
    if can_pack(device, dtype):
        # oneDNN's blocked weight layout: faster bf16 matmuls on CPU; with AMX, tiles for decode.
        pack_linears(module, tiles=native and tile_linear_supported())
    return LoadedModel(module, spec, entry.arch, cls.capabilities)  # type: ignore[attr-defined]


def select_kernels(module: nn.Module, device: torch.device, kernels: CpuKernelsName) -> bool:
    """Switch the model to the native CPU kernels where `kernels` asks for them and they are
    available; `native` fails when they are not, `auto` keeps the torch path. Returns whether
    the model runs on them."""
    if kernels == "torch":
        return False
    use_native = getattr(module, "use_native_kernels", None)
    if device.type != "cpu" or use_native is None:
        where = f"device {device.type}" if device.type != "cpu" else type(module).__name__
        if kernels == "native":
            raise ValueError(f"cpu_kernels=native: the native kernels serve Llama-family models on the CPU, "
                             f"not {where}")
        return False
    error = load_kernels()
    if error is not None:
        if kernels == "native":
            raise ValueError(f"cpu_kernels=native: the native CPU kernels are unavailable ({error})")
        logger.warning("native CPU kernels unavailable, using torch ops: %s", error)
        return False
    use_native()
    return True
