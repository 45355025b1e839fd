"""Run a command and start it again whenever it exits, with backoff: scripts/serve.sh runs the OpenAI
front under this, so a front that dies (a crash, the OOM killer, `kill`) comes back while
tritonserver goes on serving.

    keep_running.py --name NAME [--backoff S] [--max-backoff S] [--stable S] [--final-status N]...
                    -- COMMAND ARGS...

Each exit is logged with its status (or signal) and the wait before the next start. The wait
starts at --backoff seconds and doubles per quick exit up to --max-backoff; a run that lasted
--stable seconds resets it. An exit with a --final-status (e.g. 2, a usage error: a bad flag
never heals) ends the loop with that status. While the command is down its port refuses
connections, so a probe or a router's health check sees it gone. SIGTERM and SIGINT go to the
command and end the loop; this then exits with the command's status (128 + N for signal N).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from types import FrameType


def log(name: str, message: str) -> None:
    print(f"[keep_running] {name}: {message}", flush=True)


def describe(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class KeepRunning:
    def __init__(self, name: str, command: list[str], backoff_s: float, max_backoff_s: float,
                 stable_s: float, final: frozenset[int] = frozenset()) -> None:
        self.name = name
        self.command = command
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.stable_s = stable_s
        self.final = final
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        # No locks here (no Event, no Popen.poll): a second signal can land while this handler
        # runs, and a lock the interrupted handler holds deadlocked the process (serve.sh's stop
        # sends SIGTERM to the group, then to the front again).
        self.stopping = True
        child = self.child
        if child is not None and child.returncode is None:
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:  # it has just ended; wait() reaps it
                pass

    def _wait_or_stop(self, seconds: float) -> bool:
        """Sleep up to `seconds` (the backoff); whether a stop signal came."""
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(0.05, max(deadline - time.monotonic(), 0.0)))
        return self.stopping

    def run(self) -> int:
        wait_s = self.backoff_s
        starts = 0
        while True:
            started = time.monotonic()
            self.child = subprocess.Popen(self.command)
            starts += 1
            if self.stopping:  # the signal came while it was starting, before on_signal saw it
                self.child.send_signal(signal.SIGTERM)
            code = self.child.wait()
            if self.stopping:
                return code
            ran_s = time.monotonic() - started
            if code in self.final:
                log(self.name, f"{describe(code)} after {ran_s:.1f} s: not restarting (a final status)")
                return code
            if ran_s >= self.stable_s:
                wait_s = self.backoff_s
            log(self.name, f"{describe(code)} after {ran_s:.1f} s (start {starts}); starting it again "
                           f"in {wait_s:.1f} s")
            if self._wait_or_stop(wait_s):
                return code
            wait_s = min(wait_s * 2, self.max_backoff_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="what the log lines call the command")
    parser.add_argument("--backoff", type=float, default=1.0, help="first wait before a restart, seconds")
    parser.add_argument("--max-backoff", type=float, default=30.0, help="the longest wait, seconds")
    parser.add_argument("--stable", type=float, default=60.0,
                        help="a run this long (seconds) resets the wait to --backoff")
    parser.add_argument("--final-status", type=int, action="append", default=[],
                        help="an exit status that is not restarted (repeatable)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    keeper = KeepRunning(args.name, command, args.backoff, args.max_backoff, args.stable,
                         frozenset(args.final_status))
    signal.signal(signal.SIGTERM, keeper.on_signal)
    signal.signal(signal.SIGINT, keeper.on_signal)
    code = keeper.run()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
