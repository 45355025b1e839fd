"""Native CPU kernels of the torch device, built on first use with the system C++ compiler.

- `paged_decode_attention` (csrc/paged_decode_attention.cpp): attention of one query token per row
  straight over the paged KV cache. The portable path gathers each row's blocks into a contiguous
  copy and runs SDPA on it (`bench/cpu_kernels.py` compares the two).
- csrc/elementwise.cpp: `rms_norm`, `add_rms_norm` (the residual add fused into the next norm),
  `silu_and_mul` and `rope_and_cache` (RoPE of q and k with k and v stored in the cache). Each
  replaces several torch ops and rounds where they round.
- `tile_linear` (csrc/tile_linear.cpp): a bf16 linear layer of a few rows on AMX tiles, streaming
  its weight faster than oneDNN does at decode sizes; only on CPUs with AMX
  (`tile_linear_supported`). `linear` runs it up to a row count and oneDNN's kernel beyond;
  `devices/torch_linear.py` uses that.

They are registered as `torch.ops.tt_backend.*`, so a TorchScript trace records them like any aten
op. The build (about 15 s) is cached under torch's extension directory, keyed by the sources, the
flags and this CPU's instruction set (`-march=native`); `scripts/setup.sh` runs it ahead. Without a
compiler the model keeps its portable torch path (`cpu_kernels=auto`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import threading
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
SOURCES = [CSRC / "paged_decode_attention.cpp", CSRC / "elementwise.cpp", CSRC / "tile_linear.cpp"]
OPS = ("paged_decode_attention", "rms_norm", "add_rms_norm", "silu_and_mul", "rope_and_cache", "tile_linear",
       "linear")
# No contraction of a * b + c into one FMA: the kernels round where torch's separate ops round.
_FLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-ffp-contract=off", "-fopenmp"]

_lock = threading.Lock()
_built: dict[str, str | None] = {}  # "error": None once loaded, else why it is unavailable


def _cpu_tag() -> str:
    """This CPU's instruction-set flags, so a cache shared between machines never loads code built
    for another CPU."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return hashlib.sha256(flags.encode()).hexdigest()[:10]


def load_kernels() -> str | None:
    """Build (once per machine) and load the kernels into this process; return None when every
    op of OPS is usable, else the reason they are not."""
    with _lock:
        if "error" not in _built:
            _built["error"] = _build()
        return _built["error"]


def _build() -> str | None:
    if shutil.which("ninja") is None:  # the `ninja` wheel puts it beside the interpreter
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    try:
        from torch.utils.cpp_extension import load

        load(name=f"tt_backend_cpu_kernels_{_cpu_tag()}", sources=[str(p) for p in SOURCES],
             extra_cflags=_FLAGS, extra_ldflags=["-fopenmp"], is_python_module=False, verbose=False)
    except Exception as exc:  # no compiler, or a failed build: the portable path still works
        return f"{type(exc).__name__}: {exc}"
    missing = [op for op in OPS if not hasattr(torch.ops.tt_backend, op)]
    return f"the library loaded but registered no {', '.join(missing)}" if missing else None


def paged_decode_attention(q: torch.Tensor, kv: torch.Tensor, block_tables: torch.Tensor,
                           context_lens: torch.Tensor, positions: torch.Tensor, window: int,
                           scale: float) -> torch.Tensor:
    """q [B, H, D] at `positions` [B]; kv [2, num_blocks, block_size, KVH, D] of one layer;
    returns [B, H, D]. Row b sees keys [max(0, p - window + 1), min(context_lens[b], p + 1))."""
    op = torch.ops.tt_backend.paged_decode_attention
    out: torch.Tensor = op(q, kv, block_tables, context_lens, positions, window, scale)
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * (x * rsqrt(mean(x^2) + eps)), normalised in fp32 and rounded before the weight."""
    out: torch.Tensor = torch.ops.tt_backend.rms_norm(x, weight, eps)
    return out


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual)."""
    normed, total = torch.ops.tt_backend.add_rms_norm(x, residual, weight, eps)
    return normed, total


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x: [..., 2I] = (gate, up) -> SiLU(gate) * up [..., I]."""
    out: torch.Tensor = torch.ops.tt_backend.silu_and_mul(x)
    return out


def rope_and_cache(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor,
                   slots: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """qkv [N, (H + 2 KVH) D], cos/sin [N, D] (rotate-half RoPE); writes the rotated k and v of
    each token at its flat slot of kv [2, blocks, block_size, KVH, D] (slot < 0: padding, skipped)
    and returns the rotated q [N, H, D]."""
    q: torch.Tensor = torch.ops.tt_backend.rope_and_cache(qkv, cos, sin, kv, slots, num_heads, num_kv_heads)
    return q


def tile_linear_supported() -> bool:
    """Whether `tile_linear` runs here: the kernels are loaded, this CPU has AMX bf16 tiles, the
    build targets them, and the OS lets this process use them."""
    return load_kernels() is None and bool(torch.ops.tt_backend.tile_linear_supported())


def tile_linear(x: torch.Tensor, tiles: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ W.T (+ bias) -> [..., N] in bf16, W [N, K] given in the tile layout
    (`torch_linear.tile_layout`)."""
    out: torch.Tensor = torch.ops.tt_backend.tile_linear(x, tiles, bias)
    return out


if __name__ == "__main__":  # scripts/setup.sh: build ahead, report, never fail the setup
    error = load_kernels()
    print("[setup] native CPU kernels: " + ("ready" if error is None else f"unavailable ({error})"))
