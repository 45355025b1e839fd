"""Reliability figures: does every request end exactly once, does every KV block come back, does the
server stay up and its memory flat? Each scenario drives a real tritonserver (scripts/serve.sh on
loopback) and prints sent / completed / cancelled / failed with an error / stuck (no end within
`--timeout`) / lost (ended without a final response or an error), plus what it checks besides:

- load:   `--requests` at `--concurrency` over the gRPC stream, HTTP generate_stream and the OpenAI
          front, half greedy, `--cancel` of them cancelled before the first token, mid-stream, or
          (long prompts, gRPC) while their prefill runs; the uncancelled greedy outputs must equal
          the same requests run alone. The bad-input corpus runs on the same server afterwards.
- inputs: the bad-input corpus (tests/integration/bad_input_corpus.py) with good streams alongside.
- kv:     prompts worth 10x the KV cache at once (num_kv_blocks=64): all finish with the tokens they
          give alone, with 20% cancelled mid-stream (some while preempted); preemptions counted and
          the longest wait for a token reported (progress, not livelock).
- faults: with fault_injection (allowed by TT_BACKEND_ALLOW_FAULT_INJECTION=1) under steady load:
          steps that raise (only their batch fails), the tt_llm stub killed with SIGKILL, and a step
          that hangs past step_timeout_s (the watchdog); recovery times measured.
- soak:   `--soak-minutes` of steady mixed load; RSS, open fds and threads of tritonserver, the
          tt_llm stub and the front sampled every minute; growth after the first minute reported.
- fuzz:   `--fuzz-requests` hypothesis-drawn requests (tests/fuzz, `--seed`; about 40% valid, the rest
          hostile) to tt_llm, the ensemble and the front, 16 at a time, beside greedy bystander streams:
          each ends with one final response, a valid result or an error naming its hostile field; the
          bystanders' tokens equal alone; the server is not restarted and ends idle.

Exits non-zero if anything is stuck, lost, differs, leaks, or the soak's RSS grows 5% or more.

    make reliability                                   # every scenario (about 50 minutes, 35 of them fuzz)
    .venv/bin/python bench/reliability.py --scenarios load,kv --requests 200 --concurrency 16
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from compare import RESULTS, prompt_text, served_model, start_ours, stop  # noqa: E402
from reliability_clients import (  # noqa: E402
    ENDINGS,
    Job,
    Outcome,
    leaked,
    ready,
    run_grpc,
    run_http,
    run_openai,
    sample,
    server_processes,
    settle,
)

SCENARIOS = ("load", "inputs", "kv", "faults", "soak", "fuzz")
RAISE_PREFILL, RAISE_DECODE, HANG_DECODE = 9999, 9997, 9998
"""First tokens of prompts whose prefill step raises, whose decode step raises, whose decode hangs."""
STEP_TIMEOUT_S = 5


@dataclass
class Row:
    scenario: str
    outcomes: Counter[str] = field(default_factory=Counter)
    twice: int = 0
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def http(self) -> int:
        return self.port

    @property
    def grpc(self) -> int:
        return self.port + 1

    @property
    def metrics(self) -> int:
        return self.port + 2

    @property
    def front(self) -> int:
        return self.port + 3

    def model(self) -> str:
        return served_model(self.front)

    def runner(self, timeout: float) -> Callable[[Job], Outcome]:
        model = self.model()
        paths: dict[str, Callable[[Job], Outcome]] = {
            "grpc": lambda j: run_grpc(self.grpc, j, timeout),
            "http": lambda j: run_http(self.http, j, timeout),
            "openai": lambda j: run_openai(self.front, j, timeout, model)}
        return lambda j: paths[j.path](j)


def start(port: int, log_name: str, *settings: str, prefix_caching: bool = False,
          env: dict[str, str] | None = None) -> Server:
    # fp32: greedy outputs under load are compared exactly with the same requests run alone.
    return Server(start_ours(port, ("dtype=float32", *settings), log_name=log_name,
                             prefix_caching=prefix_caching, env=env), port)


def tally(row: Row, outcomes: list[Outcome]) -> None:
    row.outcomes.update(o.ended for o in outcomes)
    row.twice += sum(1 for o in outcomes if o.finals > 1)


def greedy_alone(server: Server, jobs: list[Job], timeout: float) -> dict[tuple[str, object], str]:
    """Each distinct greedy job that runs to its end, run alone first (HTTP)."""
    alone: dict[tuple[str, object], str] = {}
    for job in jobs:
        key = (str(job.prompt), job.sampling["max_tokens"])
        if job.sampling["temperature"] == 0 and job.cancel_after is None and key not in alone:
            alone[key] = run_http(server.http, Job(-1, "http", job.prompt, job.sampling), timeout).text
    return alone


def compare_greedy(row: Row, jobs: list[Job], outcomes: list[Outcome],
                   alone: dict[tuple[str, object], str]) -> None:
    differ = [j.index for j, o in zip(jobs, outcomes, strict=True)
              if o.ended == "completed" and j.sampling["temperature"] == 0
              and o.text != alone[(str(j.prompt), j.sampling["max_tokens"])]]
    row.notes.append(f"greedy outputs differing from alone: {len(differ)} of {len(alone)} distinct")
    if differ:
        row.problems.append(f"greedy outputs differ from alone: jobs {differ[:10]}")


def check_after(row: Row, server: Server, before: dict[str, float]) -> dict[str, float]:
    after = settle(server.metrics)
    def delta(name: str) -> float:
        return after.get(name, 0) - before.get(name, 0)

    row.notes.append(f"after: KV usage {after.get('kv_cache_usage_perc', 0):.3f}, running "
                     f"{after.get('num_requests_running', 0):.0f}, waiting "
                     f"{after.get('num_requests_waiting', 0):.0f}, aborted +{delta('aborted'):.0f}, "
                     f"preemptions +{delta('num_preemptions_total'):.0f}")
    if leaked(after):
        row.problems.append(f"leaked: {after}")
    if not ready(server.http):
        row.problems.append("the server is not ready")
    return after


# ---- scenarios --------------------------------------------------------------------------------------
def scenario_load(server: Server, args: argparse.Namespace, tokenizer: Any) -> Row:
    row = Row("load")
    rng = random.Random(args.seed)
    prompts = [prompt_text(tokenizer, rng.choice((16, 48, 96)), seed) for seed in range(24)]
    long_prompts = [prompt_text(tokenizer, 3000, 100 + seed) for seed in range(4)]
    jobs = []
    for i in range(args.requests):
        greedy = rng.random() < 0.5
        sampling: dict[str, object] = {"max_tokens": rng.choice((8, 16, 32, 48)), "ignore_eos": True,
                                       "temperature": 0 if greedy else 0.8, "seed": rng.randrange(1 << 30)}
        if rng.random() < args.cancel:
            if rng.random() < 0.2:  # a long prompt, cancelled while its prefill runs
                jobs.append(Job(i, "grpc", rng.choice(long_prompts), sampling, 0, rng.uniform(0.1, 0.8)))
                continue
            cancel: int | None = rng.choice((0, 1, 2, 4, 8))
        else:
            cancel = None
        jobs.append(Job(i, rng.choice(("grpc", "http", "openai")), rng.choice(prompts), sampling, cancel))
    run = server.runner(args.timeout)
    alone = greedy_alone(server, jobs, args.timeout)
    before = settle(server.metrics)
    started = time.monotonic()
    with ThreadPoolExecutor(args.concurrency) as pool:
        outcomes = list(pool.map(run, jobs))
    tally(row, outcomes)
    long_cancels = sum(1 for j in jobs if j.cancel_delay_s)
    row.notes.append(f"{args.requests} requests at concurrency {args.concurrency} in "
                     f"{time.monotonic() - started:.1f} s; {long_cancels} of the cancels hit a 3000-token "
                     "prompt 0.1-0.8 s after it was sent (during its prefill)")
    compare_greedy(row, jobs, outcomes, alone)
    check_after(row, server, before)
    return row


def scenario_inputs(server: Server, args: argparse.Namespace, tokenizer: Any) -> Row:
    from tests.integration.bad_input_corpus import FRONT_CASES, TRITON_CASES, front_problem, triton_problem

    row = Row("inputs")
    good = [Job(i, "grpc", prompt_text(tokenizer, 64, 200 + i), {"max_tokens": 64, "temperature": 0,
                                                                  "ignore_eos": True}) for i in range(3)]
    alone = greedy_alone(server, good, args.timeout)
    before = settle(server.metrics)
    run = server.runner(args.timeout)
    with ThreadPoolExecutor(len(good)) as pool:
        streams = pool.map(run, good)
        problems = [p for case in TRITON_CASES if (p := triton_problem(f"127.0.0.1:{server.grpc}", case))]
        front = f"http://127.0.0.1:{server.front}/v1"
        problems += [p for case in FRONT_CASES if (p := front_problem(front, server.model(), case))]
        outcomes = list(streams)
    kinds = len(TRITON_CASES) + len(FRONT_CASES)
    row.outcomes["error"] += kinds - len(problems)
    row.outcomes["lost"] += len(problems)  # an answer other than its clear error
    row.problems += problems
    tally(row, outcomes)
    row.notes.append(f"{kinds} kinds of bad input ({len(TRITON_CASES)} tt_llm/ensemble, {len(FRONT_CASES)} "
                     f"front): {kinds - len(problems)} got their clear error; 3 good streams alongside")
    compare_greedy(row, good, outcomes, alone)
    check_after(row, server, before)
    return row


def scenario_kv(args: argparse.Namespace, tokenizer: Any) -> Row:
    row = Row("kv")
    blocks, block = 64, 16
    server = start(args.port + 10, "reliability_kv.log", f"num_kv_blocks={blocks}", "max_model_len=1024")
    try:
        prompts = [prompt_text(tokenizer, 195 + seed, seed) for seed in range(10)]  # distinct lengths
        rng = random.Random(args.seed + 1)
        sampling = {"max_tokens": 56, "temperature": 0, "ignore_eos": True}
        jobs = [Job(i, rng.choice(("grpc", "http")), prompts[i % 10], sampling,
                    rng.choice((1, 2, 4, 8)) if rng.random() < 0.2 else None) for i in range(40)]
        alone = greedy_alone(server, jobs, args.timeout)
        before = settle(server.metrics)
        started = time.monotonic()
        with ThreadPoolExecutor(len(jobs)) as pool:
            outcomes = list(pool.map(server.runner(args.timeout), jobs))
        tally(row, outcomes)
        worth = len(jobs) * (200 + 56) / (blocks * block)
        first = max(o.first_token_s for o in outcomes)
        gap = max(o.max_gap_after_first_s for o in outcomes)
        row.notes.append(f"{len(jobs)} requests of ~200 + 56 tokens at once = {worth:.1f}x the KV cache "
                         f"({blocks} blocks of {block}), in {time.monotonic() - started:.1f} s; the last "
                         f"first token came {first:.1f} s after sending; once started, the longest wait "
                         f"for a token was {gap:.1f} s (preempted and re-admitted)")
        compare_greedy(row, jobs, outcomes, alone)
        after = check_after(row, server, before)
        if after.get("num_preemptions_total", 0) == before.get("num_preemptions_total", 0):
            row.problems.append("no preemption: the scenario did not press the KV cache")
    finally:
        stop(server.proc)
    return row


class SteadyLoad:
    """Good requests at a fixed concurrency on their own threads until stopped."""

    def __init__(self, server: Server, tokenizer: Any, concurrency: int, timeout: float, cancel: float = 0.0,
                 seed: int = 0) -> None:
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._rng = random.Random(seed)
        self._prompts = [prompt_text(tokenizer, n, 400 + n) for n in (16, 48, 96, 160)]
        self._cancel = cancel
        self._run = server.runner(timeout)
        self._threads = [threading.Thread(target=self._loop, args=(k,)) for k in range(concurrency)]
        for t in self._threads:
            t.start()

    def _loop(self, k: int) -> None:
        i = 0
        while not self._stop.is_set():
            rng = random.Random(f"{k}-{i}")
            cancel = rng.choice((0, 2, 4)) if rng.random() < self._cancel else None
            job = Job(i, rng.choice(("grpc", "http", "openai")), rng.choice(self._prompts),
                      {"max_tokens": rng.choice((16, 32, 64)), "temperature": rng.choice((0, 0.8)),
                       "seed": rng.randrange(1 << 30), "ignore_eos": True}, cancel)
            outcome = self._run(job)
            self.outcomes.append(outcome)
            if outcome.ended == "error":  # the server may be down: do not spin on refusals
                time.sleep(0.5)
            i += 1

    def stop(self) -> list[Outcome]:
        self._stop.set()
        for t in self._threads:
            t.join()
        return self.outcomes


def recover(server: Server, since: float, limit: float = 300) -> tuple[float, float]:
    """Seconds from `since` until the server reported not ready, and until a request succeeded again."""
    down = up = None
    while time.monotonic() - since < limit:
        if down is None and not ready(server.http):
            down = time.monotonic() - since
        if down is not None and ready(server.http):
            result = run_grpc(server.grpc, Job(-1, "grpc", "Hello", {"max_tokens": 4}), 60)
            if result.ended == "completed":
                up = time.monotonic() - since
                break
        time.sleep(0.1)
    if down is None or up is None:
        raise RuntimeError(f"the server did not go down and come back within {limit} s")
    return down, up


def tt_llm_stub(server: Server) -> int:
    return server_processes(server.proc.pid)["tt_llm stub"]


def scenario_faults(args: argparse.Namespace, tokenizer: Any) -> Row:
    row = Row("faults")
    server = start(args.port + 20, "reliability_faults.log", "step_timeout_s=" + str(STEP_TIMEOUT_S),
                   f"fault_injection=raise:prefill:{RAISE_PREFILL},raise:decode:{RAISE_DECODE},"
                   f"hang:decode:{HANG_DECODE}", env={"TT_BACKEND_ALLOW_FAULT_INJECTION": "1"})
    prompt = list(tokenizer(prompt_text(tokenizer, 32, 500), add_special_tokens=False).input_ids)
    sampling = {"max_tokens": 32, "temperature": 0, "ignore_eos": True}
    try:
        # A prefill step that raises under load: only the requests of that step fail.
        before = settle(server.metrics)
        load = SteadyLoad(server, tokenizer, 6, args.timeout, seed=1)
        faulty = []
        for k in range(10):
            faulty.append(run_grpc(server.grpc, Job(k, "grpc", [RAISE_PREFILL, *prompt], sampling),
                                   args.timeout))
            time.sleep(1.5)
        good = load.stop()
        # A decode step that raises fails its whole batch: each one alone, then a good request.
        after_decode = []
        for k in range(10):
            faulty.append(run_grpc(server.grpc, Job(k, "grpc", [RAISE_DECODE, *prompt], sampling),
                                   args.timeout))
            after_decode.append(run_grpc(server.grpc, Job(k, "grpc", prompt, sampling),
                                         args.timeout))
        tally(row, faulty + good + after_decode)
        named = sum(1 for o in faulty
                    if o.ended == "error" and "step failed: injected fault in the" in o.error)
        row.notes.append(f"raise: {named} of {len(faulty)} faulty requests failed naming their step; under "
                         f"load {sum(o.ended == 'completed' for o in good)} good requests completed and "
                         f"{sum(o.ended == 'error' for o in good)} failed (their prefill shared a faulty "
                         f"step); after each faulty decode, the next request completed "
                         f"{sum(o.ended == 'completed' for o in after_decode)} of {len(after_decode)} times")
        if named != len(faulty) or any(o.ended != "completed" for o in after_decode):
            row.problems.append("a faulty request did not fail naming its step, or the next request failed")
        other = [o.error for o in good
                 if o.ended == "error" and "injected fault in the prefill step" not in o.error]
        if other:
            row.problems.append(f"good requests failed for another reason than a faulty step: {other[:3]}")
        check_after(row, server, before)

        # The tt_llm stub killed: in-flight streams end with an error; the supervisor restarts.
        load = SteadyLoad(server, tokenizer, 6, args.timeout, seed=2)
        time.sleep(3)
        killed = time.monotonic()
        os.kill(tt_llm_stub(server), signal.SIGKILL)
        down, up = recover(server, killed)
        tally(row, load.stop())
        row.notes.append(f"SIGKILL of the tt_llm stub: not ready after {down:.1f} s, serving again after "
                         f"{up:.1f} s")

        # A hung step: the watchdog fails the engine after step_timeout_s; the server comes back.
        load = SteadyLoad(server, tokenizer, 6, args.timeout, seed=3)
        time.sleep(3)
        hung_at = time.monotonic()
        hung = run_grpc(server.grpc, Job(0, "grpc", [HANG_DECODE, *prompt], sampling), args.timeout)
        ended = time.monotonic() - hung_at
        down, up = recover(server, hung_at)
        tally(row, [hung, *load.stop()])
        row.notes.append(f"hung decode step: its stream ended with {hung.error[-120:]!r} after {ended:.1f} s "
                         f"(step_timeout_s={STEP_TIMEOUT_S}); serving again after {up:.1f} s")
        if "past step_timeout_s" not in hung.error:
            row.problems.append(f"the hung request did not end with the watchdog's error: {hung.error!r}")
        check_after(row, server, settle(server.metrics))
    finally:
        stop(server.proc)
    return row


def scenario_soak(server: Server, args: argparse.Namespace, tokenizer: Any) -> Row:
    row = Row("soak")
    before = settle(server.metrics)
    load = SteadyLoad(server, tokenizer, 16, args.timeout, cancel=0.1, seed=4)
    started = time.monotonic()
    samples: list[dict[str, Any]] = []
    for minute in range(1, args.soak_minutes + 1):
        time.sleep(max(0.0, started + 60 * minute - time.monotonic()))
        procs = server_processes(server.proc.pid)
        samples.append({name: sample(pid) for name, pid in procs.items()})
        sizes = "; ".join(f"{n} {s.rss_mb:.0f} MB {s.fds} fds {s.threads} threads"
                          for n, s in samples[-1].items())
        print(f"  soak minute {minute}: {len(load.outcomes)} requests; {sizes}", flush=True)
    tally(row, load.stop())
    first, last = samples[0], samples[-1]
    for name in sorted(first):
        a, b = first[name], last[name]
        growth = 100 * (b.rss_mb - a.rss_mb) / a.rss_mb
        row.notes.append(f"{name}: RSS {a.rss_mb:.0f} -> {b.rss_mb:.0f} MB ({growth:+.1f}%), fds {a.fds} -> "
                         f"{b.fds}, threads {a.threads} -> {b.threads} (minute 1 -> {args.soak_minutes})")
        if growth >= 5:
            row.problems.append(f"{name} RSS grew {growth:.1f}% after the first minute")
    row.notes.append(f"{args.soak_minutes} minutes of load at concurrency 16, 10% cancelled")
    check_after(row, server, before)
    return row


def scenario_fuzz(server: Server, args: argparse.Namespace, tokenizer: Any) -> Row:
    from tests.fuzz.runner import FuzzRun, fuzz
    from tests.fuzz.server_watch import Endpoints
    from tt_backend.text.tokenizer import encode_chat

    row = Row("fuzz")
    log = RESULTS / "reliability_server.log"
    local = "127.0.0.1"
    endpoints = Endpoints(f"{local}:{server.grpc}", f"{local}:{server.http}", f"{local}:{server.metrics}",
                          f"http://{local}:{server.front}/v1", lambda: log.read_text(errors="replace"))
    prompts = [encode_chat(tokenizer, p) for p in ("Count from one to twenty.", "Describe the sea in one "
                                                   "sentence.", "Name three colours.")]
    with FuzzRun(endpoints, prompts, timeout=args.timeout) as run:
        fuzz(run, args.fuzz_requests, seed=args.seed)
    report = run.report
    for verdict, ending in (("ok", "completed"), ("refused", "error"), ("violation", "lost")):
        row.outcomes[ending] += sum(n for (_, v), n in report.counts.items() if v == verdict)
    report.write(RESULTS / "reliability_fuzz.txt")
    row.notes += [report.summary(), f"every violation and client error: {RESULTS / 'reliability_fuzz.txt'}"]
    if not report.ok:
        row.problems += report.text(examples=1).splitlines()[1:]
    return row


# ---- the table --------------------------------------------------------------------------------------
def print_table(rows: list[Row]) -> None:
    print("\nscenario | sent | " + " | ".join(ENDINGS) + " | two finals")
    for row in rows:
        sent = sum(row.outcomes.values())
        counts = " | ".join(f"{row.outcomes[e]:{len(e)}d}" for e in ENDINGS)
        print(f"{row.scenario:8s} | {sent:4d} | {counts} | {row.twice:10d}")
    for row in rows:
        print(f"\n{row.scenario}:")
        for note in row.notes:
            print(f"  {note}")
        for problem in row.problems:
            print(f"  PROBLEM: {problem}")


def bad(row: Row) -> bool:
    # The faults scenario's streams end with errors by design; stuck and lost are failures anywhere.
    return bool(row.problems or row.outcomes["stuck"] or row.outcomes["lost"] or row.twice)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated: {SCENARIOS}")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--cancel", type=float, default=0.2)
    parser.add_argument("--soak-minutes", type=int, default=5)
    parser.add_argument("--fuzz-requests", type=int, default=23000, help="drawn (about 20,000 distinct)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=18600)
    args = parser.parse_args()
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {SCENARIOS}")
    from tt_backend.models.checkpoint import resolve_model_dir
    from tt_backend.text.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(resolve_model_dir(""))
    rows = []
    shared = [s for s in chosen if s in ("load", "inputs", "soak", "fuzz")]
    if shared:
        server = start(args.port, "reliability_server.log", prefix_caching=True)
        try:
            for name in shared:
                print(f"[reliability] {name} ...", flush=True)
                runner = {"load": scenario_load, "inputs": scenario_inputs, "soak": scenario_soak,
                          "fuzz": scenario_fuzz}[name]
                rows.append(runner(server, args, tokenizer))
        finally:
            stop(server.proc)
    for name in (s for s in chosen if s not in shared):
        print(f"[reliability] {name} ...", flush=True)
        rows.append(scenario_kv(args, tokenizer) if name == "kv" else scenario_faults(args, tokenizer))
    print_table(rows)
    return 1 if any(bad(r) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
