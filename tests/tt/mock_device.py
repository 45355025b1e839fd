"""Run one scenario of tests/tt/scenarios.py in a subprocess on a mock cluster and return its result.

The mock kit (tests/tt/mock_kit, set up into .tt-mock by scripts/setup_tt.sh) gives ttnn a
runtime root with a stand-in RISC-V toolchain; TT_METAL_MOCK_CLUSTER_DESC_PATH picks the cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KIT = Path(__file__).resolve().parent / "mock_kit"
MOCK = Path(os.environ.get("TT_MOCK_DIR", ROOT / ".tt-mock")).resolve()
BUNDLES = Path(__file__).resolve().parent / "bundles"
CLUSTERS = {"n150": "n150.yaml", "n300": "n300_1row.yaml", "t3k": "t3k_1row.yaml"}
MARK = "SCENARIO-RESULT "


class ScenarioCrashed(AssertionError):
    pass


def mock_env(cluster: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TT_METAL_RUNTIME_ROOT=str(MOCK / "rtroot"),
               TT_METAL_MOCK_CLUSTER_DESC_PATH=str(KIT / CLUSTERS[cluster]),
               TT_METAL_CACHE=str(MOCK / "cache"), TT_METAL_LOGS_PATH=str(MOCK / "logs"),
               PYTHONUNBUFFERED="1")
    env.pop("MESH_DEVICE", None)
    return env


def run_scenario(name: str, cluster: str, timeout: float = 300, **args: Any) -> Any:
    """The scenario's result (what it printed after MARK as JSON); a crash or a non-zero exit
    raises with the tail of its output."""
    work = MOCK / "work"  # ttnn writes generated/ into the working directory
    work.mkdir(parents=True, exist_ok=True)
    script = str(Path(__file__).with_name("scenarios.py"))
    proc = subprocess.run([sys.executable, script, name, json.dumps(args)], cwd=work,
                          env=mock_env(cluster), capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise ScenarioCrashed(f"scenario {name} on {cluster} exited {proc.returncode}:\n{tail}")
    return json.loads(lines[-1][len(MARK):])
