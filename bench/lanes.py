"""Engine output throughput at a fixed concurrency over 1, 2 and 4 in-process lanes.

After one untimed warm-up run, each setting serves `--concurrency` greedy requests (one chat
prompt, `--max-tokens` tokens with ignore_eos, queued before the engine starts) with
data_parallel_size = lanes and max_num_seqs = concurrency / lanes, so every setting runs the
same number of sequences at once.

    LD_PRELOAD=.venv/lib/libiomp5.so .venv/bin/python bench/lanes.py --concurrency 16
"""

from __future__ import annotations

import argparse

from decode import engine_throughput  # bench/decode.py

from tt_backend.models.checkpoint import resolve_model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--lanes", default="1,2,4")
    args = parser.parse_args()
    model_dir = resolve_model_dir("")
    # The first engine of a process runs slower (measured: 149 vs 234 tok/s for the same setting
    # run first and last); an untimed run takes that cost.
    engine_throughput(model_dir, args.dtype, args.device, args.concurrency, 16)
    base = None
    for lanes in (int(n) for n in args.lanes.split(",")):
        tok_s = engine_throughput(model_dir, args.dtype, args.device, args.concurrency, args.max_tokens,
                                  lanes=lanes)
        base = base or tok_s
        print(f"{lanes} lane(s) x {args.concurrency // lanes} seqs: {tok_s:7.1f} output tok/s "
              f"({tok_s / base:.2f}x the first)", flush=True)


if __name__ == "__main__":
    main()
