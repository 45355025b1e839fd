"""The LM head of a bf16 plan on the CPU, with fp32 logits (`panels_linear`, csrc/panels_linear.cpp).

oneDNN's bf16 linear rounds its output to bf16, whose spacing is 0.125 at a logit of 16 to 32: two
top logits closer than that came out equal, and greedy decoding took the one first in the vocabulary.
The default model answered "What is the capital of France?" with "L'Étoile, ..." where HF's fp32
model, "The" ahead of "L" by 0.08, says "The capital of France is Paris." Logprobs came in steps of
0.125 too. The head's `PanelsLinear` keeps the fp32 sums of the same bf16 products: the hidden state
is still bf16, so a margin smaller than its error (about 0.25 at the logits on the default model) can
still flip, but no longer ties by rounding.

The weight is held in panels of 16 columns (`panels`). For the default model's 49152 x 576 head (2
threads, AMD Zen 4, each call alternating with oneDNN's, medians of 60) the kernel took 1.5-1.6 ms
at 1 row against oneDNN's 2.1-2.2, 1.65-1.69 at 8 against 2.44-2.60, and 4.93-4.95 at 32 against
5.39-5.69. A GGUF's head (`decode_blocks`) keeps its blocks for calls of up to PANELS_BLOCK_ROWS rows,
as the other layers do (blocks_bf16_linear.cpp, its sums returned in fp32): served one request at a
time they read fewer bytes, 9.6-10.9 against 10.8-11.4 ms a token (`bench/in_process.py
--concurrency 1`, three runs each); the panels hold the blocks' values rounded to bf16, as oneDNN's
copy did.
"""

from __future__ import annotations

from torch import nn

from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.panels import PanelsLinear

HEAD = "lm_head"
"""The name (last part) of a model's output layer."""


def is_head(name: str) -> bool:
    """Whether the module named `name` (dotted, from `named_modules`) is a model's LM head."""
    return name.rpartition(".")[2] == HEAD


def use_fp32_logits(module: nn.Module, plan: ComputePlan) -> int:
    """Replace each dense LM head of `module` by a `PanelsLinear` with fp32 output; return how many were
    replaced."""
    kernels = plan.kernels
    assert plan.fp32_logits and kernels is not None
    count = 0
    for name, child in list(module.named_modules()):
        if is_head(name) and isinstance(child, nn.Linear):
            parent, _, leaf = name.rpartition(".")
            head = PanelsLinear(child.weight.detach(), child.bias, kernels, fp32_out=True)
            setattr(module.get_submodule(parent), leaf, head)
            count += 1
    return count
