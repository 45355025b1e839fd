#!/usr/bin/env bash
# Profile a running server with NVIDIA genai-perf (its own venv: .venv-genai-perf).
#
#   scripts/genai_perf.sh tt_llm   [extra genai-perf flags]   # vllm_backend schema
#   scripts/genai_perf.sh ensemble [extra genai-perf flags]   # TRT-LLM schema
#
# genai-perf drives perf_analyzer. The PyPI perf-analyzer (2.58+) needs glibc 2.38; the binary in
# the tritonclient 2.48.0 wheel runs on Debian 12 with libb64 and libcudart.so.12 on the path.
# perf_analyzer reads Triton's statistics API, which scripts/serve.sh restricts: run both with the
# same TT_BACKEND_ADMIN_KEY (sent here as the gRPC header), or serve with --open-admin-api.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: scripts/genai_perf.sh tt_llm|ensemble [genai-perf flags]}
shift
VENV=.venv-genai-perf
if [ ! -x "$VENV/bin/genai-perf" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q genai-perf
    "$VENV/bin/pip" install -q --no-deps "tritonclient[all]==2.48.0" nvidia-cuda-runtime-cu12
fi
if ! ldconfig -p | grep -q libb64.so.0d; then
    apt-get install -y -q libb64-0d >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q libb64-0d >/dev/null; }
fi
CUDART=$("$VENV/bin/python" -c "import nvidia.cuda_runtime as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))")
TOKENIZER=$(.venv/bin/python -c "from tt_backend.models.checkpoint import resolve_model_dir; print(resolve_model_dir(''))")
BACKEND=vllm
[ "$MODEL" = ensemble ] && BACKEND=tensorrtllm
mkdir -p bench/results/genai-perf
cd bench/results/genai-perf
PATH="$(cd ../../.. && pwd)/$VENV/bin:$PATH" LD_LIBRARY_PATH="$CUDART${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    genai-perf profile -m "$MODEL" --endpoint-type kserve --backend "$BACKEND" --streaming \
    -u "${GRPC_URL:-127.0.0.1:8001}" --tokenizer "$TOKENIZER" \
    --synthetic-input-tokens-mean 100 --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean 32 --output-tokens-mean-deterministic \
    --request-count 16 --concurrency 4 \
    ${TT_BACKEND_ADMIN_KEY:+--header "triton-grpc-protocol-admin-key:$TT_BACKEND_ADMIN_KEY"} "$@"
