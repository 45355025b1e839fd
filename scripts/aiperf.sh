#!/usr/bin/env bash
# Profile the OpenAI front of a running server with NVIDIA aiperf (its own venv: .venv-aiperf).
#
#   scripts/aiperf.sh                 # streamed chat completions at http://127.0.0.1:9000
#   scripts/aiperf.sh completions     # streamed completions
#   OPENAI_URL=http://127.0.0.1:9100 scripts/aiperf.sh chat --concurrency 32 --request-count 64
#
# 100 synthetic prompt tokens, 32 output tokens (ignore_eos, so every request runs its length),
# 16 requests at concurrency 4, each default left out when the extra flags give it. Token
# counts are the server's (usage in the stream), as the front reports them. Artifacts (CSV, JSON)
# go to bench/results/aiperf/.
set -euo pipefail
cd "$(dirname "$0")/.."
ENDPOINT=${1:-chat}
[ $# -gt 0 ] && shift
case "$ENDPOINT" in chat|completions) ;; *) echo "usage: scripts/aiperf.sh [chat|completions] [aiperf flags]" >&2; exit 2;; esac
URL=${OPENAI_URL:-http://127.0.0.1:9000}
VENV=.venv-aiperf
if [ ! -x "$VENV/bin/aiperf" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q aiperf
fi
MODEL=$("$VENV/bin/python" -c "import json, sys, urllib.request
print(json.load(urllib.request.urlopen(sys.argv[1] + '/v1/models', timeout=10))['data'][0]['id'])" "$URL")
TOKENIZER=$(.venv/bin/python -c "from tt_backend.models.checkpoint import resolve_model_dir; print(resolve_model_dir(''))")
DEFAULTS=()
for pair in --synthetic-input-tokens-mean=100 --synthetic-input-tokens-stddev=0 --output-tokens-mean=32 \
            --extra-inputs=ignore_eos:true --request-count=16 --concurrency=4 \
            --artifact-dir=bench/results/aiperf --ui-type=none; do
    flag=${pair%%=*}
    case " $* " in *" $flag "*|*" $flag="*) ;; *) DEFAULTS+=("$flag" "${pair#*=}");; esac  # aiperf refuses a flag twice
done
"$VENV/bin/aiperf" profile -m "$MODEL" --url "$URL" --endpoint-type "$ENDPOINT" --streaming \
    --tokenizer "$TOKENIZER" --use-server-token-count "${DEFAULTS[@]}" "$@"
