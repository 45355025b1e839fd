#!/usr/bin/env bash
# Stream from the ensemble (TRT-LLM names) over HTTP server-sent events.
#   client_examples/http_sse.sh "What is the capital of France?" [max_tokens]
# The ensemble tokenizes text_input as sent (apply_chat_template=false, as TRT-LLM's): this script
# wraps the question in SmolLM2-Instruct's chat template, as the tokenizer renders it; RAW=1 sends it bare.
set -euo pipefail
PROMPT=${1:-What is the capital of France?}
MAX_TOKENS=${2:-64}
URL=${URL:-127.0.0.1:8000}
BODY=$(python3 -c '
import json, os, sys
prompt = sys.argv[1]
if os.environ.get("RAW") != "1":
    prompt = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")
print(json.dumps({"text_input": prompt, "max_tokens": int(sys.argv[2]), "stream": True}))' "$PROMPT" "$MAX_TOKENS")
curl -sN "$URL/v2/models/ensemble/generate_stream" -d "$BODY"
