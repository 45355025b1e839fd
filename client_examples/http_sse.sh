#!/usr/bin/env bash
# Stream from the ensemble (TRT-LLM names) over HTTP server-sent events.
#   client_examples/http_sse.sh "What is the capital of France?" [max_tokens]
set -euo pipefail
PROMPT=${1:-What is the capital of France?}
MAX_TOKENS=${2:-64}
URL=${URL:-127.0.0.1:8000}
BODY=$(python3 -c 'import json,sys; print(json.dumps({"text_input": sys.argv[1], "max_tokens": int(sys.argv[2]), "stream": True}))' "$PROMPT" "$MAX_TOKENS")
curl -sN "$URL/v2/models/ensemble/generate_stream" -d "$BODY"
