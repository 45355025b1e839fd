"""Decode of the default GGUF with its quantized blocks kept (weight_dtype=quantized) against the same
file widened (weight_dtype=bfloat16, what was served before), side by side.

For each setting, in turns (`--rounds`), the engine serves `--concurrency` greedy requests of
`--max-tokens` tokens (ignore_eos) and the output tok/s is recorded; prints the best of each, the
ratio, and the bytes of linear-layer weights one decode step reads (every linear layer and the LM
head once; the embedding reads one row a token).

    .venv/bin/python bench/weight_dtype.py                    # c=1, 128 tokens, 3 rounds
    .venv/bin/python bench/weight_dtype.py --cpu-isa avx2
    .venv/bin/python bench/weight_dtype.py --settings q8_0,q4_0,quantized,bfloat16   # quantized at load too
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from decode import engine_throughput

from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.linears import PackedLinear, WideLinear
from tt_backend.devices.cpu.quant import QuantizedLinear
from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.models.gguf_linears import GgufLinears, gguf_source
from tt_backend.models.loader import load_model


def step_bytes(weight_dtype: str, dtype: str, cpu_isa: str) -> tuple[int, str]:
    """Bytes of linear weights a decode step reads, and the plan's dtypes."""
    gguf = gguf_source("")
    assert gguf is not None
    quantized = GgufLinears.read(gguf) if weight_dtype in ("auto", "quantized") else None
    plan = ComputePlan.resolve(torch.device("cpu"), dtype, cpu_isa, weight_dtype=weight_dtype,
                               quantized_checkpoint=quantized is not None)
    module = load_model(resolve_model_dir(""), plan, quantized=quantized).module
    total = 0
    for m in module.modules():
        buffers: list[Any] = []
        if isinstance(m, QuantizedLinear):
            buffers = [m.blocks]
        elif isinstance(m, WideLinear):
            buffers = [m.weight]
        elif isinstance(m, PackedLinear):
            buffers = [m.packed_weight]
        elif isinstance(m, torch.nn.Linear):
            buffers = [m.weight]
        total += sum(b.numel() * b.element_size() for b in buffers)
    return total, plan.dtype_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--cpu-isa", default="auto")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings", default="quantized,bfloat16",
                        help="weight_dtype values, comma-separated (q8_0 / q4_0: quantized at load)")
    args = parser.parse_args()
    settings = tuple(args.settings.split(","))
    gguf = gguf_source("")
    assert gguf is not None
    best = dict.fromkeys(settings, 0.0)
    for r in range(args.rounds):
        for weight_dtype in settings:
            tok_s = engine_throughput(gguf, args.dtype, "cpu", args.concurrency, args.max_tokens,
                                      cpu_isa=args.cpu_isa, weight_dtype=weight_dtype)
            best[weight_dtype] = max(best[weight_dtype], tok_s)
            print(f"round {r}: weight_dtype={weight_dtype}: {tok_s:.1f} tok/s", flush=True)
    print(f"c={args.concurrency}, {args.max_tokens} tokens, cpu_isa={args.cpu_isa}, dtype={args.dtype}, "
          f"best of {args.rounds}")
    for weight_dtype in settings:
        nbytes, dtypes = step_bytes(weight_dtype, args.dtype, args.cpu_isa)
        print(f"  weight_dtype={weight_dtype:<9} {best[weight_dtype]:7.1f} tok/s  {nbytes / 1e6:6.1f} MB of "
              f"linear weights read per token  ({dtypes})")
    for weight_dtype in settings:
        if "bfloat16" in settings and weight_dtype != "bfloat16":
            print(f"  {weight_dtype} / bfloat16: {best[weight_dtype] / best['bfloat16']:.2f}x")


if __name__ == "__main__":
    main()
