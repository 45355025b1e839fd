"""The torch device: CPU by default, CUDA when present (or asked for)."""

from __future__ import annotations

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def select_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device")
    return torch.device(name)


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name]
