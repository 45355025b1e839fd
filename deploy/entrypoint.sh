#!/usr/bin/env bash
# The image's command: scripts/serve.sh on every interface, each file of ENGINE_OPTIONS_DIR (the
# keys of the engine-options ConfigMap, mounted there) passed as one --set KEY=VALUE, then "$@".
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${ENGINE_OPTIONS_DIR:-/etc/tt-backend/engine}
sets=()
if [ -d "$dir" ]; then
    for file in "$dir"/*; do
        [ -f "$file" ] && sets+=(--set "$(basename "$file")=$(cat "$file")")
    done
fi
exec bash scripts/serve.sh --host 0.0.0.0 ${sets[@]+"${sets[@]}"} "$@"
