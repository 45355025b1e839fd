"""Reliability under load with cancellations: every request ends exactly once, nothing leaks.

Starts a server (scripts/serve.sh, its own ports, the OpenAI front on), then sends `--requests`
requests at concurrency `--concurrency`, spread over the gRPC stream (`tt_llm`), HTTP
`generate_stream` and the OpenAI front's streamed completions, half greedy and half seeded at
temperature 0.8, with 8, 16, 32 or 48 output tokens. `--cancel` of them (20%) are cancelled: before the first
token, or after 1-8 tokens. Prints one row: sent / completed / cancelled / failed with an error /
stuck (no end within `--timeout`) / lost (ended without a final response), plus the greedy requests
whose text differs from the same request run alone, and the server's KV usage, running and waiting
requests and RSS before and after. Exits non-zero if anything is stuck, lost, differs or leaks.

    make reliability                              # = .venv/bin/python bench/reliability.py
    .venv/bin/python bench/reliability.py --requests 200 --concurrency 16
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests
import tritonclient.grpc as grpcclient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import prompt_text, start_ours, stop  # noqa: E402


@dataclass(frozen=True)
class Job:
    index: int
    path: str
    """grpc, http or openai."""
    prompt: str
    sampling: dict[str, object]
    cancel_after: int | None
    """Cancel after this many text chunks (0: before the first token); None: run to the end."""


@dataclass
class Outcome:
    ended: str = "stuck"
    """completed, cancelled, error, stuck or lost."""
    text: str = ""
    finals: int = 0


def _tensor(name: str, value: np.ndarray, dtype: str) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(value.shape), dtype)
    t.set_data_from_numpy(value)
    return t


def run_grpc(port: int, job: Job, timeout: float) -> Outcome:
    out = Outcome()
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    inputs = [_tensor("text_input", np.array([job.prompt.encode()], dtype=np.object_), "BYTES"),
              _tensor("sampling_parameters", np.array([json.dumps(job.sampling).encode()], dtype=np.object_),
                      "BYTES"),
              _tensor("stream", np.array([True]), "BOOL"),
              _tensor("exclude_input_in_output", np.array([True]), "BOOL")]
    chunks = 0
    try:
        client.async_stream_infer("tt_llm", inputs, enable_empty_final_response=True)
        if job.cancel_after == 0:
            client.stop_stream(cancel_requests=True)
            out.ended = "cancelled"
            return out
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                result, error = events.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if error is not None:
                out.ended = "error"
                return out
            text = result.as_numpy("text_output")
            if text is not None:
                out.text += text.reshape(-1)[0].decode()
                chunks += 1
            if result.get_response().parameters["triton_final_response"].bool_param:
                out.finals += 1
                out.ended = "completed"
                return out
            if job.cancel_after is not None and chunks >= job.cancel_after:
                client.stop_stream(cancel_requests=True)
                out.ended = "cancelled"
                return out
        return out
    finally:
        client.stop_stream()
        client.close()


def run_http(port: int, job: Job, timeout: float) -> Outcome:
    out = Outcome()
    body = {"text_input": job.prompt, "sampling_parameters": json.dumps(job.sampling), "stream": True,
            "exclude_input_in_output": True, "return_finish_reason": True}
    return _sse(f"http://127.0.0.1:{port}/v2/models/tt_llm/generate_stream", body, job, out, timeout,
                lambda e: (e.get("text_output", ""), e.get("finish_reason") not in (None, "None")))


def run_openai(port: int, job: Job, timeout: float, model: str) -> Outcome:
    out = Outcome()
    body = {"model": model, "prompt": job.prompt, "stream": True, **job.sampling}
    return _sse(f"http://127.0.0.1:{port}/v1/completions", body, job, out, timeout,
                lambda e: (e["choices"][0]["text"], e["choices"][0]["finish_reason"] is not None)
                if e.get("choices") else ("", False))


def _sse(url: str, body: dict[str, object], job: Job, out: Outcome, timeout: float,
         read: Callable[[dict[str, Any]], tuple[str, bool]]) -> Outcome:
    chunks = 0
    try:
        with requests.post(url, json=body, stream=True, timeout=timeout) as r:
            if r.status_code != 200:
                out.ended = "error"
                return out
            if job.cancel_after == 0:
                out.ended = "cancelled"
                return out  # closing the response hangs up
            for line in r.iter_lines():
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    out.ended = "error"
                    return out
                text, final = read(event)
                out.text += text
                chunks += bool(text)
                if final:
                    out.finals += 1
                    out.ended = "completed"
                elif job.cancel_after is not None and chunks >= job.cancel_after:
                    out.ended = "cancelled"
                    return out
            if out.ended != "completed":
                out.ended = "lost"
    except requests.Timeout:
        out.ended = "stuck"
    return out


def server_state(metrics_port: int) -> dict[str, float]:
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    state: Counter[str] = Counter()
    for line in text.splitlines():
        for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting"):
            if line.startswith(name + "{"):
                state[name.split(":")[1]] += float(line.rsplit(" ", 1)[1])
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
            state["aborted"] += float(line.rsplit(" ", 1)[1])
    return dict(state)


def stub_rss_mb(server_pattern: str) -> float:
    """RSS of the Python backend stubs (tritonserver's children) of the server matching the pattern."""
    total = 0.0
    servers = subprocess.run(["pgrep", "-f", server_pattern], capture_output=True, text=True).stdout.split()
    children = [c for s in servers for c in subprocess.run(["pgrep", "-P", s], capture_output=True,
                                                            text=True).stdout.split()]
    for pid in children:
        try:
            status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"triton_python_backend_stub" in cmd:
            rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
            total += rss / 1024
    return total


def settle(metrics_port: int, timeout: float = 30) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        state = server_state(metrics_port)
        if state.get("num_requests_running", 0) + state.get("num_requests_waiting", 0) == 0 or \
                time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--cancel", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=18600)
    args = parser.parse_args()
    from tt_backend.models.checkpoint import resolve_model_dir
    from tt_backend.text.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(resolve_model_dir(""))
    rng = random.Random(args.seed)
    prompts = [prompt_text(tokenizer, rng.choice((16, 48, 96)), seed) for seed in range(24)]
    jobs = []
    for i in range(args.requests):
        greedy = rng.random() < 0.5
        sampling: dict[str, object] = {"max_tokens": rng.choice((8, 16, 32, 48)), "ignore_eos": True,
                                       "temperature": 0 if greedy else 0.8, "seed": rng.randrange(1 << 30)}
        cancel = rng.choice((0, 1, 2, 4, 8)) if rng.random() < args.cancel else None
        jobs.append(Job(i, rng.choice(("grpc", "http", "openai")), rng.choice(prompts), sampling, cancel))
    http, grpc, metrics, front = args.port, args.port + 1, args.port + 2, args.port + 3
    # fp32: greedy outputs under load are compared exactly with the same requests run alone.
    proc = start_ours(args.port, ("dtype=float32",), log_name="reliability_server.log", prefix_caching=True)
    try:
        model = requests.get(f"http://127.0.0.1:{front}/v1/models", timeout=10).json()["data"][0]["id"]
        marker = f"tritonserver .*--grpc-port {grpc}"
        runners = {"grpc": lambda j: run_grpc(grpc, j, args.timeout),
                   "http": lambda j: run_http(http, j, args.timeout),
                   "openai": lambda j: run_openai(front, j, args.timeout, model)}
        # The greedy requests that run to their end, alone first: what the loaded run must equal.
        alone = {}
        for job in jobs:
            key = (job.prompt, job.sampling["max_tokens"])
            if job.sampling["temperature"] == 0 and job.cancel_after is None and key not in alone:
                alone[key] = run_http(http, Job(-1, "http", job.prompt, job.sampling, None),
                                      args.timeout).text
        before, rss_before = settle(metrics), stub_rss_mb(marker)
        started = time.monotonic()
        with ThreadPoolExecutor(args.concurrency) as pool:
            outcomes = list(pool.map(lambda j: runners[j.path](j), jobs))
        seconds = time.monotonic() - started
        after, rss_after = settle(metrics), stub_rss_mb(marker)
        ready = requests.get(f"http://127.0.0.1:{http}/v2/health/ready", timeout=10).status_code == 200
    finally:
        stop(proc)
    ended = Counter(o.ended for o in outcomes)
    twice = sum(1 for o in outcomes if o.finals > 1)
    differ = [j.index for j, o in zip(jobs, outcomes, strict=True) if o.ended == "completed"
              and j.sampling["temperature"] == 0 and o.text != alone[(j.prompt, j.sampling["max_tokens"])]]
    print(f"{args.requests} requests at concurrency {args.concurrency} over gRPC, HTTP and the OpenAI front, "
          f"{args.cancel:.0%} cancelled, in {seconds:.1f} s")
    print("sent | completed | cancelled | error | stuck | lost | two finals | greedy differing from alone")
    print(f"{len(jobs):4d} | {ended['completed']:9d} | {ended['cancelled']:9d} | {ended['error']:5d} | "
          f"{ended['stuck']:5d} | {ended['lost']:4d} | {twice:10d} | {len(differ)} of {len(alone)} distinct")
    print(f"the server aborted {after.get('aborted', 0) - before.get('aborted', 0):.0f} requests (the "
          f"cancelled ones whose stream it saw end before they finished)")
    print(f"server before: {before}, stub RSS {rss_before:.0f} MB")
    print(f"server after:  {after}, stub RSS {rss_after:.0f} MB; ready: {ready}")
    leaked = any(after.get(k, 0) for k in ("kv_cache_usage_perc", "num_requests_running",
                                            "num_requests_waiting"))
    bad = ended["stuck"] or ended["lost"] or twice or differ or leaked or not ready
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
