"""Where the CPU goes while our server streams: serves the default model as `bench/compare.py` does
(`scripts/serve.sh`, prefix caching off), drives it with compare.py's prompts and client at
`--concurrency`, and prints output tok/s with each process's share of a core over the measured run
(from /proc: the Python backend stub, tritonserver, the OpenAI front, this client) and its CPU per
output token. `--path front` streams through the OpenAI front, `--path direct` straight to `tt_llm`
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

import requests
from compare import measure, prompt_text, start_ours, stop, stream_openai, stream_tt_llm

from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.text.tokenizer import load_tokenizer


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """Every process's command line (cut to 90 characters) and user + system CPU seconds so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(entry.name)] = (command[:90], (int(fields[11]) + int(fields[12])) / tick)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--path", choices=("front", "direct"), default="front")
    parser.add_argument("--requests", type=int, default=0, help="default: 3 x concurrency")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--port", type=int, default=18400)
    parser.add_argument("--top", type=int, default=6, help="processes listed, busiest first")
    args = parser.parse_args()
    tokenizer = load_tokenizer(resolve_model_dir(""))
    count = args.requests or 3 * args.concurrency
    prompts = [prompt_text(tokenizer, args.prompt_tokens, seed) for seed in range(count)]
    server = start_ours(args.port, log_name="serving_cpu_server.log")
    try:
        if args.path == "front":
            models = requests.get(f"http://127.0.0.1:{args.port + 3}/v1/models", timeout=10).json()
            model = models["data"][0]["id"]
            stream, port = functools.partial(stream_openai, model=model), args.port + 3
        else:
            stream, port = stream_tt_llm, args.port
        measure(stream, port, prompts[:8], 8, 16)  # warm the path
        before, start = cpu_seconds(), time.perf_counter()
        run = measure(stream, port, prompts, args.concurrency, args.max_tokens)
        seconds, after = time.perf_counter() - start, cpu_seconds()
    finally:
        stop(server)
    print(f"c={args.concurrency} through the {args.path}: {run.tokens / seconds:.1f} output tok/s "
          f"({run.tokens} tokens in {seconds:.1f} s)")
    used = sorted(((cpu - before.get(pid, ("", 0.0))[1], command) for pid, (command, cpu) in after.items()),
                  reverse=True)
    print(f"{'% of a core':>11} {'us/token':>9}  process")
    for cpu, command in used[:args.top]:
        print(f"{100 * cpu / seconds:>11.1f} {1e6 * cpu / max(run.tokens, 1):>9.0f}  {command}")


if __name__ == "__main__":
    main()
