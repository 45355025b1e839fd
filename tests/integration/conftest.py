"""One real tritonserver per test session, started by scripts/serve.sh on free loopback ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 300
ADMIN_KEY = "tt-test-admin-key"
"""The session server's TT_BACKEND_ADMIN_KEY (its admin APIs need it: scripts/serve.sh)."""


@dataclass(frozen=True)
class Server:
    http: str
    grpc: str
    metrics: str
    log: Path
    openai: str | None = None
    """The OpenAI front's base URL (http://host:port/v1), when it runs."""

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start_server(log: Path, *settings: str, env: dict[str, str] | None = None, openai_port: int | None = None,
                 openai_args: Sequence[str] = (),
                 instances: int = 1,
                 model_json: Path | None = None) -> tuple[subprocess.Popen[bytes], Server]:
    """serve.sh on free ports; the OpenAI front only with `openai_port`, given `openai_args` (flags of
    `python -m tt_backend.openai_front`, passed as serve.sh's --openai-arg); `instances`: tt_llm's
    instance_group count; `model_json`: a vllm_backend model.json for tt_llm (serve.sh --model-json)."""
    http, grpc, metrics = free_ports(3)
    args = ["bash", str(ROOT / "scripts" / "serve.sh"), "--http-port", str(http),
            "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    args += ["--openai-port", str(openai_port)] if openai_port is not None else ["--no-openai"]
    for setting in settings:
        args += ["--set", setting]
    args += [f"--openai-arg={flag}" for flag in openai_args]
    args += ["--instances", str(instances)] if instances != 1 else []
    args += ["--model-json", str(model_json)] if model_json is not None else []
    out = open(log, "wb")
    # A key in the caller's environment would lock every front; a test that wants one passes it.
    inherited = {k: v for k, v in os.environ.items() if k != "TT_BACKEND_API_KEY"}
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True, env={**inherited, **(env or {})})
    front = None if openai_port is None else f"http://127.0.0.1:{openai_port}/v1"
    server = Server(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}", log, front)
    return proc, server


def wait_ready(proc: subprocess.Popen[bytes], server: Server) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tritonserver exited ({proc.returncode}):\n{server.log_text()[-4000:]}")
        try:
            ready = requests.get(f"http://{server.http}/v2/health/ready", timeout=1).status_code == 200
            if ready and server.openai is not None:  # and the front, over Triton
                front = server.openai.removesuffix("/v1")
                ready = requests.get(f"{front}/health", timeout=1).status_code == 200
            if ready:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"tritonserver not ready in {READY_TIMEOUT_S}s:\n{server.log_text()[-4000:]}")


def failed_load(log: Path, *settings: str, env: dict[str, str] | None = None, timeout: float = 180) -> str:
    """serve.sh with settings that fail a model's load: tritonserver must exit non-zero within
    `timeout`; its log."""
    proc, server = start_server(log, *settings, env=env)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_server(proc)
        raise
    assert proc.returncode != 0, "tritonserver exited 0 although a model failed to load"
    return server.log_text()


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            left = subprocess.run(["ps", "-o", "pid,etime,args", "-g", str(proc.pid)], capture_output=True,
                                  text=True).stdout
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            # Not a failure of the test that used it, but worth seeing in every run's summary.
            warnings.warn(f"serve.sh did not stop within 60 s of SIGTERM; killed:\n{left}", stacklevel=1)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The default repository in fp32 (greedy outputs compared exactly with HF), with the OpenAI front."""
    proc, srv = start_server(tmp_path_factory.mktemp("triton") / "server.log", "dtype=float32",
                             openai_port=free_ports(1)[0], env={"TT_BACKEND_ADMIN_KEY": ADMIN_KEY})
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)
