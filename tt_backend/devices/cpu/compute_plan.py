"""How the torch device computes: the instruction-set level, the dtypes, and which implementation
each op of a step takes, decided once from the CPU probe, `cpu_isa`, `dtype` and `cpu_kernels`.

`dtype=auto` on the CPU, from measurements on the machines we have run on:
- avx512_bf16 and amx (bf16 arithmetic in hardware): bfloat16 throughout, 1.3-1.7x faster than fp32.
  The linear layers run on the native `panels_linear` (`panels.PanelsLinear`: AVX512-BF16 dot products
  on weights held in panels, faster than oneDNN's prepacked bf16 kernel up to a few hundred rows; the
  default model's B=32 decode step 40.5 -> 34.5 ms), or on AMX tiles where the OS grants them; with
  cpu_kernels=torch, oneDNN on prepacked weights (`linears.PackedLinear`).
- below (avx512, avx2, portable, neon): float32 activations with bfloat16 linear weights. bf16 GEMMs
  there are emulated or slow: 17-19 GFLOP/s against fp32's 53-101 on an AMD Zen 3 (where oneDNN's
  bf16 prepack refuses to run), and with oneDNN held to AVX512_CORE (what a Skylake-SP to Ice Lake
  CPU gets) bf16 served 191 / 263 tok/s at concurrency 8 / 32 with TTFT p50 1238 / 3572 ms, against
  210 / 287 tok/s and 1005 / 2840 ms for this path held to AVX2 (`bench/compare.py --cpu-isa`). A
  bf16 weight widens to fp32 exactly, so `wide_linear` streams half the bytes of fp32 weights in
  decode and hands prefill to the fp32 GEMM. Without the native kernels: float32 throughout.
Off the CPU (CUDA), `auto` is bfloat16.

`weight_dtype` (the linear weights of a GGUF checkpoint): `quantized` keeps the file's Q8_0 / Q4_0 /
Q4_1 blocks (`devices/cpu/quant.py`, on the native kernels) with float32 activations when
`dtype=auto` (a dequantized weight is exact in fp32: the model served is the fp32 model of the
dequantized weights); `bfloat16` / `float32` widen them on load, as for any checkpoint; `auto` keeps
them unless the dense plan would run bf16 activations on oneDNN / AMX (dtype=auto at avx512_bf16 and
amx, or dtype=bfloat16): there the widened bf16 GEMM serves batched decode faster (measured on a
Zen 5 with AMX-class bf16: c=32 at 0.48x with the blocks, c=1 at 1.32x; `bench/weight_dtype.py`),
while below, the blocks beat the fp32 x bf16 `wide_linear` at every batch measured. Where that bf16
plan runs on panels or oneDNN's prepacked kernels (not AMX tiles), `auto` keeps both (`decode_blocks`):
the blocks for calls of up to 8 rows (read as bf16 weights with AVX512-BF16: the panels' values), the bf16
weight beyond (+96 MB for the default model).
`q8_0` / `q4_0` quantize any checkpoint's linear layers at load (`devices/cpu/quantize.py`,
`models/quantize_at_load.py`) and serve them as `quantized` serves a GGUF's; they need the native
kernels on the CPU and refuse anything else.

`quant_activations=int8` runs the layers on blocks as llama.cpp does (`quant_linear_q8`: the inputs
quantized to int8 per 32, integer dot products per block): faster decode (Q4_1 1.4-1.6x per layer
on one core, `bench/quant_kernels.py`) at about 0.5% relative error per layer; it keeps a GGUF's
blocks under weight_dtype=auto and needs blocks (a GGUF's, or q8_0 / q4_0) to apply to.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Literal

import torch

from tt_backend.devices.cpu.isa import CpuCapabilities, IsaLevel, probe
from tt_backend.devices.cpu.kernels import CpuKernels, KernelsUnavailable, load_kernels
from tt_backend.devices.cpu.nibble_panels import BYTE_MAX_ROWS as BYTE_ROWS
from tt_backend.devices.cpu.nibble_panels import MAX_ROWS as NIBBLE_ROWS
from tt_backend.devices.cpu.quant import DECODE_BLOCK_ROWS, PANELS_BLOCK_ROWS, QuantFormat

logger = logging.getLogger(__name__)

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
BF16_LEVELS: tuple[IsaLevel, ...] = ("avx512_bf16", "amx")
"""Levels with bf16 arithmetic in hardware, where bf16 activations are the default."""
PREPACK_LEVELS: tuple[IsaLevel, ...] = ("avx512", "avx512_bf16", "amx")
"""Levels where oneDNN's bf16 prepacked matmuls run (an explicit dtype=bfloat16 takes them)."""

LinearPath = Literal["bf16_panels", "onednn_packed", "amx_tiles", "wide_bf16", "torch"]
WEIGHT_DTYPES = ("auto", "quantized", "bfloat16", "float32", "q8_0", "q4_0")
QUANTIZE_AT_LOAD: dict[str, QuantFormat] = {"q8_0": "q8_0", "q4_0": "q4_0"}
"""The weight_dtype values that quantize the linear layers at load, and their block format."""


@dataclass(frozen=True)
class ComputePlan:
    """What one engine computes with. `level` and `kernels` are None off the CPU; `kernels` is None
    on the CPU when the torch ops serve (cpu_kernels=torch, or the native build is unavailable)."""

    device: torch.device
    activations: torch.dtype
    weights: torch.dtype
    """The linear layers' weights (the rest of the model is held in `activations`)."""
    linear: LinearPath
    level: IsaLevel | None = None
    kernels: CpuKernels | None = None
    native_required: bool = False
    """cpu_kernels=native: a model that cannot run on the kernels fails its load."""
    quantized: bool = False
    """The checkpoint's quantized linear layers keep their blocks (`quant_linear`); `linear` and
    `weights` are the path of the others."""
    quantize_to: QuantFormat | None = None
    """weight_dtype=q8_0 / q4_0: the format the linear layers are quantized to at load (`quantized`)."""
    int8_activations: bool = False
    """quant_activations=int8: the layers on blocks take int8 inputs (`quant_linear_q8`)."""
    decode_blocks: bool = False
    """A bf16 plan on oneDNN's prepacked kernels (`onednn_packed`) with a GGUF under weight_dtype=auto:
    its quantized layers keep the blocks for calls of up to `quant.DECODE_BLOCK_ROWS` rows beside the
    prepacked bf16 weight for larger ones (`blocks_or_packed_linear`)."""

    @classmethod
    def resolve(cls, device: torch.device, dtype: str = "auto", cpu_isa: str = "auto",
                cpu_kernels: str = "auto", caps: CpuCapabilities | None = None, weight_dtype: str = "auto",
                quantized_checkpoint: bool = False, quant_activations: str = "float32") -> ComputePlan:
        """`quantized_checkpoint`: the checkpoint holds quantized linear layers (a GGUF file's)."""
        if quant_activations not in ("float32", "int8"):
            raise ValueError(f"quant_activations={quant_activations!r} is not one of float32, int8")
        int8 = quant_activations == "int8"
        if dtype != "auto" and dtype not in DTYPES:
            raise ValueError(f"dtype={dtype!r} is not one of auto, {', '.join(DTYPES)}")
        if weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"weight_dtype={weight_dtype!r} is not one of {', '.join(WEIGHT_DTYPES)}")
        if weight_dtype == "float32" and dtype not in ("auto", "float32"):
            raise ValueError(f"weight_dtype=float32 with dtype={dtype}: the linear weights would be wider "
                             "than the activations; use weight_dtype=auto or bfloat16")
        quantize_to = QUANTIZE_AT_LOAD.get(weight_dtype)
        if device.type != "cpu":
            if int8:
                raise ValueError(f"quant_activations=int8: layers on quantized blocks run on the native CPU "
                                 f"kernels, not on {device.type}")
            if quantize_to is not None:
                raise ValueError(f"weight_dtype={weight_dtype}: blocks quantized at load run on the native "
                                 f"CPU kernels, not on {device.type}; use weight_dtype=auto there")
            if cpu_kernels == "native":
                raise ValueError(f"cpu_kernels=native: the native kernels run on the CPU, not on "
                                 f"{device.type}")
            act = DTYPES["bfloat16" if dtype == "auto" else dtype]
            return cls(device, act, act, "torch")
        level = (caps or probe()).resolve(cpu_isa)
        kernels = _kernels(level, cpu_kernels)
        if quantize_to is not None and kernels is None:
            raise ValueError(f"weight_dtype={weight_dtype}: blocks quantized at load run on the native CPU "
                             f"kernels, which are off (cpu_kernels={cpu_kernels}"
                             f"{'' if cpu_kernels == 'torch' else ': they could not be built, see above'})")
        bf16_dense = dtype == "bfloat16" or (dtype == "auto" and level in BF16_LEVELS)
        keep = weight_dtype == "quantized" or (weight_dtype == "auto" and (int8 or not bf16_dense))
        quantized = (keep and quantized_checkpoint and kernels is not None) or quantize_to is not None
        if int8 and not quantized:
            raise ValueError(f"quant_activations=int8 applies to linear layers on quantized blocks, and this "
                             f"plan has none (weight_dtype={weight_dtype}, "
                             f"{'a' if quantized_checkpoint else 'no'} quantized checkpoint, "
                             f"native kernels {'on' if kernels is not None else 'off'}): serve a GGUF's "
                             "blocks or quantize at load with weight_dtype=q8_0 / q4_0")
        if keep and quantized_checkpoint and kernels is None:
            logger.warning("weight_dtype=%s: the GGUF's quantized blocks run on the native kernels, which "
                           "are off; widening them", weight_dtype)
        if dtype != "auto":
            act = weights = DTYPES[dtype]
        elif level in BF16_LEVELS and not quantized and weight_dtype != "float32":
            act = weights = torch.bfloat16
        else:
            act, weights = torch.float32, torch.bfloat16 if kernels is not None else torch.float32
        if weight_dtype in DTYPES and kernels is not None or weight_dtype == "float32":
            weights = DTYPES[weight_dtype]
        linear = _linear_path(level, act, weights, kernels)
        decode_blocks = weight_dtype == "auto" and quantized_checkpoint and kernels is not None \
            and not quantized and linear in ("bf16_panels", "onednn_packed")
        return cls(device, act, weights, linear, level, kernels, cpu_kernels == "native", quantized,
                   quantize_to, int8, decode_blocks)

    @staticmethod
    def may_keep_blocks(device: torch.device, weight_dtype: str) -> bool:
        """Whether a plan on `device` with `weight_dtype` may keep a GGUF's blocks (worth reading them)."""
        return device.type == "cpu" and weight_dtype in ("auto", "quantized")

    @property
    def reads_file_blocks(self) -> bool:
        """The GGUF's blocks are read at load: kept (`quantized`, not quantized at load) or kept for
        decode beside the bf16 weights (`decode_blocks`)."""
        return (self.quantized and self.quantize_to is None) or self.decode_blocks

    @property
    def fp32_logits(self) -> bool:
        """A bf16 plan on the native kernels of a level with AVX512-BF16: its LM head keeps the logits
        in fp32 (`panels_linear`, devices/cpu/logits.py) where oneDNN would round them to bf16 (a GGUF's
        head on its blocks up to PANELS_BLOCK_ROWS rows); not with weight_dtype=q8_0 / q4_0."""
        return self.activations == torch.bfloat16 and self.kernels is not None and self.level in BF16_LEVELS \
            and self.quantize_to is None

    @property
    def dtype_name(self) -> str:
        names = {v: k for k, v in DTYPES.items()}
        act, w = names[self.activations], names[self.weights]
        if self.quantized:
            return f"{act} (linear weights: {self._blocks})"
        if self.decode_blocks:
            return f"{act} (linear weights: the GGUF's quantized blocks for decode, {w} beyond)"
        return act if act == w else f"{act} (linear weights {w})"

    @property
    def _blocks(self) -> str:
        return f"{self.quantize_to} blocks quantized at load" if self.quantize_to else \
            "the GGUF's quantized blocks"

    def op_paths(self) -> dict[str, str]:
        """Each op of a step and the implementation it takes (what the startup log lists)."""
        if self.device.type != "cpu":
            return {"all ops": f"torch on {self.device.type}"}
        ns = f"tt_backend_{self.level}::"
        native = f"native {ns}"
        linear = {
            "bf16_panels": f"{ns}panels_linear: bf16 weights in panels of 16 columns (AVX512-BF16 dots)",
            "onednn_packed": "oneDNN prepacked bf16 (mkldnn::_linear_pointwise)",
            "amx_tiles": f"{ns}linear: AMX tiles up to 64 rows, oneDNN prepacked beyond",
            "wide_bf16": f"{ns}wide_linear: bf16 weights streamed up to 64 rows, widened for the fp32 GEMM "
                         "beyond",
            "torch": "torch F.linear",
        }[self.linear]
        if self.quantized:
            op = "quant_linear_q8 (int8 inputs)" if self.int8_activations else "quant_linear"
            linear = f"{ns}{op} on {self._blocks} (listed per layer at load); others: {linear}"
        elif self.decode_blocks:
            panels = self.linear == "bf16_panels"
            op, rows, beyond = ("panels_linear", PANELS_BLOCK_ROWS, "bf16 panels") if panels \
                else ("blocks_or_packed_linear", DECODE_BLOCK_ROWS, "oneDNN prepacked bf16")
            repacked = f" (Q4_0 and Q4_1 repacked in panels, up to {NIBBLE_ROWS}; Q8_0 and Q5_0, up to " \
                       f"{BYTE_ROWS})" if panels else ""
            linear = f"{ns}{op}: the GGUF's quantized blocks up to {rows} rows{repacked}, {beyond} " \
                     f"beyond (listed per layer at load); others: {linear}"
        if self.fp32_logits:
            blocks = f", the GGUF's blocks up to {PANELS_BLOCK_ROWS} rows" if self.reads_file_blocks else ""
            linear += f"; LM head: {ns}panels_linear (fp32 logits{blocks})"
        fast_prefill = self.kernels is not None and self.kernels.prefill_attention_fast(
            self.activations, 9, 3, 64)  # (a geometry the fast task takes: the dtype and level decide)
        return {
            "linear layers and LM head": linear,
            "decode attention": f"{native}paged_decode_attention" if self.kernels else "torch gather + SDPA",
            "prefill attention": f"{native}paged_prefill_attention where head_dim is 64 or 128 with up to 8 "
                                 "query heads per kv head, else torch gather + SDPA"
                                 if fast_prefill else "torch gather + SDPA",
            "rms_norm / add_rms_norm": f"{native}rms_norm" if self.kernels else "torch rms_norm",
            "silu_and_mul": f"{native}silu_and_mul" if self.kernels else "torch silu * up",
            "rope_and_cache": f"{native}rope_and_cache" if self.kernels else "torch rotate-half + index_copy",
            "torch's own kernels": f"ATen {torch.backends.cpu.get_cpu_capability()}, oneDNN "
                                   f"{os.environ.get('ONEDNN_MAX_CPU_ISA', 'uncapped')}, MKL "
                                   f"{os.environ.get('MKL_ENABLE_INSTRUCTIONS', 'uncapped')}",
        }

    def describe(self) -> str:
        where = f"cpu_isa={self.level}" if self.level is not None else str(self.device)
        lines = [f"compute: {where}, {self.dtype_name}"]
        lines += [f"  {op}: {path}" for op, path in self.op_paths().items()]
        return "\n".join(lines)


def _kernels(level: IsaLevel, cpu_kernels: str) -> CpuKernels | None:
    if cpu_kernels == "torch":
        return None
    try:
        return load_kernels(level)
    except KernelsUnavailable as exc:
        if cpu_kernels == "native":
            raise ValueError(f"cpu_kernels=native: {exc}") from None
        logger.warning("%s; using torch ops", exc)
        return None


def _linear_path(level: IsaLevel, act: torch.dtype, weights: torch.dtype,
                 kernels: CpuKernels | None) -> LinearPath:
    if act == torch.float32 and weights == torch.bfloat16:
        return "wide_bf16"
    tiles = kernels is not None and kernels.tile_linear_supported()
    if act == weights == torch.bfloat16 and kernels is not None and level in BF16_LEVELS and not tiles:
        return "bf16_panels"
    if act == weights == torch.bfloat16 and level in PREPACK_LEVELS and torch.backends.mkldnn.is_available():
        return "amx_tiles" if tiles else "onednn_packed"
    return "torch"

