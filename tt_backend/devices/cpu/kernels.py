"""Native CPU kernels of the torch device, built on first use with the system C++ compiler, one
library per instruction-set level (`isa.py`).

- csrc/paged_attention.cpp: `paged_decode_attention` (one query token per row) and
  `paged_prefill_attention` (a prefill wave's tokens, each causal at its position) straight over the
  paged KV cache. The torch path gathers each row's blocks into a contiguous copy and runs SDPA on it
  with a mask (`bench/cpu_kernels.py` compares the two).
- csrc/elementwise.cpp: `rms_norm`, `add_rms_norm` (the residual add fused into the next norm),
  `silu_and_mul` and `rope_and_cache` (RoPE of q and k with k and v stored in the cache). Each
  replaces several torch ops and rounds where they round.
- csrc/wide_linear.cpp: `wide_linear`, fp32 activations times bf16 weights (each weight widens to
  fp32 exactly): the decode-size linear of CPUs whose bf16 matmuls are slow (below avx512), which
  streams half the bytes of fp32 weights.
- `tile_linear` (csrc/tile_linear.cpp): a bf16 linear layer of a few rows on AMX tiles, streaming
  its weight faster than oneDNN does at decode sizes; only in the `amx` library
  (`tile_linear_supported`). `linear` runs it up to a row count and oneDNN's kernel beyond;
  `devices/cpu/linears.py` uses that.
- csrc/quant_linear.cpp: `quant_linear`, fp32 (or bf16) activations times a weight held as GGUF blocks
  (Q8_0, Q4_0, Q4_1, and the K-quants Q4_K, Q5_K, Q6_K read from csrc/quant_k.h, which it includes;
  `devices/cpu/quant.py`), `dequantize_blocks`, the blocks as fp32, and `blocks_or_packed_linear`, the
  blocks up to a row count and oneDNN's bf16 kernel on a prepacked copy beyond (csrc/onednn_linear.h).
- csrc/quant_linear_q8.cpp: `quant_linear_q8`, the same layer with int8 activations (llama.cpp's
  scheme: integer dot products per block), and `quantize_q8`, the activations it computes on.
- csrc/panels_linear.cpp: `panels_linear`, bf16 x bf16 weights held in panels on AVX512-BF16's dot
  products: a bf16 plan's linear layers at avx512_bf16 and its LM head, whose logits stay fp32
  (`devices/cpu/panels.py`, `devices/cpu/logits.py`); its decode rows read a GGUF's blocks
  (csrc/blocks_bf16_linear.cpp), its Q4_0, Q4_1, Q8_0 and Q5_0 ones repacked in panels
  (csrc/nibble_panels.cpp).

Each level's library registers its ops as `torch.ops.tt_backend_<level>.*`, so the libraries of
several levels live in one process (the tests run each) and a TorchScript trace records the
level's op like any aten op. A library is compiled with its level's fixed flags, never
`-march=native`: the code a level holds runs on every CPU that has the level. The builds (about
15 s each) are cached under torch's extension directory, keyed by the sources and the flags;
`scripts/setup.sh` builds every level this machine has ahead.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tt_backend.devices.cpu.build_lock import clear_stale_lock
from tt_backend.devices.cpu.isa import LEVEL_FLAGS, IsaLevel, probe

logger = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
SOURCES = [CSRC / "paged_attention.cpp", CSRC / "elementwise.cpp", CSRC / "wide_linear.cpp",
           CSRC / "tile_linear.cpp", CSRC / "quant_linear.cpp", CSRC / "quant_linear_q8.cpp",
           CSRC / "blocks_bf16_linear.cpp", CSRC / "nibble_panels.cpp", CSRC / "panels_linear.cpp"]
OPS = ("paged_decode_attention", "paged_prefill_attention", "rms_norm", "add_rms_norm", "silu_and_mul",
       "rope_and_cache", "wide_linear",
       "tile_linear", "linear", "quant_linear", "dequantize_blocks",
       "quant_linear_q8", "quantize_q8", "blocks_or_packed_linear", "panels_linear")
# No contraction of a * b + c into one FMA: the kernels round where torch's separate ops round.
# -fno-trapping-math changes no value; without it GCC vectorises no loop that compares floats (the
# portable SiLU ran 9x slower than torch's).
_FLAGS = ["-O3", "-ffp-contract=off", "-fno-trapping-math", "-fopenmp"]

_lock = threading.Lock()
_loaded: dict[IsaLevel, CpuKernels | str] = {}  # a level's kernels, or why they are unavailable


class KernelsUnavailable(RuntimeError):
    """The native kernels of a level could not be built or loaded (the message says why)."""


def namespace(level: IsaLevel) -> str:
    return f"tt_backend_{level}"


@dataclass(frozen=True)
class CpuKernels:
    """The native kernels of one instruction-set level, loaded into this process."""

    level: IsaLevel

    @property
    def ops(self) -> Any:
        return getattr(torch.ops, namespace(self.level))

    def paged_decode_attention(self, q: torch.Tensor, kv: torch.Tensor, block_tables: torch.Tensor,
                               context_lens: torch.Tensor, positions: torch.Tensor, window: int,
                               scale: float) -> torch.Tensor:
        """q [B, H, D] at `positions` [B]; kv [2, num_blocks, block_size, KVH, D] of one layer;
        returns [B, H, D]. Row b sees keys [max(0, p - window + 1), min(context_lens[b], p + 1))."""
        out: torch.Tensor = self.ops.paged_decode_attention(q, kv, block_tables, context_lens, positions,
                                                            window, scale)
        return out

    def paged_prefill_attention(self, q: torch.Tensor, kv: torch.Tensor, block_tables: torch.Tensor,
                                context_lens: torch.Tensor, positions: torch.Tensor, window: int,
                                scale: float) -> torch.Tensor:
        """q [B, T, H, D] at `positions` [B, T]; otherwise as `paged_decode_attention`, each token a
        query of its own (padding tokens at position 0 see one key); returns [B, T, H, D]."""
        out: torch.Tensor = self.ops.paged_prefill_attention(q, kv, block_tables, context_lens, positions,
                                                             window, scale)
        return out

    def prefill_attention_fast(self, dtype: torch.dtype, num_heads: int, num_kv_heads: int,
                               head_dim: int) -> bool:
        """Whether `paged_prefill_attention` runs its AVX-512 bf16 task for this geometry. Only
        then is it faster than torch's SDPA (1.4-2.8x at 100-2000 tokens, `bench/cpu_kernels.py`);
        the portable task is slower than SDPA (0.2-0.9x), so prefill keeps SDPA elsewhere."""
        return (self.level in ("avx512", "avx512_bf16", "amx") and dtype == torch.bfloat16
                and head_dim in (64, 128) and num_heads % num_kv_heads == 0
                and num_heads // num_kv_heads <= 8)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """weight * (x * rsqrt(mean(x^2) + eps)), normalised in fp32 and rounded before the weight."""
        out: torch.Tensor = self.ops.rms_norm(x, weight, eps)
        return out

    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm(x + residual), x + residual)."""
        normed, total = self.ops.add_rms_norm(x, residual, weight, eps)
        return normed, total

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., 2I] = (gate, up) -> SiLU(gate) * up [..., I]."""
        out: torch.Tensor = self.ops.silu_and_mul(x)
        return out

    def rope_and_cache(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor,
                       slots: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
        """qkv [N, (H + 2 KVH) D], cos/sin [N, D] (rotate-half RoPE); writes the rotated k and v of
        each token at its flat slot of kv [2, blocks, block_size, KVH, D] (slot < 0: padding,
        skipped) and returns the rotated q [N, H, D]."""
        q: torch.Tensor = self.ops.rope_and_cache(qkv, cos, sin, kv, slots, num_heads, num_kv_heads)
        return q

    def wide_linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    small_rows: int) -> torch.Tensor:
        """x [..., K] fp32 @ weight.T (+ bias) -> [..., N] fp32, weight [N, K] in bf16: streamed by the
        kernel up to `small_rows` rows, widened to fp32 for torch's GEMM beyond."""
        out: torch.Tensor = self.ops.wide_linear(x, weight, bias, small_rows)
        return out

    def tile_linear_supported(self) -> bool:
        """Whether `tile_linear` runs here: this library holds the AMX kernel (level amx) and the
        OS lets this process use the tiles."""
        return bool(self.ops.tile_linear_supported())

    def tile_linear(self, x: torch.Tensor, tiles: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [..., K] @ W.T (+ bias) -> [..., N] in bf16, W [N, K] given in the tile layout
        (`linears.tile_layout`)."""
        out: torch.Tensor = self.ops.tile_linear(x, tiles, bias)
        return out

    def quant_linear(self, x: torch.Tensor, blocks: torch.Tensor, fmt: int, in_features: int,
                     bias: torch.Tensor | None, small_rows: int) -> torch.Tensor:
        """x [..., K] (fp32 or bf16) @ W.T (+ bias) -> [..., N] in x's dtype, W [N, K] held as the
        uint8 blocks [N, K / 32 * block bytes] of format `fmt` (`quant.FORMAT_IDS`): streamed from
        the blocks up to `small_rows` rows, dequantized band by band into torch's fp32 GEMM beyond."""
        out: torch.Tensor = self.ops.quant_linear(x, blocks, fmt, in_features, bias, small_rows)
        return out

    def blocks_or_packed_linear(self, x: torch.Tensor, blocks: torch.Tensor, fmt: int, in_features: int,
                                packed: torch.Tensor, bias: torch.Tensor | None,
                                small_rows: int) -> torch.Tensor:
        """The blocks for at most `small_rows` rows (bf16 x with AVX512-BF16, up to 8 rows: the blocks
        read as bf16 weights, csrc/blocks_bf16_linear.cpp; else `quant_linear` on the exact fp32
        weights), oneDNN's bf16 kernel on `packed` (the same weight widened to bf16,
        `mkldnn._reorder_linear_weight`) beyond; `bias` in x's dtype."""
        out: torch.Tensor = self.ops.blocks_or_packed_linear(x, blocks, fmt, in_features, packed, bias,
                                                             small_rows)
        return out

    def quant_linear_q8(self, x: torch.Tensor, blocks: torch.Tensor, fmt: int, in_features: int,
                        bias: torch.Tensor | None) -> torch.Tensor:
        """`quant_linear` with x quantized to int8 per 32 inputs (`quantize_q8`) and integer dot
        products per block, at every batch size (csrc/quant_linear_q8.cpp has the exact formula)."""
        out: torch.Tensor = self.ops.quant_linear_q8(x, blocks, fmt, in_features, bias)
        return out

    def quantize_q8(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [M, K] fp32 -> (q [M, K] int8, d [M, K / 32] fp32, s [M, K / 16] int32): per 32 inputs
        d = max|x| / 127 and q = round(x * (1 / d)) (ties to even), s the sums of each 16 q."""
        q, d, s = self.ops.quantize_q8(x)
        return q, d, s

    def dequantize_blocks(self, blocks: torch.Tensor, fmt: int, in_features: int) -> torch.Tensor:
        """The fp32 weight [N, K] the blocks hold (ggml's dequantize_row_*, bit for bit)."""
        out: torch.Tensor = self.ops.dequantize_blocks(blocks, fmt, in_features)
        return out


def load_kernels(level: IsaLevel) -> CpuKernels:
    """Build (once per machine and level) and load the kernels of `level` into this process.
    Raises KernelsUnavailable with the reason when they cannot be."""
    with _lock:
        if level not in _loaded:
            if level not in probe().levels:
                _loaded[level] = f"this CPU does not have {level} (it has {', '.join(probe().levels)})"
            else:
                error = _build(level)
                _loaded[level] = CpuKernels(level) if error is None else error
        kernels = _loaded[level]
    if isinstance(kernels, str):
        raise KernelsUnavailable(f"native CPU kernels ({level}): {kernels}")
    return kernels


def _ninja_first_on_path() -> None:
    """torch's extension builder runs the first `ninja` on PATH, and ninja versions keep their build
    logs in formats that read as changed commands to each other: with a system ninja (1.11) and the
    `ninja` wheel's (1.13) every build found the library stale whenever the other had built it last
    and compiled it again (~30 s on 2 cores): the server puts the venv's bin first on PATH, a plain
    `.venv/bin/python` (the tests, the benchmarks) did not. The wheel's ninja goes first here."""
    try:
        import ninja
        wheel_bin = str(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        wheel_bin = str(Path(sys.executable).parent)  # where a venv's scripts lie
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != wheel_bin and (Path(wheel_bin) / "ninja").is_file():
        os.environ["PATH"] = f"{wheel_bin}{os.pathsep}{path}"


def _build(level: IsaLevel) -> str | None:
    _ninja_first_on_path()
    arch = probe().arch
    flags = [*_FLAGS, *LEVEL_FLAGS[(arch, level)], f"-DTT_NS={namespace(level)}"]
    try:
        from torch.utils.cpp_extension import load

        clear_stale_lock(f"{namespace(level)}_kernels")
        load(name=f"{namespace(level)}_kernels", sources=[str(p) for p in SOURCES], extra_cflags=flags,
             extra_ldflags=["-fopenmp"], is_python_module=False, verbose=False)
    except Exception as exc:  # no compiler, or a failed build: the torch path still works
        return f"{type(exc).__name__}: {exc}"
    ops = getattr(torch.ops, namespace(level))
    missing = [op for op in OPS if not hasattr(ops, op)]
    return f"the library loaded but registered no {', '.join(missing)}" if missing else None


if __name__ == "__main__":  # scripts/setup.sh: build every level ahead, report, never fail the setup
    logging.basicConfig(level=logging.WARNING)
    for lvl in probe().levels:
        try:
            load_kernels(lvl)
            print(f"[setup] native CPU kernels ({lvl}): ready")
        except KernelsUnavailable as exc:
            print(f"[setup] {exc}")
