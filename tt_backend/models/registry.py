"""Architecture registry: the HF `architectures` name of a checkpoint → our implementation."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tt_backend.models.capabilities import TORCH_LLAMA, ModelCapabilities
from tt_backend.models.llama import LlamaConfig, LlamaForCausalLM
from tt_backend.models.weights import load_safetensors

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    module: nn.Module
    config: LlamaConfig
    architecture: str
    capabilities: ModelCapabilities


def _build_llama(hf_config: dict) -> tuple[nn.Module, LlamaConfig]:
    cfg = LlamaConfig.from_hf(hf_config)
    return LlamaForCausalLM(cfg), cfg


ARCHITECTURES: dict[str, Callable[[dict], tuple[nn.Module, LlamaConfig]]] = {
    "LlamaForCausalLM": _build_llama,
}


def read_hf_config(model_dir: Path) -> dict:
    with open(model_dir / "config.json", encoding="utf-8") as f:
        return json.load(f)


def load_model(model_dir: Path, dtype: torch.dtype, device: torch.device) -> LoadedModel:
    """Build the implementation for the checkpoint's architecture and load its weights."""
    hf_config = read_hf_config(model_dir)
    archs = hf_config.get("architectures") or []
    arch = next((a for a in archs if a in ARCHITECTURES), None)
    if arch is None:
        raise ValueError(f"architectures={archs} in {model_dir} are not supported; "
                         f"known: {', '.join(sorted(ARCHITECTURES))}")
    with torch.device("meta"):
        module, cfg = ARCHITECTURES[arch](hf_config)
    state = load_safetensors(model_dir, dtype)
    if cfg.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    module.load_state_dict(state, strict=True, assign=True)
    module.to(device).eval().requires_grad_(False)
    return LoadedModel(module=module, config=cfg, architecture=arch, capabilities=TORCH_LLAMA)
