"""What must hold of the server after the fuzz: ready, never restarted (tritonserver's and the
tt_llm stub's pids unchanged, no supervisor restart or engine failure in its log, counters not
reset), and idle: no request running or waiting, no KV block in use."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.integration.clients import idle_scrape

LOG_MARKERS = (
    "[supervise] restarting tritonserver", "[supervise] the Python backend process",
    "[supervise] tritonserver exited", "giving up", "the engine failed", "step failed (",
    "failed to send a response", "Traceback", "Stub process", "[supervise] tritonserver ready after",
)
"""Log lines (scripts/supervise.py, the engine, tt_llm's response thread) none of which may appear
while the fuzz runs."""


@dataclass(frozen=True)
class Endpoints:
    grpc: str
    """host:port of Triton's gRPC."""
    http: str
    metrics: str
    front: str
    """The OpenAI front: http://host:port/v1."""
    log: Callable[[], str]
    """The server's log (scripts/serve.sh's output) so far."""


@dataclass(frozen=True)
class Snapshot:
    tritonserver: int | None
    stub: int | None
    log_chars: int
    metrics: dict[str, float]


def family(metrics: dict[str, float], name: str) -> float:
    """A family's value summed over its series (models, lanes, labels)."""
    return sum(v for k, v in metrics.items() if k.startswith(name + "{"))


def server_pids(grpc_port: str) -> tuple[int | None, int | None]:
    """tritonserver serving gRPC on `grpc_port`, and its tt_llm stub."""
    cmdlines: dict[int, list[bytes]] = {}
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdlines[int(proc.name)] = (proc / "cmdline").read_bytes().split(b"\0")
            parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    port = grpc_port.encode()
    server = next((pid for pid, cmd in cmdlines.items() if cmd[0].endswith(b"tritonserver")
                   and any(a == port and b == b"--grpc-port" for b, a in zip(cmd, cmd[1:], strict=False))),
                  None)
    stub = next((pid for pid, cmd in cmdlines.items() if parents.get(pid) == server and len(cmd) > 1
                 and cmd[0].endswith(b"triton_python_backend_stub") and b"/tt_llm/" in cmd[1]), None)
    return server, stub


def snapshot(endpoints: Endpoints, recover_s: float = 240) -> Snapshot:
    """The server now, once idle. A server that is down (restarting) gets `recover_s` to come
    back; if it does not, its metrics are empty."""
    server, stub = server_pids(endpoints.grpc.rsplit(":", 1)[1])
    deadline = time.monotonic() + recover_s
    while True:
        try:
            metrics = idle_scrape(endpoints.metrics, timeout=60)
            break
        except requests.RequestException:
            if time.monotonic() > deadline:
                metrics = {}
                break
            time.sleep(1)
    return Snapshot(server, stub, len(endpoints.log()), metrics)


def ready(endpoints: Endpoints) -> bool:
    try:
        triton = requests.get(f"http://{endpoints.http}/v2/health/ready", timeout=5).status_code == 200
        front = requests.get(f"{endpoints.front.removesuffix('/v1')}/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False
    return triton and front


def problems_after(endpoints: Endpoints, before: Snapshot) -> list[str]:
    after = snapshot(endpoints)
    found = []
    if not ready(endpoints):
        found.append("the server (Triton or the front) is not ready")
    if (after.tritonserver, after.stub) != (before.tritonserver, before.stub):
        found.append(f"restarted: tritonserver pid {before.tritonserver} -> {after.tritonserver}, "
                     f"tt_llm stub pid {before.stub} -> {after.stub}")
    lines = [line for line in endpoints.log()[before.log_chars:].splitlines()
             if any(marker in line for marker in LOG_MARKERS)]
    if lines:
        found.append(f"{len(lines)} log lines of failures or restarts, e.g. " + " | ".join(
            line[:200] for line in lines[:5]))
    m0, m1 = before.metrics, after.metrics
    if not m1:
        found.append("the metrics port does not answer")
    if family(m1, "vllm:request_success_total") < family(m0, "vllm:request_success_total"):
        found.append("the request counters went back: the server restarted")
    if family(m1, "tt:engine_failures_total") != family(m0, "tt:engine_failures_total"):
        found.append(f"tt:engine_failures_total {family(m0, 'tt:engine_failures_total'):.0f} -> "
                     f"{family(m1, 'tt:engine_failures_total'):.0f}")
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "tt:num_requests_parked"):
        if family(m1, name) != 0:
            found.append(f"not idle after the fuzz: {name} = {family(m1, name)}")
    return found
