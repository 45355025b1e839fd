"""What sampling costs: engine output tok/s per kind of sampling, against greedy run side by side.

    LD_PRELOAD=.venv/lib/libiomp5.so .venv/bin/python bench/sampling.py [--concurrency 8]

Device-path rows choose tokens inside the traced decode step; host-path rows bring the logits back
and run the processor chain (forced with always_compat_sampling, or needed by the request).
"""

from __future__ import annotations

import argparse
from typing import Any

from decode import engine_throughput

from tt_backend.models.checkpoint import resolve_model_dir

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("greedy (device)", {"temperature": 0.0}, {}),
    ("temperature 0.8 (device)", {"temperature": 0.8}, {}),
    ("temperature 0.8, top_p 0.9 (device)", {"temperature": 0.8, "top_p": 0.9}, {}),
    ("temperature 0.8, top_p 0.9 (host, forced)", {"temperature": 0.8, "top_p": 0.9},
     {"always_compat_sampling": True}),
    ("greedy + logprobs 5 (host)", {"temperature": 0.0, "logprobs": 5}, {}),
    ("temperature 0.8 + repetition_penalty 1.1 (host)", {"temperature": 0.8, "repetition_penalty": 1.1}, {}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    model_dir = resolve_model_dir("")
    print(f"engine output tok/s, {args.concurrency} requests x {args.max_tokens} tokens, cpu {args.dtype}")
    baseline = None
    for name, sampling, options in CASES:
        rate = engine_throughput(model_dir, args.dtype, "cpu", args.concurrency, args.max_tokens,
                                 sampling=sampling, **options)
        baseline = baseline or rate
        print(f"{name:<50} {rate:8.1f} tok/s  {rate / baseline:5.2f}x greedy", flush=True)


if __name__ == "__main__":
    main()
