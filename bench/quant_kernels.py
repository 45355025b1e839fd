"""`quant_linear` at one row (decode) on one GGUF layer per block format: GB/s of blocks read.

A [576, 1536] layer (SmolLM2-135M's down projection) in Q4_1, Q4_K, Q5_K and Q6_K, per level
(`cpu_isa`), on random blocks (scales of a real model's size). "hot": the same layer every call (its
0.5-0.7 MB of blocks stay in L2); "cold": a ring of `--copies` layers (about 40 MB), so the blocks come
from L3 / memory as in a real decode step. Median of `--repeats` calls, one thread unless `--threads`.

    .venv/bin/python bench/quant_kernels.py [--levels amx,avx2,portable] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tt_backend.devices.cpu.isa import probe
from tt_backend.devices.cpu.kernels import load_kernels
from tt_backend.devices.cpu.quant import BLOCK_BYTES, BLOCK_WEIGHTS, FORMAT_IDS, QuantFormat

OUT, IN = 576, 1536
FORMATS: tuple[QuantFormat, ...] = ("q4_1", "q4_k", "q5_k", "q6_k")
SCALES = {"q4_1": (0, 2), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}


def random_blocks(fmt: QuantFormat, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    n = IN // BLOCK_WEIGHTS[fmt]
    b = torch.randint(0, 256, (OUT, n, BLOCK_BYTES[fmt]), dtype=torch.uint8, generator=gen)
    for at in SCALES[fmt]:
        scales = (torch.rand(OUT, n, generator=gen) * 2e-3).half()
        b[..., at:at + 2] = scales.view(torch.uint8).view(OUT, n, 2)
    return b.reshape(OUT, -1).contiguous()


def gb_per_s(level: str, fmt: QuantFormat, copies: int, repeats: int) -> tuple[float, float]:
    k = load_kernels(level)  # type: ignore[arg-type]
    ring = [random_blocks(fmt, seed) for seed in range(copies)]
    x = torch.randn(1, IN)
    nbytes = ring[0].numel()

    def median_s(pick: int) -> float:
        times = []
        for i in range(repeats + 5):
            w = ring[i % pick]
            start = time.perf_counter()
            k.quant_linear(x, w, FORMAT_IDS[fmt], IN, None, 32)
            if i >= 5:
                times.append(time.perf_counter() - start)
        return statistics.median(times)

    return nbytes / median_s(1) / 1e9, nbytes / median_s(copies) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default=",".join(reversed(probe().levels)))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--copies", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=400)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"[{OUT}, {IN}] layer, 1 row, {args.threads} thread(s); GB/s of blocks read (hot / cold)")
    print(f"{'level':<12}" + "".join(f"{f + ' (' + str(random_blocks(f, 0).numel() // 1000) + ' kB)':>24}"
                                     for f in FORMATS))
    for level in args.levels.split(","):
        cells = [gb_per_s(level, f, args.copies, args.repeats) for f in FORMATS]
        print(f"{level:<12}" + "".join(f"{hot:>13.1f} / {cold:>6.1f}" for hot, cold in cells))


if __name__ == "__main__":
    main()
