"""The fuzz run: hypothesis draws requests, one per example; a thread pool sends them, `concurrency`
at a time, while hypothesis draws the next; every request is judged (tests/fuzz/verdict.py), while
bystander streams (greedy, fixed prompts) run throughout and must give exactly the tokens they gave
alone. At the end the server must be ready, not restarted, and idle (tests/fuzz/server_watch.py).

    with FuzzRun(endpoints, bystander_prompts) as run:
        fuzz(run, examples=2400)
    report = run.report   # FuzzReport

One request per example, not a batch per example: hypothesis mutates a batch's examples into
near-copies (one element copied over another), so batches of 50 held a third as many distinct
requests. A request drawn twice is sent once.

No shrinking: a violation never fails a hypothesis example; it is collected with the request that
caused it, and the caller asserts on the whole report."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

import numpy as np
import requests
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from tests.fuzz.report import FuzzReport, Violation, shape
from tests.fuzz.request import FuzzRequest
from tests.fuzz.send import send_grpc, send_http
from tests.fuzz.server_watch import Endpoints, Snapshot, problems_after, snapshot
from tests.fuzz.strategies import fuzz_request
from tests.fuzz.triton_strategies import text_tensor
from tests.fuzz.verdict import Judgement, judge_grpc, judge_http

BYSTANDER_TOKENS = 32


def judge(endpoints: Endpoints, request: FuzzRequest, timeout: float) -> tuple[Judgement, list[int]]:
    """Send one request; its judgement and (gRPC) the output ids it returned."""
    if request.target in ("chat", "completions"):
        reply = send_http(endpoints.front, request, timeout)
        return judge_http(request, reply.status, reply.content_type, reply.body), []
    result = send_grpc(endpoints.grpc, request, timeout)
    ids = [int(t) for e in result.events if "output_ids" in e.outputs
           for t in e.outputs["output_ids"].reshape(-1)]
    return judge_grpc(request, result.events, result.timed_out), ids


def bystander(prompt_ids: Sequence[int]) -> FuzzRequest:
    params = {"temperature": 0, "max_tokens": BYSTANDER_TOKENS, "ignore_eos": True}
    return FuzzRequest("tt_llm", (), (("input_ids", np.array(prompt_ids, dtype=np.int32)),
                                      ("stream", np.array([True])),
                                      ("sampling_parameters", text_tensor(json.dumps(params).encode()))),
                       max_tokens=BYSTANDER_TOKENS)


class FuzzRun:
    def __init__(self, endpoints: Endpoints, bystander_prompts: Sequence[Sequence[int]],
                 concurrency: int = 16, timeout: float = 180) -> None:
        self.endpoints = endpoints
        self.timeout = timeout
        self.report = FuzzReport()
        self.served_model = str(requests.get(f"{endpoints.front}/models", timeout=30).json()["data"][0]["id"])
        self._bystanders = [bystander(p) for p in bystander_prompts]
        self._alone: list[list[int]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._bystand, args=(i,), daemon=True)
                         for i in range(len(self._bystanders))]
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="fuzz")
        self._room = threading.BoundedSemaphore(2 * concurrency)
        """Requests queued or in flight: hypothesis draws ahead of the senders by at most this many."""
        self._seen: set[tuple[object, ...]] = set()
        self._lock = threading.Lock()
        self._before: Snapshot | None = None
        self._started = 0.0

    def __enter__(self) -> FuzzRun:
        self._before = snapshot(self.endpoints)
        for request in self._bystanders:
            verdict, ids = judge(self.endpoints, request, self.timeout)
            assert verdict.verdict == "ok" and len(ids) == BYSTANDER_TOKENS, (verdict, request.describe())
            self._alone.append(ids)
        self._started = time.monotonic()
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._pool.shutdown()  # every submitted request judged
        self._stop.set()
        for t in self._threads:
            t.join()
        self.report.wall_s = time.monotonic() - self._started
        assert self._before is not None
        self.report.server_problems += problems_after(self.endpoints, self._before)

    def submit(self, request: FuzzRequest) -> None:
        """Queue a request (once: a repeat is counted and dropped); blocks while the queue is full."""
        key = request.key()
        if key in self._seen:
            self.report.repeats += 1
            return
        self._seen.add(key)
        self._room.acquire()
        self._pool.submit(self._send, request)

    def _send(self, request: FuzzRequest) -> None:
        try:
            judgement, _ = judge(self.endpoints, request, self.timeout)
        except Exception as exc:  # noqa: BLE001 (a client-side failure is reported, not lost)
            judgement = Judgement("violation", "the fuzz client failed", repr(exc))
        finally:
            self._room.release()
        with self._lock:
            index = self.report.sent
            self.report.counts[(request.target, judgement.verdict)] += 1
            self.report.valid += request.valid
            if judgement.verdict == "violation":
                self.report.violations.append(Violation(request, judgement, index))
            elif judgement.verdict == "refused":
                self.report.refusals[(request.target, shape(judgement.detail))] += 1

    def _bystand(self, i: int) -> None:
        runs = 0
        while not self._stop.is_set():
            started = time.monotonic()
            # Decode waits behind every new request's prefill: a bystander runs far longer than alone.
            verdict, ids = judge(self.endpoints, self._bystanders[i], 3 * self.timeout)
            took = time.monotonic() - started
            runs += 1
            problem = None
            if verdict.verdict != "ok":
                problem = f"bystander {i} run {runs}: {verdict.kind}: {verdict.detail[:300]}"
            elif ids != self._alone[i]:
                at = next((k for k, (a, b) in enumerate(zip(ids, self._alone[i], strict=False)) if a != b),
                          min(len(ids), len(self._alone[i])))
                problem = (f"bystander {i} run {runs}: tokens differ from alone at {at}: {ids[at:at + 6]} "
                           f"instead of {self._alone[i][at:at + 6]}")
            with self._lock:
                self.report.bystander_runs += 1
                self.report.bystander_seconds.append(took)
                if problem is not None:
                    self.report.bystander_problems.append(problem)
            if verdict.verdict != "ok":  # the server may be down: do not spin on refusals
                time.sleep(1)


def fuzz(run: FuzzRun, examples: int, seed: int | None = None) -> None:
    """Draw `examples` requests and send them; seed None: derandomized (the same requests every
    time), else that seed. Returns once every request was judged (then leave the `with`)."""
    @settings(max_examples=examples, database=None, deadline=None, derandomize=seed is None,
              phases=(Phase.generate,), suppress_health_check=list(HealthCheck), print_blob=False)
    @given(request=fuzz_request(run.served_model))
    def one(request: FuzzRequest) -> None:
        run.submit(request)

    (one if seed is None else hypothesis_seed(seed)(one))()
