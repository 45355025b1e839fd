"""Linear layers of a bf16 plan on AVX512-BF16 with the weight held in panels (`panels_linear`,
csrc/panels_linear.cpp): [N / 16, K / 2, 16, 2], 16 output columns by one pair of inputs per 64 bytes.

At decode sizes the kernel beat oneDNN's prepacked bf16 linear on every layer of the default model
(30 layers' own weights each, 2 threads, AMD Zen 4, fp32 output; ms oneDNN / panels): at 9 rows qkv
2.54 / 1.51, o 1.78 / 0.96, gate_up 5.53 / 4.00, down 3.44 / 2.32; at 32 rows 4.30 / 3.26, 2.85 / 2.11,
11.49 / 9.80, 6.45 / 5.22; at 128 rows 12.66 / 11.31, 7.92 / 6.82, 36.22 / 34.78, 18.38 / 17.23. oneDNN
gets ahead at long prefills (512 rows: 280 / 292 ms for all four, 2048 rows: 1074 / 1158); the CPU's
prefill steps hold up to `max_prefill_tokens` (256) tokens unless one prompt is longer. So the plan
holds one copy of each weight, in panels, and no oneDNN copy.

A layer with a GGUF's blocks (`decode_blocks`) reads them for calls of up to PANELS_BLOCK_ROWS rows:
fewer bytes (quant.PANELS_BLOCK_ROWS has the measurement). Q4_0, Q4_1, Q8_0 and Q5_0 blocks are repacked
in panels (`nibble_panels`, csrc/nibble_panels.cpp: the fp32 dequantized weights) and read up to 8 rows
(Q8_0 and Q5_0 up to 4); the others are read as they are (blocks_bf16_linear.cpp: the blocks' values
rounded to bf16, the panels' values).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tt_backend.devices.cpu import nibble_panels
from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.devices.cpu.quant import FORMAT_IDS, PANELS_BLOCK_ROWS


def panels(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] as `panels_linear` reads it: [ceil(N / 16), ceil(K / 2), 16, 2] bf16, zero-padded."""
    N, K = weight.shape
    rows, cols = -N % 16, K % 2
    padded = F.pad(weight.to(torch.bfloat16), (0, cols, 0, rows))
    return padded.view((N + rows) // 16, 16, (K + cols) // 2, 2).permute(0, 2, 1, 3).contiguous()


class PanelsLinear(nn.Module):
    """bf16 x [..., K] @ W.T (+ bias) -> [..., N] in bf16 (fp32 with `fp32_out`: an LM head's logits),
    W [N, K] held in `panels`; with `blocks` (a GGUF's, of format `fmt`), calls of up to
    PANELS_BLOCK_ROWS rows read the blocks instead."""

    panels: torch.Tensor
    blocks: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, kernels: CpuKernels,
                 blocks: torch.Tensor | None = None, fmt: int = 0, fp32_out: bool = False) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.kernels, self.fmt, self.fp32_out = kernels, fmt, fp32_out
        self.small_rows = PANELS_BLOCK_ROWS if blocks is not None else 0
        repackable = {FORMAT_IDS[f]: f for f in nibble_panels.FORMATS}
        if blocks is not None and fmt in repackable:  # repacked (csrc/nibble_panels.cpp) where they fit
            n, k = weight.shape
            try:
                blocks = nibble_panels.nibble_panels(blocks, repackable[fmt], n, k)
                self.fmt, self.small_rows = nibble_panels.format_of(repackable[fmt])
            except ValueError:
                pass  # read as they are (blocks_bf16_linear.cpp)
        self.register_buffer("panels", panels(weight))
        self.register_buffer("blocks", None if blocks is None else blocks.contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.kernels.ops.panels_linear(x, self.panels, self.out_features, self.blocks,
                                                           self.fmt, self.bias, self.small_rows,
                                                           self.fp32_out)
        return out

    def extra_repr(self) -> str:
        blocks = f", blocks up to {self.small_rows} rows" if self.blocks is not None else ""
        return f"{self.in_features}, {self.out_features}{', fp32 out' if self.fp32_out else ''}{blocks}"
