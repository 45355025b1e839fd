"""Option values from strings and the checks config.py's options share: booleans, numbers, enums
and Literal choices parsed by the field's type hint, and the checks an option's value must pass
whichever way it was given."""

from __future__ import annotations

import enum
import os
import types
import typing
from typing import Any, Literal

from tt_backend.contract.modes import Named

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

TT_BLOCK_MULTIPLE = 32
"""A TT paged KV cache is TILE-laid (32x32 tiles over block_size x head_dim)."""


def batched_prefill_disabled_by_env() -> bool:
    return os.environ.get("DISABLE_BATCHED_PREFILL", "0") not in ("", "0")


def builtin_models_from_env() -> bool:
    return os.environ.get("TT_VLLM_BUILTIN_MODELS", "1") != "0"


def extra_models_dir_from_env() -> str:
    return os.environ.get("EXTRA_MODELS_DIR", "")


# Names users bring from vLLM that this backend refuses, with the reason shown to them.
REJECTED_OPTIONS: dict[str, str] = {
    "tensor_parallel_size": "tensor parallelism comes from the mesh shape; set MESH_DEVICE (the "
    "mesh_device option or the env MESH_DEVICE, e.g. N300, T3K or 1x8) instead of tensor_parallel_size",
    "pipeline_parallel_size": "pipeline parallelism comes from the mesh shape; set MESH_DEVICE (the "
    "mesh_device option or the env MESH_DEVICE, e.g. T3K or TG) instead of pipeline_parallel_size",
}


def check_tt_block_size(block_size: int) -> None:
    if block_size % TT_BLOCK_MULTIPLE:
        raise ValueError(f"block_size={block_size} on a Tenstorrent device: the paged KV cache is laid "
                         f"out in 32x32 tiles, so block_size must be a multiple of {TT_BLOCK_MULTIPLE} "
                         "(tt-metal's models use 32 or 64); set block_size=32 or 64")


def check_unchunked_budget(max_num_batched_tokens: int, max_model_len: int) -> None:
    if max_num_batched_tokens < max_model_len:
        raise ValueError(
            f"max_num_batched_tokens={max_num_batched_tokens} is smaller than "
            f"max_model_len={max_model_len} while chunked prefill is off: a long prompt could "
            "never be scheduled; enable chunked prefill or raise max_num_batched_tokens")


def check_choice(name: str, value: object, choices: tuple[object, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(str, choices))}")


def parse_value(name: str, raw: str, hint: Any) -> Any:
    """Parse one string parameter by the field's type hint (int, bool, str, Literal, Optional)."""
    text = raw.strip()
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        if text.lower() in ("", "none", "null", "auto"):
            return None
        (hint,) = [a for a in args if a is not type(None)]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint.parse(name, text) if issubclass(hint, Named) else hint(text)
    if typing.get_origin(hint) is Literal:
        check_choice(name, text, typing.get_args(hint))
        return text
    if hint is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(f"{name}={raw!r} is not a boolean (true/false)")
    if hint is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not an integer") from None
    if hint is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not a number") from None
    assert hint is str, f"unsupported option type {hint} for {name}"
    return text
