"""The LM head of a bf16 plan on the CPU, with fp32 logits (`logits_linear`, csrc/logits_linear.cpp).

oneDNN's bf16 linear rounds its output to bf16, whose spacing is 0.125 at a logit of 16 to 32: two
top logits closer than that came out equal, and greedy decoding took the one first in the vocabulary.
The default model answered "What is the capital of France?" with "L'Étoile, ..." where HF's fp32
model, "The" ahead of "L" by 0.08, says "The capital of France is Paris." Logprobs came in steps of
0.125 too. `LogitsLinear` keeps the fp32 sums of the same bf16 products: the hidden state is still
bf16, so a margin smaller than its error (about 0.25 at the logits on the default model) can still
flip, but no longer ties by rounding.

The weight is held in panels of 16 columns (`panels`). For the default model's 49152 x 576 head (2
threads, AMD Zen 4, each call alternating with oneDNN's, medians of 60) the kernel took 1.5-1.6 ms
at 1 row against oneDNN's 2.1-2.2, 1.65-1.69 at 8 against 2.44-2.60, and 4.93-4.95 at 32 against
5.39-5.69. A GGUF's head (`decode_blocks`) keeps its blocks for calls of up to DECODE_BLOCK_ROWS rows,
as the other layers do (blocks_bf16_linear.cpp, its sums returned in fp32): served one request at a
time they read fewer bytes, 9.6-10.9 against 10.8-11.4 ms a token (`bench/in_process.py
--concurrency 1`, three runs each); the panels hold the blocks' values rounded to bf16, as oneDNN's
copy did.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.devices.cpu.quant import DECODE_BLOCK_ROWS

HEAD = "lm_head"
"""The name (last part) of a model's output layer."""


def panels(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] as `logits_linear` reads it: [ceil(N / 16), ceil(K / 2), 16, 2] bf16, zero-padded."""
    N, K = weight.shape
    rows, cols = -N % 16, K % 2
    padded = F.pad(weight.to(torch.bfloat16), (0, cols, 0, rows))
    return padded.view((N + rows) // 16, 16, (K + cols) // 2, 2).permute(0, 2, 1, 3).contiguous()


class LogitsLinear(nn.Module):
    """bf16 x [..., K] @ W.T (+ bias) -> fp32 [..., N], W [N, K] held in `panels`; with `blocks` (a
    GGUF's, of format `fmt`), calls of up to DECODE_BLOCK_ROWS rows read the blocks instead."""

    panels: torch.Tensor
    blocks: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, kernels: CpuKernels,
                 blocks: torch.Tensor | None = None, fmt: int = 0) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.kernels, self.fmt = kernels, fmt
        self.small_rows = DECODE_BLOCK_ROWS if blocks is not None else 0
        self.register_buffer("panels", panels(weight))
        self.register_buffer("blocks", None if blocks is None else blocks.contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.kernels.ops.logits_linear(x, self.panels, self.out_features, self.blocks,
                                                           self.fmt, self.bias, self.small_rows)
        return out

    def extra_repr(self) -> str:
        blocks = f", blocks up to {self.small_rows} rows" if self.blocks is not None else ""
        return f"{self.in_features}, {self.out_features}, fp32 logits{blocks}"


def use_fp32_logits(module: nn.Module, plan: ComputePlan) -> int:
    """Replace each dense LM head of `module` by a `LogitsLinear`; return how many were replaced."""
    kernels = plan.kernels
    assert plan.fp32_logits and kernels is not None
    count = 0
    for name, child in list(module.named_modules()):
        parent, _, leaf = name.rpartition(".")
        if leaf == HEAD and isinstance(child, nn.Linear):
            head = LogitsLinear(child.weight.detach(), child.bias, kernels)
            setattr(module.get_submodule(parent), leaf, head)
            count += 1
    return count
