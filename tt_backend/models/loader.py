"""Build the registered implementation for a checkpoint and load its weights."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tt_backend.config import AttentionBackendName
from tt_backend.devices.cpu_kernels import load_kernels
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
               attention: AttentionBackendName = "auto") -> LoadedModel:
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
    if can_pack(device, dtype):
        pack_linears(module)  # oneDNN's blocked weight layout: faster bf16 matmuls on CPU
    select_attention(module, device, attention)
    return LoadedModel(module, spec, entry.arch, cls.capabilities)  # type: ignore[attr-defined]


def select_attention(module: nn.Module, device: torch.device, attention: AttentionBackendName) -> None:
    """Switch the model's decode attention to the native paged kernel where `attention` asks for it
    and it is available; `native` fails when it is not, `auto` keeps the portable path."""
    if attention == "torch":
        return
    use_native = getattr(module, "use_native_decode_attention", None)
    if device.type != "cpu" or use_native is None:
        where = f"device {device.type}" if device.type != "cpu" else f"{type(module).__name__}"
        if attention == "native":
            raise ValueError(f"attention_backend=native: the native kernel serves CPU Llama-family models, "
                             f"not {where}")
        return
    error = load_kernels()
    if error is not None:
        if attention == "native":
            raise ValueError(f"attention_backend=native: the native CPU kernel is unavailable ({error})")
        logger.warning("native CPU decode attention unavailable, using gather + SDPA: %s", error)
        return
    use_native()
