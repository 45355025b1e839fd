"""Two servers behind vLLM's router: requests per server and prefix-cache hit rates under the
cache-aware policy against round robin, on the same workload (prompts sharing long prefixes).

    .venv/bin/python bench/router.py [--servers 2] [--prefixes 3] [--questions 4] [--concurrency 2]

Starts the servers and a cache-aware router with scripts/serve_cluster.py, runs the workload, then
a round-robin router over the same servers and the same workload on fresh documents (so neither run
finds the other's prefixes cached). Each request is a chat turn: a document of ~450 tokens (its
prefix) and one question; requests go out in rounds over the documents, `--concurrency` at a time.
Prints, per policy and server: requests, prompt tokens looked up, prefix-cache hits, hit rate.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.serve_cluster import ROUTER_DEFAULTS  # noqa: E402
from tests.integration.clients import idle_scrape, series  # noqa: E402
from tests.integration.cluster import free_port_block, start_cluster, stop_cluster  # noqa: E402
from tests.integration.test_scheduling import document  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
QUESTIONS = ("Which animal was seen first?", "Which place comes up most?", "How many facts are there?",
             "Which day is mentioned last?", "Name one animal and its place.", "Summarise in five words.")


def workload(prefixes: int, questions: int, seed: int) -> list[str]:
    docs = [document(30, seed=seed + 17 * i) for i in range(prefixes)]
    return [f"{docs[p]} {QUESTIONS[q]}" for q in range(questions) for p in range(prefixes)]


def run(router: str, prompts: list[str], concurrency: int) -> None:
    def one(content: str) -> int:
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 8,
                "temperature": 0, "ignore_eos": True}
        return httpx.post(f"{router}/chat/completions", json=body, timeout=300).status_code

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        statuses = list(pool.map(one, prompts))
    assert statuses == [200] * len(prompts), statuses


def per_server(metrics: tuple[str, ...], before: list[dict[str, float]]) -> list[tuple[int, int, int]]:
    """(requests, prefix-cache queries, hits) each server counted since `before`."""
    out = []
    for url, old in zip(metrics, before, strict=True):
        now = idle_scrape(url)
        keys = (series("vllm:request_success_total", finished_reason="length"),
                series("vllm:prefix_cache_queries_total"), series("vllm:prefix_cache_hits_total"))
        out.append(tuple(int(now[k] - old.get(k, 0)) for k in keys))
    return out


def report(policy: str, counts: list[tuple[int, int, int]]) -> None:
    total_q, total_h = sum(c[1] for c in counts), sum(c[2] for c in counts)
    for i, (n, queries, hits) in enumerate(counts):
        print(f"{policy:12s} server {i}: {n:3d} requests, {queries:6d} prompt tokens looked up, "
              f"{hits:6d} hits ({hits / max(queries, 1):.1%})")
    print(f"{policy:12s} all:      {sum(c[0] for c in counts):3d} requests, "
          f"hit rate {total_h / max(total_q, 1):.1%}")


def wait_healthy(url: str) -> None:
    for _ in range(300):
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} never answered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--prefixes", type=int, default=3)
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="bench_router."))
    started = time.monotonic()
    proc, cluster = start_cluster(log_dir, args.servers, "cache_aware", "dtype=float32")
    print(f"cluster of {args.servers} up in {time.monotonic() - started:.0f} s (logs {log_dir})")
    rr: subprocess.Popen[bytes] | None = None
    try:
        before = [idle_scrape(m) for m in cluster.metrics]
        run(cluster.router, workload(args.prefixes, args.questions, seed=1000), args.concurrency)
        report("cache_aware", per_server(cluster.metrics, before))

        port = free_port_block(2)
        workers = list(cluster.workers)
        rr = subprocess.Popen([str(Path(sys.executable).parent / "vllm-router"), "--host", "127.0.0.1",
                               "--port", str(port), "--prometheus-port", str(port + 1),
                               "--worker-urls", *workers, "--policy", "round_robin", *ROUTER_DEFAULTS],
                              stdout=open(log_dir / "router_rr.log", "wb"),  # noqa: SIM115
                              stderr=subprocess.STDOUT)
        wait_healthy(f"http://127.0.0.1:{port}/health")
        before = [idle_scrape(m) for m in cluster.metrics]
        run(f"http://127.0.0.1:{port}/v1", workload(args.prefixes, args.questions, seed=2000),
            args.concurrency)
        report("round_robin", per_server(cluster.metrics, before))
    finally:
        if rr is not None:
            rr.terminate()
            rr.wait()
        stop_cluster(proc)


if __name__ == "__main__":
    main()
