"""Weights held as GGUF quantized blocks on the torch CPU device, and the layers that compute on them.

A block holds 32 consecutive weights of one row (ggml's layouts, csrc/quant_linear.cpp):

    q8_0  [fp16 d][32 x int8 q]                 w = q * d             34 bytes (8.5 bits a weight)
    q4_0  [fp16 d][16 bytes of nibbles]         w = (q - 8) * d       18 bytes (4.5 bits)
    q4_1  [fp16 d][fp16 m][16 bytes of nibbles] w = q * d + m         20 bytes (5 bits)
    q5_0  [fp16 d][4 B qh][16 bytes of nibbles]  w = (q - 16) * d     22 bytes (5.5 bits)
    q5_1  [fp16 d][fp16 m][4 B qh][16 B]         w = q * d + m        24 bytes (6 bits)

(nibble byte j: weight j in the low half, weight j + 16 in the high half; q5's fifth bit of weight i
is bit i of the little-endian 32-bit qh). The K-quants hold super-blocks
of 256 weights, 8 or 16 sub-blocks with their own integer scales (csrc/quant_k.h has the layouts):

    q4_k  [fp16 d][fp16 dmin][12 B: 6-bit scales, mins][128 B nibbles]   w = d sc q - dmin m   144 B (4.5)
    q5_k  [fp16 d][fp16 dmin][12 B scales, mins][32 B 5th bits][128 B]  w = d sc q - dmin m   176 B (5.5)
    q6_k  [128 B low nibbles][64 B 2-bit highs][16 x int8 sc][fp16 d]   w = d sc (q - 32)     210 B (6.56)

so a K-quant row must be a whole number of 256 weights (a tensor of other widths cannot be held so;
llama.cpp's quantizer gives such tensors another type). A dequantized weight is exact in fp32 (its
products are: only the subtraction of a min rounds, as in ggml), so a model computed in fp32 on the
blocks is the fp32 model of the dequantized weights; only the order of the fp32 sums differs from a
dense matmul's.

`QuantizedLinear` runs `quant_linear` (streamed from the blocks at decode sizes, dequantized band by
band into torch's fp32 GEMM beyond), or `quant_linear_q8` (int8 inputs, llama.cpp's scheme);
`QuantizedEmbedding` dequantizes only the rows it looks up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from tt_backend.devices.cpu.kernels import CpuKernels

QuantFormat = Literal["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"]
BLOCK = 32
"""Weights per block of q8_0 / q4_0 / q4_1 / q5_0 / q5_1."""
QK_K = 256
"""Weights per super-block of the K-quants."""
BLOCK_BYTES: dict[QuantFormat, int] = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24,
                                       "q4_k": 144, "q5_k": 176, "q6_k": 210}
BLOCK_WEIGHTS: dict[QuantFormat, int] = {"q8_0": BLOCK, "q4_0": BLOCK, "q4_1": BLOCK, "q5_0": BLOCK,
                                         "q5_1": BLOCK,
                                         "q4_k": QK_K, "q5_k": QK_K, "q6_k": QK_K}
FORMAT_IDS: dict[QuantFormat, int] = {"q8_0": 0, "q4_0": 1, "q4_1": 2, "q4_k": 3, "q5_k": 4, "q6_k": 5,
                                      "q5_0": 6, "q5_1": 7}
"""The `format` argument of the native ops (csrc/quant_k.h's Format)."""
STREAM_ROWS = {"portable": 1, "neon": 1, "avx2": 2}
"""Rows up to which `quant_linear` streams the blocks, by level (32 where not listed: the AVX-512
kernel); beyond, the weight is dequantized band by band for torch's fp32 GEMM. Measured on the
default model's 211 linear layers, one thread (ms, stream / band GEMM): AVX-512 13.1 / 25.0 at 1 row,
30.5 / 33.6 at 8, 73.9 / 88.3 at 32; AVX2 16.5 / 39.1 at 2, 48.1 / 43.3 at 3; portable 31.9 / 37.8
at 1, 37.5 / 35.7 at 2."""


@dataclass(frozen=True)
class QuantizedTensor:
    """A 2-d weight [rows, cols] as `blocks` [rows, cols / BLOCK_WEIGHTS * BLOCK_BYTES] uint8, row-major."""

    format: QuantFormat
    blocks: torch.Tensor
    cols: int

    def __post_init__(self) -> None:
        per_block = BLOCK_WEIGHTS[self.format]
        if self.cols <= 0 or self.cols % per_block:
            raise ValueError(f"{self.format} blocks hold rows of whole blocks of {per_block} weights; "
                             f"a row of {self.cols} weights cannot be held in them")
        if self.blocks.dtype != torch.uint8 or self.blocks.dim() != 2 or \
                self.blocks.shape[1] != self.cols // per_block * BLOCK_BYTES[self.format]:
            raise ValueError(f"{self.format} blocks of shape {tuple(self.blocks.shape)} "
                             f"({self.blocks.dtype}) do not hold rows of {self.cols} weights")

    @property
    def rows(self) -> int:
        return int(self.blocks.shape[0])

    @property
    def nbytes(self) -> int:
        return self.blocks.numel()

    def take_rows(self, order: torch.Tensor) -> QuantizedTensor:
        """Rows reordered: row i of the result is row order[i] (a row is whole blocks: exact)."""
        return QuantizedTensor(self.format, self.blocks[order].contiguous(), self.cols)

    def dequantize(self) -> torch.Tensor:
        """The fp32 weight [rows, cols], in torch ops (the native kernels' `dequantize_blocks` gives
        the same bits)."""
        return dequantize_rows(self.blocks, self.format, self.cols)


def concat_rows(parts: list[QuantizedTensor]) -> QuantizedTensor:
    """The parts stacked along rows (q, k, v into one fused projection); one format, one width."""
    if len(parts) == 1:
        return parts[0]  # shared, not copied: a tied LM head and embedding hold one set of blocks
    formats, widths = {p.format for p in parts}, {p.cols for p in parts}
    if len(formats) != 1 or len(widths) != 1:
        raise ValueError(f"cannot fuse blocks of formats {sorted(formats)} and widths {sorted(widths)}")
    return QuantizedTensor(parts[0].format, torch.cat([p.blocks for p in parts]).contiguous(), parts[0].cols)


def dequantize_rows(blocks: torch.Tensor, fmt: QuantFormat, cols: int) -> torch.Tensor:
    """blocks [..., cols / BLOCK_WEIGHTS * BLOCK_BYTES] uint8 -> fp32 [..., cols], as ggml's
    dequantize_row_* computes (one multiply, then one add for q4_1), in torch ops (the reference of
    the kernels)."""
    lead = blocks.shape[:-1]
    if fmt in ("q4_k", "q5_k", "q6_k"):
        sb = blocks.reshape(-1, cols // QK_K, BLOCK_BYTES[fmt])  # [rows, super-blocks, bytes]
        return _dequantize_k(sb, fmt).reshape(*lead, cols)
    b = blocks.reshape(-1, cols // BLOCK, BLOCK_BYTES[fmt])  # [rows, blocks, bytes]
    d = b[..., 0:2].contiguous().view(torch.float16).float()  # [rows, blocks, 1]
    if fmt == "q8_0":
        w = b[..., 2:].contiguous().view(torch.int8).float() * d
    elif fmt in ("q5_0", "q5_1"):
        q = five_bit_quants(b, fmt)
        w = (q.float() - 16) * d if fmt == "q5_0" else q.float() * d + b[..., 2:4].contiguous().view(
            torch.float16).float()
    else:
        qs = b[..., 4:] if fmt == "q4_1" else b[..., 2:]
        q = torch.cat([qs & 15, qs >> 4], dim=-1)  # weights 0-15 from the low nibbles, 16-31 the high
        w = (q.float() - 8) * d if fmt == "q4_0" else q.float() * d + b[..., 2:4].contiguous().view(
            torch.float16).float()
    return w.reshape(*lead, cols)


def five_bit_quants(b: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    """q5_0 / q5_1 blocks [rows, blocks, bytes] uint8 -> their quants q [rows, blocks, 32] int32 (0-31)."""
    at = 4 if fmt == "q5_1" else 2  # qh, then 16 bytes of nibbles
    qh = b[..., at:at + 4].to(torch.int32)
    bits = (qh[..., :, None] >> torch.arange(8, dtype=torch.int32)) & 1  # [rows, blocks, 4, 8]: 8i + k
    qs = b[..., at + 4:]
    return torch.cat([qs & 15, qs >> 4], dim=-1).to(torch.int32) | (bits.flatten(-2) << 4)


def _half(b: torch.Tensor) -> torch.Tensor:
    return b.contiguous().view(torch.float16).float()


def _dequantize_k(b: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    """Super-blocks [rows, n, bytes] -> fp32 [rows, n, 256] (ggml-quants.c dequantize_row_q{4,5,6}_K;
    the shapes follow gguf-py's gguf/quants.py)."""
    rows, n = b.shape[:2]
    if fmt == "q6_k":
        ql, qh = b[..., :128].reshape(rows, n, 2, 1, 64), b[..., 128:192].reshape(rows, n, 2, 1, 32)
        low = (ql >> torch.tensor([0, 4], dtype=torch.uint8).view(2, 1)) & 15  # [rows, n, 2, 2, 64]
        high = (qh >> torch.tensor([0, 2, 4, 6], dtype=torch.uint8).view(4, 1)) & 3  # [rows, n, 2, 4, 32]
        q = (low.reshape(rows, n, 8, 32) | (high.reshape(rows, n, 8, 32) << 4)).to(torch.int8) - 32
        scale = _half(b[..., 208:210]) * b[..., 192:208].contiguous().view(torch.int8).float()  # [rows,n,16]
        return (scale.unsqueeze(-1) * q.reshape(rows, n, 16, 16).float()).reshape(rows, n, QK_K)
    d, dmin, packed = _half(b[..., 0:2]), _half(b[..., 2:4]), b[..., 4:16].reshape(rows, n, 3, 4)
    lo6, mins, top = packed[..., 0, :], packed[..., 1, :], packed[..., 2, :]  # get_scale_min_k4's bytes
    sc = torch.cat([lo6 & 63, (top & 15) | ((lo6 >> 2) & 48)], dim=-1).float()  # [rows, n, 8]
    m = torch.cat([mins & 63, (top >> 4) | ((mins >> 2) & 48)], dim=-1).float()
    qs = b[..., -128:].reshape(rows, n, 4, 1, 32) >> torch.tensor([0, 4], dtype=torch.uint8).view(2, 1)
    q = (qs & 15).reshape(rows, n, 8, 32)  # sub-block j: the low (j even) or high nibbles of 32 bytes
    if fmt == "q5_k":
        fifth = (b[..., 16:48].reshape(rows, n, 1, 32) >> torch.arange(8, dtype=torch.uint8).view(8, 1)) & 1
        q = q | (fifth << 4)
    w = (d * sc).unsqueeze(-1) * q.float() - (dmin * m).unsqueeze(-1)
    return w.reshape(rows, n, QK_K)


DECODE_BLOCK_ROWS = 8
"""Rows up to which a bf16 plan's layer that also keeps its prepacked bf16 weight (`packed`) reads the
blocks: with AVX512-BF16, as bf16 weights on vdpbf16ps (csrc/blocks_bf16_linear.cpp). The default
model's shapes (a layer's q/k/v, o, gate/up, down in Q4_0 and the Q8_0 LM head; two threads, AMD Zen 4;
ms, bf16 blocks / oneDNN prepacked bf16, three runs): 1.18-1.47 / 1.78-3.0 at 1 row, 1.45-1.63 /
2.44-2.64 at 2, 1.77-2.17 / 2.48-2.73 at 4, 2.56-2.65 / 2.58-2.82 at 8 (blocks from cache; in the model
they stream from memory at a third of the bytes)."""


PANELS_BLOCK_ROWS = 4
"""Rows up to which a layer on bf16 panels that also keeps a GGUF's blocks (`panels.PanelsLinear`,
AVX512-BF16) reads the blocks. Whole traced decode steps of the default GGUF with the blocks read up to
T rows (2 threads, AMD Zen 4, 164 keys, medians of 3 interleaved runs; ms): at 1 to 3 rows every T took
the same (7.8-8.1, 8.6-8.9, 9.5-9.8): the blocks kernel, busy dequantizing, keeps pace with the panels,
which stream 2.8x the bytes. At 4 rows neither was ahead over two runs; from 5 the panels were: at 5
rows 9.6-10.0 against 12.3 with the blocks, at 6 9.5-10.0 against 12.8, at 8 12.5-13.5 against
14.8-16.5. The engine serving c requests of 128 greedy tokens queued at once (three runs each,
alternating): c=8 504 tok/s with the panels against 431 with the blocks, c=4 291 against 299. So the
blocks stay up to 4 rows: no slower, on a third of the bytes. (Since measured, Q4_0 and Q4_1 blocks are
repacked and read up to 8 rows, `nibble_panels.MAX_ROWS`.)"""


class QuantizedLinear(nn.Module):
    """A bias-free or biased linear layer whose weight stays in GGUF blocks (`quant_linear`).

    With `packed` (the same weight widened to bf16 and prepacked for oneDNN, a bf16 plan's
    `decode_blocks`), calls of up to DECODE_BLOCK_ROWS rows read the blocks and larger ones oneDNN's
    bf16 kernel: both forms are held."""

    blocks: torch.Tensor
    packed: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(self, weight: QuantizedTensor, bias: torch.Tensor | None, kernels: CpuKernels,
                 int8_activations: bool = False, packed: torch.Tensor | None = None) -> None:
        super().__init__()
        self.int8_activations = int8_activations
        self.format: QuantFormat = weight.format
        self.fmt = FORMAT_IDS[weight.format]
        self.in_features, self.out_features = weight.cols, weight.rows
        self.kernels = kernels
        self.small_rows = DECODE_BLOCK_ROWS if packed is not None else STREAM_ROWS.get(kernels.level, 32)
        self.register_buffer("blocks", weight.blocks.contiguous())
        self.register_buffer("packed", packed)
        bias_dtype = torch.bfloat16 if packed is not None else torch.float32  # oneDNN takes x's dtype
        self.register_buffer("bias", None if bias is None else bias.detach().to(bias_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return self.kernels.blocks_or_packed_linear(x, self.blocks, self.fmt, self.in_features,
                                                        self.packed, self.bias, self.small_rows)
        if self.int8_activations:
            return self.kernels.quant_linear_q8(x, self.blocks, self.fmt, self.in_features, self.bias)
        return self.kernels.quant_linear(x, self.blocks, self.fmt, self.in_features, self.bias,
                                         self.small_rows)

    def extra_repr(self) -> str:
        int8 = ", int8 inputs" if self.int8_activations else ""
        packed = f", prepacked bf16 beyond {self.small_rows} rows" if self.packed is not None else ""
        return f"{self.in_features}, {self.out_features}, format={self.format}{int8}{packed}"


class QuantizedEmbedding(nn.Module):
    """A token embedding whose table stays in GGUF blocks: a lookup dequantizes the rows it reads."""

    blocks: torch.Tensor

    def __init__(self, weight: QuantizedTensor, dtype: torch.dtype, kernels: CpuKernels) -> None:
        super().__init__()
        self.format: QuantFormat = weight.format
        self.fmt = FORMAT_IDS[weight.format]
        self.embedding_dim, self.dtype = weight.cols, dtype
        self.kernels = kernels
        self.register_buffer("blocks", weight.blocks.contiguous())

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.blocks[ids.reshape(-1)]  # [tokens, bytes a row]
        weights = self.kernels.dequantize_blocks(rows, self.fmt, self.embedding_dim)
        return weights.view(*ids.shape, self.embedding_dim).to(self.dtype)
