#!/usr/bin/env bash
# device=tt on a machine with a Tenstorrent card: a venv with ttnn, torch, this project, tt-metal's
# `models` package and the vLLM its generators import; then `python -m tt_backend.tt_doctor`.
# Idempotent: a step whose result is already there is skipped. Exits as the doctor does: 0 when
# everything device=tt needs is there. Needs the network (PyPI, github.com, raw.githubusercontent.com,
# download.pytorch.org). The card's driver (tt-kmd), firmware and
# hugepages come first, from tt-metal's INSTALLING.md; the doctor's `chips` line tells whether ttnn
# sees the card. (make test-tt, on mock devices, uses scripts/setup_tt.sh instead.)
#
#   VENV_TT        the venv (default .venv-tt)
#   PYTHON         its Python, 3.10 or 3.12, the ones ttnn has wheels for (default: python3.12, else
#                  python3.10)
#   TTNN_SPEC      default "ttnn>=0.81.1,<0.82": the release this project's tests run (make test-tt).
#                  The runner needs a tt-metal whose Generator.prefill_forward_text takes start_pos
#                  (tt-metal PR #33883, January 2026), whose decode_forward_text takes enable_trace and
#                  read_from_device, whose read_decode_output takes async_read, and which has
#                  process_decode_output_host. An older ttnn is allowed; the doctor then names any
#                  call that tt-metal version lacks.
#   TORCH_SPEC     default "torch"; TORCH_INDEX_URL default https://download.pytorch.org/whl/cpu
#                  (ttnn runs torch on the host only; empty: the default index)
#   TT_METAL_SRC   where tt-metal is checked out (default $VENV_TT/src/tt-metal), at the tag of the
#                  installed ttnn (v<version>), only its models/ folder (a sparse, blob-less clone).
#                  `models` is not on PyPI: a .pth file puts this checkout on the venv's path.
#   TT_MODELS_DEPS what tt-metal's models/tt_transformers imports beyond ttnn, torch and transformers,
#                  requirement specs separated by spaces
#                  (from tt-metal's tt_metal/python_env/requirements-dev.txt: llama-models, its fork
#                  at tt_metal_tag, and blobfile, tiktoken, sentencepiece). Not that whole file: it is
#                  tt-metal's own test environment and pins torch and transformers to versions this
#                  project does not run. The doctor names any module still missing.
#   TT_VLLM        "upstream" (default) or "none"; VLLM_VERSION (default 0.25.1).
#
# The vLLM question. tt-metal's builtin generators (models/tt_transformers/tt/generator_vllm.py:
# LlamaForCausalLM, MistralForCausalLM, QwenForCausalLM) import vllm at module level (vllm.envs,
# vllm.model_executor.models.*, vllm.multimodal.*), so without vllm no builtin TT class resolves.
# This backend never runs vLLM; it only needs those imports to succeed. So vLLM is installed, the
# way the Tenstorrent vLLM plugin installs it now (tenstorrent/vllm-tt-plugin,
# docs/install-vllm-tt.sh; it replaced the Tenstorrent vLLM fork): upstream vLLM built for the
# `empty` target (no CUDA kernels, no torch dependency declared) with --no-deps, and its
# requirements/common.txt with the plugin's override (opencv-python-headless 4.11, the last one
# without a numpy 2 floor, since ttnn needs numpy<2). Not the fork: it builds from a git checkout
# paired commit by commit with tt-metal, and the plugin's maintainers have moved off it. Not a stub
# `vllm` package either: generator_vllm subclasses and registers vLLM's multimodal processors at
# import, which a stub would have to imitate per tt-metal version. TT_VLLM=none skips vLLM for a
# machine that serves only bundles (extra_models_dir) whose code does not import it.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV_TT:-.venv-tt}
TTNN_SPEC=${TTNN_SPEC:-ttnn>=0.81.1,<0.82}
TORCH_SPEC=${TORCH_SPEC:-torch}
TORCH_INDEX_URL=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
TT_VLLM=${TT_VLLM:-upstream}
VLLM_VERSION=${VLLM_VERSION:-0.25.1}
LLAMA_MODELS=llama-models@git+https://github.com/tenstorrent/llama-models.git@tt_metal_tag
TT_MODELS_DEPS=${TT_MODELS_DEPS-$LLAMA_MODELS blobfile tiktoken sentencepiece}
say() { echo "[setup-tt-hw] $*"; }

# 1. the venv, on a Python ttnn has wheels for
if [ ! -x "$VENV/bin/python" ]; then
    PY=${PYTHON:-$(command -v python3.12 || command -v python3.10 || true)}
    if [ -z "$PY" ]; then
        say "needs Python 3.12 or 3.10 (ttnn has wheels for those only); set PYTHON" >&2
        exit 1
    fi
    say "creating $VENV with $("$PY" --version)"
    "$PY" -m venv "$VENV"
fi
PYV=$("$VENV/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
case "$PYV" in
    3.10|3.12) ;;
    *) say "$VENV is Python $PYV; ttnn has wheels for 3.10 and 3.12 only: remove $VENV, set PYTHON" >&2
       exit 1 ;;
esac
pip() { "$VENV/bin/python" -m pip "$@"; }
pip install -q --upgrade pip
# ttnn needs numpy<2; every install after it keeps to that
CONSTRAINTS="$VENV/tt-constraints.txt"
printf '%s\n' "numpy>=1.24.4,<2" > "$CONSTRAINTS"

# 2. ttnn, torch (CPU: the host side of ttnn), this project
pip install -q "$TTNN_SPEC"
TTNN_VERSION=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("ttnn"))')
say "ttnn $TTNN_VERSION"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    pip install -q -c "$CONSTRAINTS" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"
fi
pip install -q -c "$CONSTRAINTS" -e ".[serve]"

# 3. tt-metal's models package: a sparse checkout at the ttnn's tag, on the path by a .pth file
SRC=${TT_METAL_SRC:-$VENV/src/tt-metal}
TAG="v$TTNN_VERSION"
if [ ! -d "$SRC/.git" ]; then
    say "checking out tt-metal $TAG (models/ only) into $SRC"
    mkdir -p "$(dirname "$SRC")"
    git clone -q --depth 1 --branch "$TAG" --filter=blob:none --sparse \
        https://github.com/tenstorrent/tt-metal.git "$SRC"
    git -C "$SRC" sparse-checkout set models
elif [ "$(git -C "$SRC" describe --tags --exact-match 2>/dev/null || true)" != "$TAG" ]; then
    say "$SRC is not at $TAG, the tag of ttnn $TTNN_VERSION (models and ttnn must match):" \
        "move it away, or set TT_METAL_SRC" >&2
    exit 1
fi
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
(cd "$SRC" && pwd) > "$SITE/tt_metal_models.pth"
read -r -a models_deps <<< "$TT_MODELS_DEPS"
[ ${#models_deps[@]} -eq 0 ] || pip install -q -c "$CONSTRAINTS" "${models_deps[@]}"

# 4. vLLM, only imported (see the header)
if [ "$TT_VLLM" = upstream ]; then
    if ! "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
        say "installing vLLM $VLLM_VERSION (target empty, --no-deps) and its common requirements"
        work=$(mktemp -d)
        trap 'rm -rf "$work"' EXIT
        curl -fsSL -o "$work/common.txt" \
            "https://raw.githubusercontent.com/vllm-project/vllm/v$VLLM_VERSION/requirements/common.txt"
        grep -v '^opencv-python-headless' "$work/common.txt" > "$work/requirements.txt"
        pip install -q -c "$CONSTRAINTS" -r "$work/requirements.txt" "opencv-python-headless==4.11.0.86"
        # vLLM's build requirements pin a CUDA torch: build against the venv's own torch instead
        pip install -q -c "$CONSTRAINTS" "setuptools>=77.0.3,<81" "setuptools-scm>=8" wheel packaging jinja2
        VLLM_TARGET_DEVICE=empty pip install -q --no-deps --no-build-isolation --no-binary vllm \
            "vllm==$VLLM_VERSION"
    fi
elif [ "$TT_VLLM" != none ]; then
    say "TT_VLLM=$TT_VLLM is neither upstream nor none" >&2
    exit 1
fi

# 5. what is there, and what is not: the doctor's exit status is this script's
say "$VENV installed; the doctor:"
"$VENV/bin/python" -m tt_backend.tt_doctor
