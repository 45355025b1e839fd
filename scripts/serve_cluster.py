"""N servers on one host behind vLLM's router (`vllm-router`, from PyPI): `make serve-cluster`.

    scripts/serve_cluster.py --servers 2 --router-port 9090 [--policy cache_aware] [--base-port 8100]
                             [--host 127.0.0.1] [--router-arg=FLAG]... [-- serve.sh flags...]

Server i runs `scripts/serve.sh` with every flag after `--` (SERVE_ARGS), on the ports
base+10i (HTTP), +1 (gRPC), +2 (metrics) and +3 (its OpenAI front), with its own run folder and
shared-memory prefix. Once every front answers /health, the router starts on --router-port with
the fronts as its workers (its own Prometheus metrics on --router-port + 1). SIGTERM or Ctrl-C
(or the exit of the process that started it, such as make) stops the router, then every server.
A server that dies is left dead: the router's health checks take it out of rotation, and the
others go on serving.

Logs go to --log-dir (default .serve/cluster-<router port>/): server<i>.log and router.log.
--layout FILE writes the ports and process ids as JSON once all is ready.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType

import requests

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 600
STOP_TIMEOUT_S = 60
# A dead worker leaves rotation after two failed health checks 2 s apart (one slow answer from a
# busy server does not take it out); until then the router retries a request on the policy's next
# pick, for longer than the detection takes (~8 s of backoff).
ROUTER_DEFAULTS = ["--health-check-interval-secs", "2", "--health-failure-threshold", "2",
                   "--health-check-timeout-secs", "5", "--worker-startup-check-interval", "1",
                   "--retry-max-retries", "12", "--retry-initial-backoff-ms", "100",
                   "--retry-max-backoff-ms", "1000"]


@dataclass(frozen=True)
class ServerPorts:
    http: int
    grpc: int
    metrics: int
    openai: int

    @staticmethod
    def of(base: int, index: int) -> ServerPorts:
        first = base + 10 * index
        return ServerPorts(first, first + 1, first + 2, first + 3)


@dataclass(frozen=True)
class Layout:
    host: str
    router_port: int
    router_metrics_port: int
    router_pid: int
    servers: tuple[ServerPorts, ...]
    server_pids: tuple[int, ...]
    """serve.sh of each server; each leads its own process group (tritonserver, stubs, front)."""


class Cluster:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.host: str = args.host
        self.log_dir = Path(args.log_dir or ROOT / ".serve" / f"cluster-{args.router_port}")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="tt_backend_cluster."))
        self.ports = tuple(ServerPorts.of(args.base_port, i) for i in range(args.servers))
        self.servers: list[subprocess.Popen[bytes]] = []
        self.router: subprocess.Popen[bytes] | None = None
        self.stopping = False
        # `make serve-cluster` dies on SIGTERM without passing it on: a new parent means ours is gone.
        self.parent = os.getppid()

    def shm_prefix(self, index: int) -> str:
        return f"tt_cluster_{self.args.router_port}_{index}_"

    def start_servers(self) -> None:
        for i, ports in enumerate(self.ports):
            tmp = self.scratch / f"server{i}"
            tmp.mkdir()
            cmd = ["bash", str(ROOT / "scripts" / "serve.sh"), "--host", self.host,
                   "--http-port", str(ports.http), "--grpc-port", str(ports.grpc),
                   "--metrics-port", str(ports.metrics), "--openai-port", str(ports.openai),
                   f"--backend-config=python,shm-region-prefix-name={self.shm_prefix(i)}",
                   *self.args.serve_args]
            log = open(self.log_dir / f"server{i}.log", "wb")  # noqa: SIM115 (the child keeps it)
            self.servers.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                                 start_new_session=True,
                                                 env={**os.environ, "TMPDIR": str(tmp)}))
            print(f"[cluster] server {i}: http {ports.http} grpc {ports.grpc} metrics {ports.metrics} "
                  f"openai {ports.openai}, log {self.log_dir / f'server{i}.log'}", flush=True)

    def wait_servers(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = set(range(len(self.servers)))
        while waiting and not self.orphaned():
            for i in sorted(waiting):
                if self.servers[i].poll() is not None:
                    raise SystemExit(f"[cluster] server {i} exited ({self.servers[i].returncode}) before "
                                     f"it was ready; see {self.log_dir / f'server{i}.log'}")
                if _ok(f"http://{self.host}:{self.ports[i].openai}/health"):
                    waiting.discard(i)
                    print(f"[cluster] server {i} ready", flush=True)
            if time.monotonic() > deadline:
                raise SystemExit(f"[cluster] servers {sorted(waiting)} not ready in {READY_TIMEOUT_S} s")
            time.sleep(0.5)

    def start_router(self) -> None:
        router = Path(sys.executable).parent / "vllm-router"
        workers = [f"http://{self.host}:{p.openai}" for p in self.ports]
        cmd = [str(router), "--host", self.host, "--port", str(self.args.router_port),
               "--worker-urls", *workers, "--policy", self.args.policy,
               "--prometheus-host", self.host, "--prometheus-port", str(self.args.router_port + 1),
               *ROUTER_DEFAULTS, *self.args.router_arg]
        log = open(self.log_dir / "router.log", "wb")  # noqa: SIM115 (the child keeps it)
        self.router = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not _ok(f"http://{self.host}:{self.args.router_port}/health"):
            if self.router.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"[cluster] the router did not start; see {self.log_dir / 'router.log'}")
            time.sleep(0.2)
        print(f"[cluster] router ({self.args.policy}) on http://{self.host}:{self.args.router_port}/v1 "
              f"over {' '.join(workers)}; its metrics on :{self.args.router_port + 1}", flush=True)

    def layout(self) -> Layout:
        assert self.router is not None
        return Layout(self.host, self.args.router_port, self.args.router_port + 1, self.router.pid,
                      self.ports, tuple(p.pid for p in self.servers))

    def orphaned(self) -> bool:
        if os.getppid() != self.parent:
            print("[cluster] the parent process is gone: stopping", flush=True)
            self.stopping = True
        return self.stopping

    def serve(self) -> int:
        """Until a signal, the parent's exit or the router's exit; the router's exit status, else 0."""
        while not self.orphaned():
            assert self.router is not None
            if self.router.poll() is not None:
                print(f"[cluster] the router exited ({self.router.returncode})", flush=True)
                return self.router.returncode or 1
            time.sleep(0.5)
        return 0

    def stop(self) -> None:
        """The router first (no new requests), then every server: SIGTERM to serve.sh, which stops
        tritonserver (it unloads the models, the engine finalizes) and the front; what is left of
        a server's process group after the timeout is killed."""
        if self.router is not None:
            _signal_group(self.router, signal.SIGTERM)
        for proc in self.servers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in ([self.router] if self.router else []) + self.servers:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        # A server that was killed could not clean up after itself.
        for i in range(len(self.servers)):
            for region in Path("/dev/shm").glob(f"{self.shm_prefix(i)}*"):
                region.unlink(missing_ok=True)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    serve_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, serve_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--router-port", type=int, default=9090)
    parser.add_argument("--base-port", type=int, default=8100)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--policy", default="cache_aware",
                        choices=["cache_aware", "round_robin", "random", "power_of_two", "consistent_hash"])
    parser.add_argument("--router-arg", action="append", default=[], help="one more vllm-router flag")
    parser.add_argument("--log-dir", default="")
    parser.add_argument("--layout", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.servers < 1:
        parser.error("--servers must be at least 1")
    args.serve_args = serve_args
    return args


def main() -> int:
    cluster = Cluster(parse_args(sys.argv[1:]))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        cluster.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start_servers()
        cluster.wait_servers()
        if cluster.stopping:
            return 0
        cluster.start_router()
        if cluster.args.layout is not None:
            cluster.args.layout.write_text(json.dumps(asdict(cluster.layout())), encoding="utf-8")
        print(f"[cluster] ready: {len(cluster.servers)} servers behind http://{cluster.host}:"
              f"{cluster.args.router_port}/v1", flush=True)
        return cluster.serve()
    finally:
        cluster.stop()
        print("[cluster] stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
