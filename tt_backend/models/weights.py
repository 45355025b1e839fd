"""Weight loading from HF safetensors directories (single file or sharded with an index)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file


def load_safetensors(model_dir: Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint in `model_dir`, cast to `dtype`."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = [p.name for p in sorted(model_dir.glob("*.safetensors"))]
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        for key, value in load_file(str(model_dir / name)).items():
            tensors[key] = value.to(dtype) if value.is_floating_point() else value
    return tensors
