#!/usr/bin/env bash
# Scrape the LLM metrics from Triton's metrics port (vLLM names plus this backend's tt:* ones).
#   client_examples/metrics.sh [host:port]
set -euo pipefail
curl -s "http://${1:-127.0.0.1:8002}/metrics" | grep -E '^(vllm|tt):' | grep -v '_bucket'
