"""Where the CPU goes while our server streams: serves the default model as `bench/compare.py` does
(`scripts/serve.sh`, prefix caching off), drives it with compare.py's prompts and client at
`--concurrency`, and prints output tok/s with each process's share of a core over the measured run
(from /proc: the tt_llm stub, tritonserver, the OpenAI front, this client) and its CPU per output
token. `--path front` streams through the OpenAI front, `--path direct` straight to `tt_llm`
over Triton's HTTP `generate_stream`.

On 2 cores every process beside the stub takes its time from the step's two OpenMP threads, and each
region of the step waits for whichever thread was preempted: at c=32 the engine did ~600 tok/s in
process (bench/in_process.py), ~490 direct and ~455-480 through the front, with the front at ~10% of
a core and tritonserver at ~8%.

    .venv/bin/python bench/serving_cpu.py --concurrency 32 --path front
    .venv/bin/python bench/serving_cpu.py --concurrency 32 --path direct
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from pathlib import Path

from compare import measure, prompt_text, served_model, start_ours, stop, stream_openai, stream_tt_llm
from reliability_clients import server_processes

from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.text.tokenizer import load_tokenizer


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far, every thread's."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--path", choices=("front", "direct"), default="front")
    parser.add_argument("--requests", type=int, default=0, help="default: 3 x concurrency")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--port", type=int, default=18400)
    args = parser.parse_args()
    tokenizer = load_tokenizer(resolve_model_dir(""))
    count = args.requests or 3 * args.concurrency
    prompts = [prompt_text(tokenizer, args.prompt_tokens, seed) for seed in range(count)]
    server = start_ours(args.port, log_name="serving_cpu_server.log")
    try:
        if args.path == "front":
            stream, port = functools.partial(stream_openai, model=served_model(args.port + 3)), args.port + 3
        else:
            stream, port = stream_tt_llm, args.port
        measure(stream, port, prompts[:8], 8, 16)  # warm the path
        processes = {**server_processes(server.pid), "this client": os.getpid()}
        before, start = {name: cpu_seconds(pid) for name, pid in processes.items()}, time.perf_counter()
        run = measure(stream, port, prompts, args.concurrency, args.max_tokens)
        seconds = time.perf_counter() - start
        used = {name: cpu_seconds(pid) - before[name] for name, pid in processes.items()}
    finally:
        stop(server)
    print(f"c={args.concurrency} through the {args.path}: {run.tokens / seconds:.1f} output tok/s "
          f"({run.tokens} tokens in {seconds:.1f} s)")
    print(f"{'% of a core':>11} {'us/token':>9}  process")
    for name, cpu in sorted(used.items(), key=lambda item: -item[1]):
        print(f"{100 * cpu / seconds:>11.1f} {1e6 * cpu / max(run.tokens, 1):>9.0f}  {name}")


if __name__ == "__main__":
    main()
