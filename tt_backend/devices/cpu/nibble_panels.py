"""A GGUF's Q4_0, Q4_1, Q8_0 and Q5_0 blocks repacked for `panels_linear`'s decode rows
(csrc/nibble_panels.cpp).

4-bit, per panel of 16 output columns and block of 32 inputs, 320 bytes: 256 bytes of nibbles, then the
16 columns' d and their m (fp16; Q4_0's m is -8 d, exact in fp16). The kernel loads 64 bytes, splits
each byte's nibbles (low, then high: `& 15`, `>> 4 & 15`) and unpacks each half with the constant byte
0x43 (`_mm512_unpacklo_epi8` / `unpackhi_epi8`, lane by 128-bit lane), giving four registers of 32
bf16 words: pairs of inputs (k, k + 1) by 16 columns, word 2c + j holding column c's input k + j, as
vdpbf16ps reads them. `_source` says, for each byte and nibble, which (column, input) it holds, by
following those instructions backwards.

Q8_0, 544 bytes: 512 bytes of 128 + q, then the 16 d (fp16). The same instructions split a byte's
nibbles, which the kernel takes as one weight's low nibble (times x) and high nibble (times 16 x), so
its first and third registers are one pair of inputs and its second and fourth the next (`_byte_source`,
which `_byte_panels` follows by a transposition).
Q5_0 (w = (q - 16) d, q of 5 bits) is held so too, as the Q8_0 quant q - 16: 34 bytes per 32 weights
where the file has 22, read at the Q8_0 kernel's speed (the blocks kernel dequantized its fifth bits).
"""

from __future__ import annotations

import numpy as np
import torch

from tt_backend.devices.cpu.quant import BLOCK_BYTES, QuantFormat, five_bit_quants

FORMAT = 100
"""panels_linear's `format` for 4-bit blocks in this layout (csrc/nibble_panels.h's kNibblePanels)."""
BYTE_FORMAT = 101
"""For Q8_0 blocks (kBytePanels)."""
FORMATS: tuple[QuantFormat, ...] = ("q4_0", "q4_1", "q8_0", "q5_0")
MAX_ROWS = 8
"""Rows up to which a layer reads them (csrc/nibble_panels.h's kMaxRows), beyond PANELS_BLOCK_ROWS: the
default model's 30 layers, cold, 2 threads, AMD Zen 4, ms repacked / bf16 panels: 3.7 / 7.8 at 1 row,
4.8 / 8.3 at 4, 5.5 / 8.3 at 5, 6.1 / 8.7 at 6, 7.2 / 8.6 at 8 (the engine at c=8: 533 against 529
tok/s with the panels from 5 rows)."""
BYTE_MAX_ROWS = 4
"""Rows up to which a Q8_0 (or Q5_0) layer reads them: twice the dot products of the 4-bit layout per
weight. The default model's LM head (49152 x 576), cold, 2 threads, AMD Zen 4, ms repacked /
blocks_bf16_linear / bf16 panels: 0.99 / 1.71 / 1.66 at 1 row, 0.90 / 1.85 / 1.72 at 2, 1.26 / 1.92 /
1.77 at 4, 1.68 / - / 1.73 at 5, 2.38 / - / 1.70 at 8."""


def _source() -> tuple[np.ndarray, np.ndarray]:
    """For each of a panel-block's 256 bytes, the index (16 x 32: column * 32 + input) of the weight in
    its low nibble and in its high nibble."""
    low, high = np.zeros(256, np.int64), np.zeros(256, np.int64)
    for j in range(4):  # 64 bytes: pairs 4j .. 4j + 3 of the block's 16
        for t in range(4):  # unpacklo(low), unpackhi(low), unpacklo(high), unpackhi(high)
            for w in range(32):  # word w: column w // 2, input 2 * pair + w % 2
                lane, i = divmod(w, 8)
                byte = 64 * j + 16 * lane + i + (8 if t in (1, 3) else 0)
                weight = (w // 2) * 32 + 2 * (4 * j + t) + w % 2
                (low if t < 2 else high)[byte] = weight
    return low, high


def _byte_source() -> np.ndarray:
    """For each of a Q8_0 panel-block's 512 bytes, the index (column * 32 + input) of its weight."""
    source = np.zeros(512, np.int64)
    for j in range(8):  # 64 bytes: pairs 2j, 2j + 1 of the block's 16
        for h in range(2):  # unpacklo (pair 2j), unpackhi (pair 2j + 1), of either nibble
            for w in range(32):
                lane, i = divmod(w, 8)
                source[64 * j + 16 * lane + 8 * h + i] = (w // 2) * 32 + 2 * (2 * j + h) + w % 2
    return source


_LOW, _HIGH = _source()


def format_of(fmt: QuantFormat) -> tuple[int, int]:
    """panels_linear's `format` for `fmt`'s blocks repacked here, and the rows up to which they are read."""
    return (BYTE_FORMAT, BYTE_MAX_ROWS) if fmt in ("q8_0", "q5_0") else (FORMAT, MAX_ROWS)


def nibble_panels(blocks: torch.Tensor, fmt: QuantFormat, rows: int, cols: int) -> torch.Tensor:
    """blocks [rows, cols / 32 * bytes] of `fmt` -> uint8 [ceil(rows / 16), cols / 32, 320] (q4_0, q4_1)
    or [.., 544] (q8_0, q5_0); ValueError for other formats, or a q4_0 scale whose -8 d fp16 cannot hold."""
    if fmt not in FORMATS:
        raise ValueError(f"nibble panels hold {', '.join(FORMATS)} blocks, not {fmt}")
    nb = cols // 32
    b = blocks.reshape(rows, nb, BLOCK_BYTES[fmt]).numpy()
    d = b[..., 0:2].copy().view(np.float16)[..., 0]  # [rows, nb]
    if fmt == "q8_0":
        return _byte_panels(b[..., 2:].view(np.int8), d, rows, nb)
    if fmt == "q5_0":
        q = five_bit_quants(torch.from_numpy(b), fmt).numpy()  # 0 to 31
        return _byte_panels((q - 16).astype(np.int8), d, rows, nb)
    if fmt == "q4_1":
        m = b[..., 2:4].copy().view(np.float16)[..., 0]
    else:
        m = (d.astype(np.float32) * -8).astype(np.float16)
        if not np.array_equal(m.astype(np.float32), d.astype(np.float32) * -8):
            raise ValueError("a q4_0 block's m = -8 d does not fit fp16 (d past 8188)")
    qs = b[..., -16:]
    q = np.concatenate([qs & 15, qs >> 4], axis=-1)  # [rows, nb, 32]: input i in the low nibble of byte i
    pad = -rows % 16
    q, d, m = (np.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)) for a in (q, d, m))
    panels = (rows + pad) // 16
    q = q.reshape(panels, 16, nb, 32).transpose(0, 2, 1, 3).reshape(panels, nb, 512)
    nibbles = (q[..., _LOW] | (q[..., _HIGH] << 4)).astype(np.uint8)
    scale = lambda a: a.reshape(panels, 16, nb).transpose(0, 2, 1).copy().view(np.uint8)  # noqa: E731
    out = np.concatenate([nibbles, scale(d), scale(m)], axis=-1)
    return torch.from_numpy(np.ascontiguousarray(out))


def _byte_panels(q: np.ndarray, d: np.ndarray, rows: int, nb: int) -> torch.Tensor:
    """q [rows, nb, 32] int8, d [rows, nb] fp16 -> uint8 [panels, nb, 544]: 128 + q in `_byte_source`'s
    order, then d. That order is one transposition: byte 64 j + 16 lane + 8 h + 2 c + e holds column
    4 lane + c's input 4 j + 2 h + e, so [column: lane, c][input: j, h, e] -> [j, lane, h, c, e] (the
    default model's LM head in 0.1 s, where a gather by `_byte_source` took 0.39)."""
    pad = -rows % 16
    u = q.view(np.uint8) ^ np.uint8(128)  # 128 + q
    if pad:
        u, d = np.pad(u, [(0, pad), (0, 0), (0, 0)]), np.pad(d, [(0, pad), (0, 0)])
    panels = (rows + pad) // 16
    out = np.empty((panels, nb, 544), np.uint8)
    u = u.reshape(panels, 4, 4, nb, 8, 2, 2)  # [panel, lane, c, block, j, h, e]
    out[..., :512] = u.transpose(0, 3, 4, 1, 5, 2, 6).reshape(panels, nb, 512)
    out[..., 512:] = d.reshape(panels, 16, nb).transpose(0, 2, 1).copy().view(np.uint8)
    return torch.from_numpy(out)
