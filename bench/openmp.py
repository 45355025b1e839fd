"""Which OpenMP runtime serves this CPU faster: torch's GNU libgomp or Intel's libiomp5 (preloaded).

Each runtime runs in a child process of its own (the runtime is fixed when the process starts):
the linear layers of one step of the default model's shapes (30 layers of qkv, o, gate_up, down;
the LM head on the logits rows) on the path `dtype=auto` takes on this CPU (`ComputePlan`), from a
thread that is not the main one, as the engine thread calls them, at 1 and 32 rows (decode) and
784 rows (a prefill wave of 8 x 100 tokens). Prints the median ms of each and the ratio.

`--choose FILE` prints the runtime recorded in FILE for this CPU, measuring and recording it first
when FILE holds none for this CPU: `scripts/setup.sh` and `scripts/serve.sh` use it.

Intel OpenMP helped on the Intel machine it was first measured on (20 vs 14 tok/s single-stream)
and made fp32 products 25-30% slower on an AMD Zen 3: hence a measurement, not a vendor rule. (Much
of that help was libgomp's slowdown while two threads hold OpenMP pools, the main thread that had
loaded the model and the engine thread; the engine is now built on a thread that ends first:
`bench/openmp_threads.py`.)

    .venv/bin/python bench/openmp.py [--choose .venv/.tt_backend-openmp]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS = (1, 32, 784)
HIDDEN, INTERMEDIATE, VOCAB = 576, 1536, 49152
LAYER_SHAPES = [(HIDDEN, 960), (HIDDEN, HIDDEN), (HIDDEN, 2 * INTERMEDIATE), (INTERMEDIATE, HIDDEN)]


def measure(repeats: int) -> dict[str, float]:
    """In this process: median ms of the step's linears at each row count, from a worker thread."""
    import torch

    from tt_backend.devices.cpu.compute_plan import ComputePlan
    from tt_backend.devices.cpu.linears import convert_linears

    plan = ComputePlan.resolve(torch.device("cpu"))
    layers = torch.nn.Sequential(*(torch.nn.Linear(i, o, bias=False) for i, o in LAYER_SHAPES),
                                 torch.nn.Linear(HIDDEN, VOCAB, bias=False)).to(plan.activations)
    convert_linears(layers, plan)
    result: dict[str, float] = {}

    def run() -> None:
        with torch.inference_mode():
            for rows in ROWS:
                xs = [torch.randn(rows, m.in_features).to(plan.activations) for m in layers]
                head = xs[-1][: min(rows, 8)]  # the LM head sees the logits rows only
                times = []
                for i in range(repeats + 2):
                    start = time.perf_counter()
                    for _ in range(30):
                        for m, x in zip(layers[:4], xs[:4], strict=True):
                            m(x)
                    layers[4](head)
                    if i >= 2:
                        times.append(time.perf_counter() - start)
                result[f"{rows} rows"] = statistics.median(times) * 1e3

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    result["plan"] = f"{plan.level} {plan.dtype_name}, linear {plan.linear}"  # type: ignore[assignment]
    return result


def iomp() -> Path | None:
    lib = Path(sys.prefix) / "lib" / "libiomp5.so"
    return lib if lib.is_file() else None


def child(runtime: str, repeats: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LD_PRELOAD", None)
    if runtime == "intel":
        env["LD_PRELOAD"] = str(iomp())
    out = subprocess.run([sys.executable, __file__, "--child", "--repeats", str(repeats)], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def cpu_tag() -> str:
    """This CPU (model and flags): a recorded choice holds for the machine it was measured on."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        text = ""
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags", "Features"))][:2]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--choose", type=Path, help="the runtime recorded here for this CPU (measured first "
                        "when there is none); printed last")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.repeats)))
        return
    if args.choose and args.choose.is_file():
        tag, _, recorded = args.choose.read_text(encoding="utf-8").strip().partition(" ")
        if tag == cpu_tag() and recorded in ("gnu", "intel"):
            print(recorded)
            return
    if iomp() is None:
        choice, results = "gnu", {}
        print("Intel OpenMP (libiomp5) is not installed in this environment: GNU OpenMP")
    else:
        results = {rt: child(rt, args.repeats) for rt in ("gnu", "intel")}
        print(f"the step's linear layers from a worker thread ({results['gnu']['plan']}), median ms")
        print(f"{'rows':>5} {'GNU libgomp':>12} {'Intel libiomp5':>15} {'gnu/intel':>10}")
        for rows in ROWS:
            g, i = results["gnu"][f"{rows} rows"], results["intel"][f"{rows} rows"]
            print(f"{rows:>5} {g:>12.2f} {i:>15.2f} {g / i:>10.2f}")
        total = {rt: sum(v for k, v in r.items() if k != "plan") for rt, r in results.items()}
        choice = "intel" if total["intel"] < total["gnu"] else "gnu"
        print(f"sum: gnu {total['gnu']:.1f} ms, intel {total['intel']:.1f} ms -> {choice}")
    if args.choose:
        args.choose.write_text(f"{cpu_tag()} {choice}\n", encoding="utf-8")
        print(choice)


if __name__ == "__main__":
    main()
