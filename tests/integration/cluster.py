"""Servers behind vLLM's router, started the way `make serve-cluster` starts them
(scripts/serve_cluster.py), on a block of free loopback ports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.conftest import ROOT

START_TIMEOUT_S = 600


@dataclass(frozen=True)
class RoutedCluster:
    router: str
    """The router's OpenAI base URL (http://host:port/v1)."""
    metrics: tuple[str, ...]
    """Each server's Triton metrics address (host:port)."""
    workers: tuple[str, ...]
    """Each server's OpenAI front (http://host:port), the router's workers."""
    server_pids: tuple[int, ...]
    """Each server's process group (serve.sh: tritonserver, its stubs, the OpenAI front)."""
    log_dir: Path

    def kill_server(self, index: int) -> None:
        """As a crash would: SIGKILL to the whole server, nothing cleans up."""
        os.killpg(self.server_pids[index], signal.SIGKILL)


def free_port_block(count: int) -> int:
    """The first of `count` consecutive loopback ports that are free now."""
    for base in range(20000 + os.getpid() % 200 * 50, 60000, 50):
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports")


def start_cluster(log_dir: Path, servers: int, policy: str,
                  *settings: str) -> tuple[subprocess.Popen[bytes], RoutedCluster]:
    """scripts/serve_cluster.py with the engine `settings` for every server; returns once the router
    answers (the script waits for every server first)."""
    base = free_port_block(10 * servers + 2)
    router_port = base + 10 * servers
    layout = log_dir / "layout.json"
    args = [sys.executable, str(ROOT / "scripts" / "serve_cluster.py"), "--servers", str(servers),
            "--router-port", str(router_port), "--base-port", str(base), "--policy", policy,
            "--log-dir", str(log_dir), "--layout", str(layout), "--"]
    for setting in settings:
        args += ["--set", setting]
    out = open(log_dir / "cluster.log", "wb")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not layout.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_cluster(proc)
            raise RuntimeError(f"the cluster did not start:\n{_tail(log_dir)}")
        time.sleep(0.5)
    data: dict[str, Any] = json.loads(layout.read_text(encoding="utf-8"))
    host = data["host"]
    return proc, RoutedCluster(f"http://{host}:{data['router_port']}/v1",
                               tuple(f"{host}:{s['metrics']}" for s in data["servers"]),
                               tuple(f"http://{host}:{s['openai']}" for s in data["servers"]),
                               tuple(data["server_pids"]), log_dir)


def stop_cluster(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as Ctrl-C or `kill` would: the script stops the router and every server."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _tail(log_dir: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(encoding='utf-8', errors='replace')[-3000:]}"
                     for p in sorted(log_dir.glob("*.log")))
