"""Run tritonserver and restart it when one of its Python backend processes dies.

When a model's stub process dies (SIGKILL, the OOM killer, or `tt_llm` exiting after its engine
failed), Triton 2.51 does not start a new one for a decoupled model: the server keeps answering
ready while every request to that model fails with "Stub process '...' is not healthy". So once
the server is ready, this watches every stub; when one disappears it logs which, stops tritonserver
(its in-flight streams end with an error and the ports stop answering, so health checks see it
down), clears the stubs' shared-memory regions and starts it again. Too many restarts in a window
and it gives up and exits non-zero, for a supervisor above (Kubernetes) to act on.

    supervise.py --ready-url URL --shm-prefix PREFIX [--no-restart] -- tritonserver ARGS...

SIGTERM and SIGINT go to tritonserver; it then exits with tritonserver's exit status.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from types import FrameType

POLL_S = 0.5
STOP_GRACE_S = 5.0
STUB = b"triton_python_backend_stub"


def log(message: str) -> None:
    print(f"[supervise] {message}", flush=True)


def stubs_of(server_pid: int) -> dict[int, str]:
    """The server's stub processes: pid → model name (from the model.py path they run)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text(encoding="utf-8")
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == server_pid and cmdline and cmdline[0].endswith(STUB):
            model = Path(cmdline[1].decode(errors="replace")).parent.parent.name if len(cmdline) > 1 else "?"
            found[int(proc.name)] = model
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class Supervisor:
    def __init__(self, command: list[str], ready_url: str, shm_prefix: str, restart: bool,
                 max_restarts: int, window_s: float) -> None:
        self.command = command
        self.ready_url = ready_url
        self.shm_prefix = shm_prefix
        self.restart = restart
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.server: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.restarts: deque[float] = deque()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signum)

    def run(self) -> int:
        while True:
            started = time.monotonic()
            self.server = subprocess.Popen(self.command)
            died = self._watch(started)
            if died is None:  # stopped by a signal, or it exited before it was ever ready
                return self.server.wait()
            self._stop_server()
            if not self.restart:
                log("not restarting (--no-restart): exiting")
                return 1
            now = time.monotonic()
            self.restarts.append(now)
            while self.restarts and now - self.restarts[0] > self.window_s:
                self.restarts.popleft()
            if len(self.restarts) > self.max_restarts:
                log(f"{len(self.restarts)} restarts within {self.window_s:.0f} s: giving up")
                return 1
            log(f"restarting tritonserver (restart {len(self.restarts)} within {self.window_s:.0f} s)")

    def _watch(self, started: float) -> str | None:
        """Wait for ready, then watch; return what died, or None when the server exited on its own
        before it was ready or was stopped by a signal."""
        assert self.server is not None
        while not ready(self.ready_url):
            if self.stopping or self.server.poll() is not None:
                return None
            time.sleep(POLL_S)
        stubs = stubs_of(self.server.pid)
        log(f"tritonserver ready after {time.monotonic() - started:.1f} s; watching "
            f"{len(stubs)} backend processes ({', '.join(sorted(set(stubs.values())))})")
        while True:
            time.sleep(POLL_S)
            if self.stopping:
                return None
            code = self.server.poll()
            if code is not None:
                log(f"tritonserver exited with status {code} while serving")
                return "tritonserver"
            for pid, model in stubs.items():
                if not alive(pid):
                    log(f"the Python backend process of model '{model}' (pid {pid}) died; Triton would "
                        "go on reporting ready while every request to it fails, so tritonserver stops")
                    return model

    def _stop_server(self) -> None:
        assert self.server is not None
        leftover = stubs_of(self.server.pid)
        if self.server.poll() is None:
            # Triton waits up to its exit timeout (30 s) for in-flight requests, and those of a dead
            # stub never finish: a short grace, then SIGKILL (their clients see the connection end).
            self.server.terminate()
            try:
                self.server.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                log(f"tritonserver still stopping after {STOP_GRACE_S:.0f} s (requests of the dead "
                    "process never finish): killing it")
                self.server.kill()
                self.server.wait()
        for pid in leftover:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if self.shm_prefix:
            for region in Path("/dev/shm").glob(self.shm_prefix + "*"):
                region.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ready-url", required=True)
    parser.add_argument("--shm-prefix", default="", help="remove /dev/shm/PREFIX* between runs")
    parser.add_argument("--no-restart", action="store_true", help="exit (status 1) instead of restarting")
    parser.add_argument("--max-restarts", type=int, default=5)
    parser.add_argument("--restart-window", type=float, default=600, help="seconds")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the tritonserver command after --")
    supervisor = Supervisor(command, args.ready_url, args.shm_prefix, not args.no_restart,
                            args.max_restarts, args.restart_window)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
