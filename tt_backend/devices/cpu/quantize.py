"""fp32 weights quantized into GGUF blocks (`weight_dtype=q8_0` / `q4_0`), byte for byte as llama.cpp's
reference quantizers write them (ggml/src/ggml-quants.c, `quantize_row_q8_0_ref` and
`quantize_row_q4_0_ref`; gguf-py's `gguf/quants.py` mirrors them in numpy), vectorised in torch ops.

Per block of 32 consecutive weights x of one row, in fp32:

    q8_0  amax = max|x|,  d = amax / 127,  id = d ? 1 / d : 0,  q = roundf(x * id)        (int8)
    q4_0  m = the x of largest |x| (the first one),  d = m / -8,  id = d ? 1 / d : 0,
          q = min(15, (int8_t)(x * id + 8.5))   (truncation; x * id + 8.5 >= 0 but for rounding)

d is stored as fp16 (round to nearest even, as GGML_FP32_TO_FP16), while q is computed with the fp32
id, as the reference does. roundf rounds halves away from zero (torch.round rounds them to even), so
it is computed as gguf's `np_roundf` does: floor(|v|) + floor(2 * frac(|v|)), with v's sign.
"""

from __future__ import annotations

import torch

from tt_backend.devices.cpu.quant import BLOCK, QuantFormat, QuantizedTensor

QUANTIZABLE: tuple[QuantFormat, ...] = ("q8_0", "q4_0")
_CHUNK = 1 << 22
"""Weights quantized at a time (bounds the temporaries to a few times 16 MB)."""


def quantize(weight: torch.Tensor, fmt: QuantFormat) -> QuantizedTensor:
    """weight [rows, cols] (any float dtype; cols a multiple of 32) -> its `fmt` blocks."""
    if fmt not in QUANTIZABLE:
        raise ValueError(f"cannot quantize to {fmt!r}: one of {', '.join(QUANTIZABLE)}")
    if weight.dim() != 2 or weight.shape[1] % BLOCK:
        raise ValueError(f"cannot quantize a weight of shape {tuple(weight.shape)} into blocks of {BLOCK}: "
                         "it needs 2 dimensions and a multiple of 32 columns")
    rows, cols = weight.shape
    step = max(1, _CHUNK // cols)
    quantize_rows = _q8_0 if fmt == "q8_0" else _q4_0
    with torch.inference_mode():
        parts = [quantize_rows(weight[r:r + step].float().reshape(-1, cols // BLOCK, BLOCK))
                 for r in range(0, rows, step)]
    blocks = torch.cat(parts).reshape(rows, -1) if parts else torch.empty(0, 0, dtype=torch.uint8)
    return QuantizedTensor(fmt, blocks.clone(), cols)  # clone: a normal tensor, not an inference one


def _q8_0(x: torch.Tensor) -> torch.Tensor:
    """x [rows, blocks, 32] fp32 -> [rows, blocks, 34] uint8: [fp16 d][32 x int8 q]."""
    d = x.abs().amax(dim=-1, keepdim=True) / 127
    inv = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
    q = _roundf(x * inv).to(torch.int8)
    return torch.cat([_fp16_bytes(d), q.view(torch.uint8)], dim=-1)


def _q4_0(x: torch.Tensor) -> torch.Tensor:
    """x [rows, blocks, 32] fp32 -> [rows, blocks, 18] uint8: [fp16 d][16 bytes of nibbles], byte j
    holding weight j in the low nibble and weight j + 16 in the high one."""
    m = x.gather(-1, x.abs().argmax(dim=-1, keepdim=True))  # argmax: the first of equal maxima
    d = m / -8
    inv = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
    q = torch.trunc(x * inv + 8.5).clamp(0, 15).to(torch.uint8)
    nibbles = q[..., :BLOCK // 2] | (q[..., BLOCK // 2:] << 4)
    return torch.cat([_fp16_bytes(d), nibbles], dim=-1)


def _roundf(v: torch.Tensor) -> torch.Tensor:
    """C's roundf (halves away from zero) for |v| < 2^23; floor(|v| + 0.5) would round 0.49999997 up."""
    a = v.abs()
    whole = a.floor()
    return torch.sign(v) * (whole + (2 * (a - whole)).floor())


def _fp16_bytes(d: torch.Tensor) -> torch.Tensor:
    """d [..., 1] fp32 -> [..., 2] uint8, the fp16 value little-endian (as a GGUF stores it)."""
    return d.to(torch.float16).view(torch.uint8)
