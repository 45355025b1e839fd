#!/usr/bin/env bash
# Install llama.cpp's Python server (llama-cpp-python[server]) into its own venv, .venv-llamacpp, for
# bench/compare.py --systems ...,llamacpp. Idempotent: does nothing once `import llama_cpp.server` works.
#
# PyPI ships llama-cpp-python as an sdist: pip builds llama.cpp with cmake (25 minutes on 2 shared
# cores). The build is for this CPU (-DGGML_NATIVE=ON: -march=native), fine for a benchmark built and
# run on the same machine, not for a venv copied elsewhere. CMAKE_ARGS overrides it; no BLAS (llama.cpp's
# own CPU kernels, as its server ships by default). LLAMACPP_SPEC pins the version.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${LLAMACPP_VENV:-.venv-llamacpp}
SPEC=${LLAMACPP_SPEC:-llama-cpp-python[server]==0.3.36}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    exit 0
fi
echo "[setup_llamacpp] building $SPEC into $VENV (cmake build of llama.cpp: ~25 minutes on 2 cores)"
"$PYTHON" -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
CMAKE_ARGS=${CMAKE_ARGS:--DGGML_NATIVE=ON -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DLLAMA_CURL=OFF} \
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
    "$VENV/bin/python" -m pip install -q --no-cache-dir "$SPEC"
"$VENV/bin/python" -c "import llama_cpp, llama_cpp.server; print('[setup_llamacpp] llama-cpp-python', llama_cpp.__version__)"
