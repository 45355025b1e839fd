"""csrc/quant_linear_q8.cpp's arithmetic in torch ops: the reference its kernels must equal bit for bit.

Activations per 32 inputs: d = max|x| / 127, q = round(x * (1 / d)) (ties to even), s the sums of
each 16 q. Weights per chunk of 32: w = a * (u - o) + b (`chunk_params`, from the dequantized
weights' own decomposition). Per chunk the integer sums i_lo, i_hi of (u - o) * q, then in fp32
t = dx * (a * (i_lo + i_hi) + b * (s_lo + s_hi)) (Q6_K: dx * (a_lo * i_lo + a_hi * i_hi)), summed
over the chunks in order.
"""

from __future__ import annotations

import torch

from tt_backend.devices.cpu.quant import BLOCK_BYTES, BLOCK_WEIGHTS, QK_K, QuantFormat, _half

OFFSET: dict[QuantFormat, int] = {"q4_0": 8, "q5_0": 16, "q6_k": 32}


def quantize_q8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] fp32 -> (q [M, K] int8, d [M, K / 32] fp32, s [M, K / 16] int32)."""
    m, k = x.shape
    blocks = x.reshape(m, k // 32, 32)
    d = blocks.abs().amax(dim=-1) / 127.0
    inv = torch.where(d != 0, 1.0 / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(d))
    q = torch.round(blocks * inv.unsqueeze(-1)).to(torch.int32)
    s = q.reshape(m, k // 16, 16).sum(dim=-1, dtype=torch.int32)
    return q.reshape(m, k).to(torch.int8), d, s


def chunk_params(blocks: torch.Tensor, fmt: QuantFormat, cols: int) -> tuple[torch.Tensor, ...]:
    """(u [N, K] int32, a_lo [N, K / 32], a_hi [N, K / 32], b [N, K / 32]) of each chunk, read from
    the blocks as ggml lays them out (csrc/quant_k.h, devices/cpu/quant.py)."""
    n = blocks.shape[0]
    if fmt in ("q4_k", "q5_k", "q6_k"):
        b = blocks.reshape(n, cols // QK_K, BLOCK_BYTES[fmt])
        return _k_params(b, fmt, n, cols)
    b = blocks.reshape(n, cols // 32, BLOCK_BYTES[fmt])
    a = _half(b[..., 0:2]).squeeze(-1)
    zero = torch.zeros_like(a)
    if fmt == "q8_0":
        return b[..., 2:].contiguous().view(torch.int8).to(torch.int32).reshape(n, cols), a, a, zero
    at = {"q4_0": 2, "q4_1": 4, "q5_0": 6, "q5_1": 8}[fmt]
    qs = b[..., at:at + 16]
    u = torch.cat([qs & 15, qs >> 4], dim=-1).to(torch.int32)
    if fmt in ("q5_0", "q5_1"):
        qh = b[..., at - 4:at].to(torch.int32)
        bits = (qh[..., :, None] >> torch.arange(8, dtype=torch.int32)) & 1
        u = u | (bits.flatten(-2) << 4)
    m = _half(b[..., 2:4]).squeeze(-1) if fmt in ("q4_1", "q5_1") else zero
    return u.reshape(n, cols), a, a, m


def _k_params(b: torch.Tensor, fmt: QuantFormat, n: int, cols: int) -> tuple[torch.Tensor, ...]:
    sb = cols // QK_K
    if fmt == "q6_k":
        ql, qh = b[..., :128].reshape(n, sb, 2, 1, 64), b[..., 128:192].reshape(n, sb, 2, 1, 32)
        low = (ql >> torch.tensor([0, 4], dtype=torch.uint8).view(2, 1)) & 15
        high = (qh >> torch.tensor([0, 2, 4, 6], dtype=torch.uint8).view(4, 1)) & 3
        u = (low.reshape(n, sb, 8, 32) | (high.reshape(n, sb, 8, 32) << 4)).to(torch.int32)
        scale = _half(b[..., 208:210]) * b[..., 192:208].contiguous().view(torch.int8).float()  # [n, sb, 16]
        a_lo, a_hi = scale[..., 0::2].reshape(n, sb * 8), scale[..., 1::2].reshape(n, sb * 8)
        return u.reshape(n, cols), a_lo, a_hi, torch.zeros_like(a_lo)
    d, dmin, packed = _half(b[..., 0:2]), _half(b[..., 2:4]), b[..., 4:16].reshape(n, sb, 3, 4)
    lo6, mins, top = packed[..., 0, :], packed[..., 1, :], packed[..., 2, :]
    sc = torch.cat([lo6 & 63, (top & 15) | ((lo6 >> 2) & 48)], dim=-1).float()
    mn = torch.cat([mins & 63, (top >> 4) | ((mins >> 2) & 48)], dim=-1).float()
    qs = b[..., -128:].reshape(n, sb, 4, 1, 32) >> torch.tensor([0, 4], dtype=torch.uint8).view(2, 1)
    u = (qs & 15).reshape(n, sb, 8, 32)
    if fmt == "q5_k":
        fifth = (b[..., 16:48].reshape(n, sb, 1, 32) >> torch.arange(8, dtype=torch.uint8).view(8, 1)) & 1
        u = u | (fifth << 4)
    a = (d * sc).reshape(n, sb * 8)
    return u.to(torch.int32).reshape(n, cols), a, a, -(dmin * mn).reshape(n, sb * 8)


def quant_linear_q8(x: torch.Tensor, blocks: torch.Tensor, fmt: QuantFormat, cols: int,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] fp32 -> [M, N] fp32, in the kernel's operations and order."""
    assert BLOCK_WEIGHTS[fmt] in (32, QK_K)
    q, dx, s = quantize_q8(x)
    u, a_lo, a_hi, b = chunk_params(blocks, fmt, cols)
    m, n, chunks = x.shape[0], blocks.shape[0], cols // 32
    prod = q.to(torch.int32).reshape(m, 1, chunks, 2, 16) * u.reshape(1, n, chunks, 2, 16)
    # [M, N, chunks, 2]: the integer sums of each half chunk
    i = prod.sum(dim=-1, dtype=torch.int32) - OFFSET.get(fmt, 0) * s.reshape(m, 1, chunks, 2)
    fi = i.float()
    acc = torch.zeros(m, n)
    for c in range(chunks):
        if fmt == "q6_k":
            t = a_lo[None, :, c] * fi[..., c, 0] + a_hi[None, :, c] * fi[..., c, 1]
        else:
            t = a_lo[None, :, c] * (i[..., c, 0] + i[..., c, 1]).float()
            if fmt in ("q4_1", "q5_1", "q4_k", "q5_k"):
                t = t + b[None, :, c] * (s[:, None, 2 * c] + s[:, None, 2 * c + 1]).float()
        acc = acc + dx[:, None, c] * t
    return acc + bias if bias is not None else acc
