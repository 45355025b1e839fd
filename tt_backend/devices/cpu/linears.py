"""Weight layouts for matmuls on the torch CPU device, one per `ComputePlan.linear` path.

bf16 `F.linear` on CPU hands oneDNN a plain weight on every call. Reordering each weight once
into oneDNN's blocked layout (`mkldnn._reorder_linear_weight`) and calling the prepacked kernel
makes the model's matmuls 1.3-1.4x faster at every batch size measured (1 to 2048 rows) on this
machine, and the 49152-row LM head 1.7x faster at batch 1. fp32 keeps plain weights: packed fp32
was slower at batch 1. CUDA keeps plain weights.

On a CPU with AMX tiles and the native kernels loaded, each layer also keeps its weight in the
tile layout, and a call with at most SMALL_ROWS rows (decode steps) runs `cpu_kernels.tile_linear`,
which streams the weight faster than oneDNN at those sizes: the default model's linear layers
took 10.2 against 14.7 ms at 1 row and 12.6 against 17.1 ms at 32 rows. The choice is made per
call inside one op (`tt_backend::linear`), so one traced graph serves every batch size. The price
is a second copy of the linear weights in memory.

Without bf16 arithmetic (below avx512_bf16, where `dtype=auto` means fp32 activations),
`WideLinear` keeps each weight in bf16 and runs `wide_linear`: decode-size calls stream the bf16
weight, larger ones widen it for torch's fp32 GEMM.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, List, Optional, Union  # noqa: UP035  (TorchScript reads these annotations)

import torch
from torch import nn

from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.devices.cpu.panels import PanelsLinear

SMALL_ROWS = 64
"""Up to this many rows a layer with tiles runs on them; beyond, oneDNN (at 128 rows the tile
kernel, compute-bound by then, was 1.1x slower)."""


def _scripted(fn: Callable[..., Any]) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # torch.jit.script
        return torch.jit.script(fn)


@_scripted
def _packed_linear_script(x: torch.Tensor, weight: torch.Tensor,
                          bias: Optional[torch.Tensor]) -> torch.Tensor:  # noqa: UP045
    # The op's `Scalar?[] scalars` argument cannot be traced from Python; a scripted call can.
    no_scalars = torch.jit.annotate(List[Optional[Union[int, float, complex]]], [])  # noqa: UP006, UP007, UP045
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", no_scalars, "")



def tile_layout(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] as `tile_linear` reads it: per block of 32 columns, per 32 inputs, two
    [16 input pairs, 16 columns, 2] tiles (csrc/tile_linear.cpp); returned as [N, K]."""
    N, K = weight.shape
    tiles = weight.reshape(N // 32, 2, 16, K // 32, 16, 2).permute(0, 3, 1, 4, 2, 5)
    return tiles.contiguous().view(N, K)


def can_tile(weight: torch.Tensor) -> bool:
    N, K = weight.shape
    return weight.dtype == torch.bfloat16 and N % 32 == 0 and K % 32 == 0


class PackedLinear(nn.Module):
    """`nn.Linear` with its weight held in oneDNN's blocked layout (inference only), and with
    `tiles`, also in the tile layout for calls of at most SMALL_ROWS rows."""

    packed_weight: torch.Tensor
    tiles: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(self, linear: nn.Linear, tile_kernels: CpuKernels | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.kernels = tile_kernels if tile_kernels is not None and can_tile(weight) else None
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight))
        self.register_buffer("tiles", tile_layout(weight) if self.kernels is not None else None)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernels is not None:  # the op picks tiles or oneDNN per call, so a trace keeps both
            tiled: torch.Tensor = self.kernels.ops.linear(x, self.tiles, self.packed_weight, self.bias,
                                                          SMALL_ROWS)
            return tiled
        if torch.jit.is_tracing():
            return _packed_linear_script(x, self.packed_weight, self.bias)
        out = torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")
        return out


STREAM_ROWS = {"portable": 4, "neon": 4}
"""Rows up to which `wide_linear` streams the bf16 weight, by level (SMALL_ROWS where not listed).
The portable build's loop (SSE2, no FMA) loses to widening the weight for torch's GEMM from a few
rows on: 0.70 against 0.40 ms at 4 rows and 1.19 against 0.46 ms at 8 for a 3072 x 576 layer with
torch held to SSE4.2; served at cpu_isa=portable, streaming every decode size gave 43.5 / 71.1 /
74.4 tok/s at concurrency 1 / 8 / 32 and widening at every size 18.4 / 90.3 / 191.7 (widening
allocates and fills an fp32 copy per call, 113 MB for the LM head)."""


class WideLinear(nn.Module):
    """`nn.Linear` over fp32 activations with its weight held in bf16 (`wide_linear`)."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, linear: nn.Linear, kernels: CpuKernels) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.kernels = kernels
        self.small_rows = STREAM_ROWS.get(kernels.level, SMALL_ROWS)
        self.register_buffer("weight", linear.weight.detach().to(torch.bfloat16).contiguous())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.wide_linear(x, self.weight, self.bias, self.small_rows)


def convert_linears(module: nn.Module, plan: ComputePlan) -> int:
    """Give every nn.Linear under `module` the layout of the plan's linear path; return how many
    were replaced (none on the torch path)."""
    if plan.linear == "torch":
        return 0
    if plan.linear == "bf16_panels":
        panel_kernels = plan.kernels
        assert panel_kernels is not None, "bf16_panels runs on the native kernels"
        return _replace_linears(module, lambda linear: PanelsLinear(linear.weight.detach(), linear.bias,
                                                                    panel_kernels))
    if plan.linear == "wide_bf16":
        kernels = plan.kernels
        assert kernels is not None, "wide_bf16 runs on the native kernels"
        return _replace_linears(module, lambda linear: WideLinear(linear, kernels))
    tile_kernels = plan.kernels if plan.linear == "amx_tiles" else None
    return _replace_linears(module, lambda linear: PackedLinear(linear, tile_kernels))


def _replace_linears(module: nn.Module, make: Callable[[nn.Linear], nn.Module]) -> int:
    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            setattr(module, name, make(child))
            count += 1
        else:
            count += _replace_linears(child, make)
    return count
