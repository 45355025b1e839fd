"""Where a bf16 plan's layers should stop reading a GGUF's blocks (`quant.DECODE_BLOCK_ROWS`): one
transformer layer of the default model's shapes (q/k/v, o, gate/up, down in Q4_0 blocks) and its Q8_0
LM head, bf16 inputs at 1 to 64 rows: `quant_linear` on the blocks (exact fp32 weights), the blocks read as
bf16 weights (`blocks_or_packed_linear`'s AVX512-BF16 path, up to 8 rows) and oneDNN's bf16 kernel on the
prepacked widened weight. Median of `--repeats` calls per layer, summed over the layers. Needs AVX-512
(oneDNN's bf16 prepack).

    .venv/bin/python bench/blocks_or_packed.py [--level avx512_bf16] [--threads 2]
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time
from collections.abc import Callable

import torch

from tt_backend.devices.cpu.isa import probe
from tt_backend.devices.cpu.kernels import load_kernels
from tt_backend.devices.cpu.quant import FORMAT_IDS, QuantFormat, QuantizedTensor
from tt_backend.devices.cpu.quantize import quantize

SHAPES: tuple[tuple[int, int, QuantFormat], ...] = (
    (960, 576, "q4_0"), (576, 576, "q4_0"), (3072, 576, "q4_0"), (576, 1536, "q4_0"), (49152, 576, "q8_0"))


def median_s(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--level", default=probe().best)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernels = load_kernels(args.level)
    layers: list[tuple[QuantizedTensor, torch.Tensor]] = []
    for rows, cols, fmt in SHAPES:
        q = quantize(torch.randn(rows, cols) * 0.02, fmt)
        layers.append((q, torch.ops.mkldnn._reorder_linear_weight(q.dequantize().bfloat16())))
    print(f"level {args.level}, {args.threads} thread(s): one layer's linears and the LM head, ms")
    for m in (1, 2, 4, 8, 16, 32, 64):
        blocks = bf16_blocks = packed = 0.0
        for q, w in layers:
            x = torch.randn(m, q.cols).bfloat16()
            fmt = FORMAT_IDS[q.format]
            on_blocks = functools.partial(kernels.quant_linear, x, q.blocks, fmt, q.cols, None, 64)
            on_both = functools.partial(kernels.blocks_or_packed_linear, x, q.blocks, fmt, q.cols, w, None, 8)
            on_bf16 = functools.partial(torch.ops.mkldnn._linear_pointwise, x, w, None, "none", [], "")
            blocks += median_s(on_blocks, args.repeats)
            bf16_blocks += median_s(on_both, args.repeats) if m <= 8 else math.nan
            packed += median_s(on_bf16, args.repeats)
        print(f"  {m:3d} rows: fp32 blocks {blocks * 1e3:7.3f}  bf16 blocks {bf16_blocks * 1e3:7.3f}  "
              f"prepacked bf16 {packed * 1e3:7.3f}", flush=True)


if __name__ == "__main__":
    main()
