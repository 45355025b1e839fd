"""What a second thread holding OpenMP workers costs the thread that steps the engine, and what building
the engine on a thread of its own (`devices/torch/own_thread.py`) gives back.

Each case runs in a child process of its own (a thread's OpenMP pool lives as long as the thread):
- `op`: the median time of one parallel torch op (exp over 4 Mi floats) on a worker thread, alone,
  and while the main thread, having run one such op first, still lives with its pool;
- `step`: the median time of the same prefill step (`--rows` rows of `--tokens` tokens of the default
  model, dtype auto, its default trace mode), and of a decode step of those rows, run from a worker
  thread, as the engine thread runs them,
  with the engine built as `build_engine` builds it now (on a thread that has ended) and as it was
  built before (on the main thread, which lives on).
Prints each and the ratio; the runtime is torch's (GNU libgomp) unless LD_PRELOAD says otherwise.

    .venv/bin/python bench/openmp_threads.py [--rows 1 --tokens 100 --repeats 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def on_worker(fn: Callable[[], float]) -> float:
    out: list[float] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def op_case(main_first: bool, repeats: int) -> float:
    import torch

    x = torch.randn(4 << 20)
    if main_first:
        torch.exp(x)  # the main thread now holds an OpenMP pool, and lives on
    return on_worker(lambda: median_ms(lambda: torch.exp(x), repeats))


def step_case(build_on_main: bool, rows: int, tokens: int, repeats: int) -> list[float]:
    from tt_backend.assembly import build_engine
    from tt_backend.assembly.torch_engine import _build
    from tt_backend.config import EngineConfig
    from tt_backend.contract.step import PlannedRow, StepPlan

    config = EngineConfig(max_model_len=1024, max_num_seqs=max(rows, 8))
    engine = _build(config) if build_on_main else build_engine(config)
    block = engine.scheduler.config.block_size
    per_row = -(-tokens // block)
    blocks = [tuple(range(r * per_row, (r + 1) * per_row)) for r in range(rows)]
    prompts = [tuple(100 + (31 * r + t) % 30000 for t in range(tokens)) for r in range(rows)]
    prefill = StepPlan("prefill", tuple(PlannedRow(prompts[r], 0, blocks[r], True, lane=0, slot=r)
                                        for r in range(rows)))
    decode = StepPlan("decode", tuple(PlannedRow((200 + r,), tokens - 1, blocks[r], True, lane=0, slot=r)
                                      for r in range(rows)))
    ms = [on_worker(lambda plan=plan: median_ms(lambda: engine.runner.execute(plan), repeats))
          for plan in (prefill, decode)]
    engine.shutdown()
    return ms


def child(case: str, args: argparse.Namespace) -> Any:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, __file__, "--child", case, "--rows", str(args.rows), "--tokens", str(args.tokens),
           "--repeats", str(args.repeats)]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--child", choices=("op-alone", "op-two", "step-own", "step-main"))
    args = parser.parse_args()
    if args.child:
        if args.child.startswith("op"):
            value = op_case(args.child == "op-two", args.repeats * 10)
        else:
            value = step_case(args.child == "step-main", args.rows, args.tokens, args.repeats)
        print(json.dumps(value))
        return
    runtime = "preloaded: " + os.environ["LD_PRELOAD"] if os.environ.get("LD_PRELOAD") else "torch's libgomp"
    print(f"OpenMP runtime: {runtime}; {os.cpu_count()} CPUs")
    alone, two = child("op-alone", args), child("op-two", args)
    print(f"exp over 4 Mi floats on a worker thread: alone {alone:.3f} ms, with the main thread's pool alive "
          f"{two:.3f} ms ({two / alone:.2f}x)")
    own, on_main = child("step-own", args), child("step-main", args)
    print(f"{args.rows} rows from the stepping thread: engine built on a thread of its own / on the main "
          "thread")
    names = (f"prefill of {args.tokens} tokens", f"decode at {args.tokens} tokens")
    for name, a, b in zip(names, own, on_main, strict=True):
        print(f"  {name:24} {a:7.1f} ms / {b:7.1f} ms ({b / a:.2f}x)")


if __name__ == "__main__":
    main()
