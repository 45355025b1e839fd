"""Build the registered implementation for a checkpoint and load its weights."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.linears import convert_linears
from tt_backend.devices.cpu.logits import use_fp32_logits
from tt_backend.models.capabilities import ModelCapabilities
from tt_backend.models.gguf_linears import GgufLinears, use_quantized_layers
from tt_backend.models.llama_ops import NativeKernelModel
from tt_backend.models.quantize_at_load import quantize_at_load
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


def load_model(model_dir: Path, plan: ComputePlan, registry: ModelRegistry | None = None,
               quantized: GgufLinears | None = None) -> LoadedModel:
    """The checkpoint's registered implementation with its weights, laid out as `plan` says;
    `registry` None: the builtin torch implementations only. `quantized` (with `plan.reads_file_blocks`):
    the GGUF's blocks that the linear layers they match compute on; `plan.quantize_to`: the linear
    layers are quantized to it at load instead."""
    hf_config = read_hf_config(model_dir)
    registry = registry or build_registry("torch", extra_models_dir="", builtin=True)
    entry = registry.find(hf_config.get("architectures") or [])
    cls = entry.resolve()
    with torch.device("meta"):
        module = cls.from_hf_config(hf_config)  # type: ignore[attr-defined]
    spec: ModelSpec = module.spec
    state = load_safetensors(model_dir, plan.activations)
    rename = getattr(cls, "checkpoint_names", None)  # a model whose checkpoints name parts otherwise
    if rename is not None:
        state = rename(state)
    if spec.tie_word_embeddings:
        head, embedding = getattr(cls, "tied_weights", ("lm_head.weight", "model.embed_tokens.weight"))
        state[head] = state[embedding]
    module.load_state_dict(state, strict=True, assign=True)
    module.to(plan.device).eval().requires_grad_(False)
    select_kernels(module, plan)
    if plan.quantize_to is not None:
        logger.info("%s", "\n".join(quantize_at_load(module, plan, model_dir.name)))
    elif plan.reads_file_blocks and quantized is not None:
        logger.info("%s", "\n".join(use_quantized_layers(module, quantized, plan)))
    if plan.fp32_logits:
        use_fp32_logits(module, plan)
    convert_linears(module, plan)
    return LoadedModel(module, spec, entry.arch, cls.capabilities)  # type: ignore[attr-defined]


def select_kernels(module: nn.Module, plan: ComputePlan) -> bool:
    """Switch the model to the plan's native CPU kernels when it has them and the model can run
    on them (a `NativeKernelModel`); returns whether it does."""
    if not isinstance(module, NativeKernelModel):
        if plan.native_required:
            raise ValueError(f"cpu_kernels=native: the native kernels serve Llama-family models on the CPU, "
                             f"not {type(module).__name__}")
        return False
    if plan.kernels is None:
        return False
    module.use_native_kernels(plan.kernels, plan.activations)
    return True
