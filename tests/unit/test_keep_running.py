"""scripts/keep_running.py, which keeps the OpenAI front up under scripts/serve.sh: a command that
dies is started again after a doubling wait, each death logged with how it died; a final status
ends the loop; SIGTERM goes to the command and ends it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "keep_running.py"
# Start 1 exits 3, start 2 is killed by SIGKILL, start 3 exits 3, start 4 exits 2 (a usage error).
FLAKY = """
import os, signal, sys
path = sys.argv[1]
n = int(open(path).read()) + 1 if os.path.exists(path) else 1
open(path, "w").write(str(n))
if n == 2:
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(2 if n == 4 else 3)
"""


def keep_running(*command: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(SCRIPT), "--name", "flaky", "--backoff", "0.1",
                             "--max-backoff", "0.25", "--final-status", "2", "--", *command],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_dying_command_is_restarted_with_backoff_until_a_final_status(tmp_path: Path) -> None:
    proc = keep_running(sys.executable, "-c", FLAKY, str(tmp_path / "starts"))
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert (tmp_path / "starts").read_text() == "4"
    lines = [re.sub(r"after \d+\.\d s", "after T s", line) for line in out.splitlines()]
    assert lines == [
        "[keep_running] flaky: exited with status 3 after T s (start 1); starting it again in 0.1 s",
        "[keep_running] flaky: killed by SIGKILL after T s (start 2); starting it again in 0.2 s",
        "[keep_running] flaky: exited with status 3 after T s (start 3); starting it again in 0.2 s",
        "[keep_running] flaky: exited with status 2 after T s: not restarting (a final status)",
    ]


def test_sigterm_goes_to_the_command_and_ends_the_loop() -> None:
    proc = keep_running(sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)")
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (128 + signal.SIGTERM, "")  # no restart, no death logged
    assert time.monotonic() - started < 10


def test_a_burst_of_sigterms_still_ends_it() -> None:
    """serve.sh's stop sends SIGTERM to the whole group and then to the front again: a second signal
    landing inside the handler of the first once deadlocked keep_running (the handler took a lock
    the interrupted handler held), and every test server with a front took 60 s and a SIGKILL to
    stop. The command here takes its time to end, as uvicorn does."""
    slow = ("import signal, time\n"
            "stop = []\n"
            "signal.signal(signal.SIGTERM, lambda *_: stop.append(1))\n"
            "print('up', flush=True)\n"
            "while not stop:\n"
            "    time.sleep(0.01)\n"
            "time.sleep(0.3)\n")
    for _ in range(5):
        proc = keep_running(sys.executable, "-c", slow)
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        for _ in range(2000):
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        assert (proc.returncode, out) == (0, "")
