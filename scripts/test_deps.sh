#!/usr/bin/env bash
# What the tests need beyond the venv, installed when missing (make test runs this):
# - the CRD schemas of PodMonitor and KEDA's ScaledObject, from npm's @kubernetes-models packages,
#   into build/deploy-checks (tests/unit/test_deploy.py; needs node and npm);
# - Debian's prometheus, which tests/integration/test_dashboard.py starts against a real server.
set -euo pipefail
cd "$(dirname "$0")/.."
CRD_MODELS="@kubernetes-models/prometheus-operator@6.0.0 @kubernetes-models/keda@2.0.0"
DEST=build/deploy-checks
if [ "$(cat "$DEST/.installed" 2>/dev/null)" != "$CRD_MODELS" ]; then
    echo "[test-deps] npm: $CRD_MODELS"
    mkdir -p "$DEST"
    # shellcheck disable=SC2086 (one word per package)
    npm install --prefix "$DEST" --silent --no-audit --no-fund --no-save $CRD_MODELS
    echo "$CRD_MODELS" > "$DEST/.installed"
fi
if ! command -v prometheus >/dev/null; then
    echo "[test-deps] apt: prometheus"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
fi
