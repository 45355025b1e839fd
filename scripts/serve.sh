#!/usr/bin/env bash
# Serve the model repository through a real tritonserver (from the nvidia-pytriton wheel).
#
#   scripts/serve.sh [--host ADDR] [--http-port N] [--grpc-port N] [--metrics-port N]
#                    [--openai-host ADDR] [--openai-port N] [--no-openai] [--no-restart]
#                    [--open-admin-api] [--openai-arg FLAG]... [--set KEY=VALUE]... [--instances N]
#                    [--model-json FILE]
#                    [any other tritonserver flag]...
#
# Beside tritonserver runs the OpenAI front (python -m tt_backend.openai_front) on --openai-port
# (default 9000, on --host unless --openai-host), over Triton's gRPC port; --no-openai turns it off.
# --openai-arg passes one flag to the front (e.g. --openai-arg=--limit-concurrency=64); its /metrics
# re-exports this tritonserver's metrics port. An API key (--openai-arg=--api-key=KEY, or better the
# env TT_BACKEND_API_KEY, which the front inherits and no process list shows) is never echoed here.
# --set writes an engine option (tt_backend.config.EngineConfig) into tt_llm's parameters in a
# fresh copy of model_repository/; `model` also goes to preprocessing and postprocessing.
# --model-json FILE puts a vllm_backend model.json (vLLM engine arguments, mapped onto ours: see the
# README's table) at tt_llm/1/model.json in that copy; --set options win over its arguments.
# The served name (--set served_model_name=NAME, else the model folder's name, whole) goes to tt_llm's
# metrics and to the front.
# --instances N writes tt_llm's instance_group count (N stub processes; on device=tt each opens
# its 1/N of the chips, see the README's Tenstorrent section).
# tritonserver runs in the foreground with its log on stdout, under scripts/supervise.py: when a
# model's backend process dies (Triton would go on reporting ready while that model fails every
# request), it restarts tritonserver; --no-restart makes it exit with status 1 instead.
# The OpenAI front runs under scripts/keep_running.py: when it dies it is started again, with
# backoff, and a log line says how it died (--no-restart does not apply to it).
#
# Triton's admin APIs (model-repository load/unload, logging and trace settings, shared-memory
# registration, statistics) need the header `admin-key` (gRPC: `triton-grpc-protocol-admin-key`)
# set to the env TT_BACKEND_ADMIN_KEY; without it they stay closed behind a random key nobody is
# told, so no client can turn on verbose logging or tracing (which would log prompts).
# --open-admin-api (or TT_BACKEND_OPEN_ADMIN_API=1) leaves them open to every client. Inference,
# health, metadata, model config and the metrics port stay open.
#
# Several servers share a host: each run has its own folder (a fresh copy of the repository) and its
# own shared-memory prefix for the Python backend's stubs (--backend-config=python,
# shm-region-prefix-name=..., unless one is given), so only the ports need to differ.
set -euo pipefail
CALLER_DIR=$(pwd)
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${VENV:-$ROOT/.venv}

HOST=127.0.0.1
HTTP_PORT=8000
GRPC_PORT=8001
METRICS_PORT=8002
OPENAI_HOST=
OPENAI_PORT=9000
OPENAI=1
OPENAI_ARGS=()
RESTART=()
OPEN_ADMIN=${TT_BACKEND_OPEN_ADMIN_API:-0}
SETS=()
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --host) HOST=$2; shift 2 ;;
        --http-port) HTTP_PORT=$2; shift 2 ;;
        --grpc-port) GRPC_PORT=$2; shift 2 ;;
        --metrics-port) METRICS_PORT=$2; shift 2 ;;
        --openai-host) OPENAI_HOST=$2; shift 2 ;;
        --openai-port) OPENAI_PORT=$2; shift 2 ;;
        --no-openai) OPENAI=0; shift ;;
        --openai-arg) OPENAI_ARGS+=("$2"); shift 2 ;;
        --openai-arg=*) OPENAI_ARGS+=("${1#--openai-arg=}"); shift ;;
        --no-restart) RESTART=(--no-restart); shift ;;
        --open-admin-api) OPEN_ADMIN=1; shift ;;
        --set) SETS+=(--set "$2"); shift 2 ;;
        --set=*) SETS+=(--set "${1#--set=}"); shift ;;
        --instances) SETS+=(--instances "$2"); shift 2 ;;
        --model-json) case "$2" in /*) f=$2 ;; *) f=$CALLER_DIR/$2 ;; esac; SETS+=(--model-json "$f"); shift 2 ;;
        --model-json=*) f=${1#--model-json=}; case "$f" in /*) ;; *) f=$CALLER_DIR/$f ;; esac
            SETS+=(--model-json "$f"); shift ;;
        *) EXTRA+=("$1"); shift ;;
    esac
done

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tt_backend_serve.XXXXXX")
# The stubs' shared-memory regions are named after this prefix: two servers with the same prefix
# collide. The run folder's unique suffix names it, unless the caller set one.
SHM_PREFIX=
OWN_SHM=
for arg in ${EXTRA[@]+"${EXTRA[@]}"}; do
    case "$arg" in *shm-region-prefix-name=*) SHM_PREFIX="${arg##*shm-region-prefix-name=}" ;; esac
done
if [ -z "$SHM_PREFIX" ]; then
    SHM_PREFIX="tt_backend_${RUN_DIR##*.}_" OWN_SHM=1
    EXTRA+=("--backend-config=python,shm-region-prefix-name=$SHM_PREFIX")
fi
# The admin APIs, behind one header on both frontends (Triton refuses an API named in two groups,
# so flags the caller passes for them replace ours).
ADMIN_APIS=model-repository,logging,trace,shared-memory,statistics
ADMIN_HEADER=admin-key
OWN_RESTRICTION=1
for arg in ${EXTRA[@]+"${EXTRA[@]}"}; do
    case "$arg" in --http-restricted-api*|--grpc-restricted-protocol*) OWN_RESTRICTION= ;; esac
done
if [ "$OPEN_ADMIN" = 1 ]; then
    echo "[serve] admin APIs ($ADMIN_APIS) open to every client (--open-admin-api)"
elif [ -z "$OWN_RESTRICTION" ]; then
    echo "[serve] admin APIs: restricted as the given --http-restricted-api/--grpc-restricted-protocol say"
else
    ADMIN_KEY=${TT_BACKEND_ADMIN_KEY:-}
    if [ -n "$ADMIN_KEY" ]; then
        echo "[serve] admin APIs ($ADMIN_APIS) need the header $ADMIN_HEADER" \
            "(gRPC: triton-grpc-protocol-$ADMIN_HEADER) set to TT_BACKEND_ADMIN_KEY"
    else  # closed: a key for this run only, never shown
        ADMIN_KEY=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
        echo "[serve] admin APIs ($ADMIN_APIS) closed; to open them set TT_BACKEND_ADMIN_KEY and send" \
            "it in the header $ADMIN_HEADER (gRPC: triton-grpc-protocol-$ADMIN_HEADER), or pass --open-admin-api"
    fi
    EXTRA+=("--http-restricted-api=$ADMIN_APIS:$ADMIN_HEADER=$ADMIN_KEY"
            "--grpc-restricted-protocol=$ADMIN_APIS:$ADMIN_HEADER=$ADMIN_KEY")
fi
# Regions a killed stub left behind under our own prefix go with the run folder.
cleanup() { rm -rf "$RUN_DIR"; [ -z "$OWN_SHM" ] || rm -f /dev/shm/"$SHM_PREFIX"*; }
trap cleanup EXIT

eval "$("$VENV/bin/python" "$ROOT/scripts/prepare_run.py" --run-dir "$RUN_DIR" \
    --repository "$ROOT/model_repository" ${SETS[@]+"${SETS[@]}"})"

# The stub runs the venv's interpreter and packages (first python on PATH) and libpython
# (first on LD_LIBRARY_PATH); files are read as UTF-8 whatever the locale.
export PATH="$VENV/bin:$PATH"
export LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUTF8=1 PYTHONIOENCODING=utf-8 PYTHONUNBUFFERED=1
# OpenMP: the runtime that bench/openmp.py measured faster on this CPU (recorded once per machine;
# GNU libgomp ran the engine thread's matmuls at single-thread speed on some machines, Intel's
# libiomp5 slowed fp32 products on others). TT_BACKEND_OPENMP=intel|gnu overrides the measurement.
OPENMP=${TT_BACKEND_OPENMP:-auto}
if [ "$OPENMP" = auto ]; then
    OPENMP=$("$VENV/bin/python" "$ROOT/bench/openmp.py" --choose "$VENV/.tt_backend-openmp" | tail -n 1) \
        || OPENMP=gnu
fi
if [ "$OPENMP" = intel ] && [ -f "$VENV/lib/libiomp5.so" ]; then
    export LD_PRELOAD="$VENV/lib/libiomp5.so${LD_PRELOAD:+:$LD_PRELOAD}"
    echo "[serve] OpenMP: Intel (libiomp5)${TT_BACKEND_OPENMP:+, from TT_BACKEND_OPENMP}"
else
    echo "[serve] OpenMP: GNU (torch's libgomp)${TT_BACKEND_OPENMP:+, from TT_BACKEND_OPENMP}"
fi

echo "[serve] model: $MODEL_DIR, served as $SERVED_MODEL_NAME"
echo "[serve] http $HOST:$HTTP_PORT  grpc $HOST:$GRPC_PORT  metrics $HOST:$METRICS_PORT"
echo "[serve] run folder $RUN_DIR  shm prefix $SHM_PREFIX"
case "$HOST" in 0.0.0.0|::|"[::]") LOCAL=127.0.0.1 ;; *) LOCAL=$HOST ;; esac
case "$LOCAL" in \[*) LOCAL_URL=$LOCAL ;; *:*) LOCAL_URL="[$LOCAL]" ;; *) LOCAL_URL=$LOCAL ;; esac
"$VENV/bin/python" "$ROOT/scripts/supervise.py" --ready-url "http://$LOCAL:$HTTP_PORT/v2/health/ready" \
    --shm-prefix "$SHM_PREFIX" ${RESTART[@]+"${RESTART[@]}"} -- \
"$TRITONSERVER" \
    --model-repository "$REPO" \
    --backend-directory "$BACKENDS" \
    --http-address "$HOST" --http-port "$HTTP_PORT" \
    --grpc-address "$HOST" --grpc-port "$GRPC_PORT" \
    --metrics-address "$HOST" --metrics-port "$METRICS_PORT" \
    --allow-metrics true \
    ${EXTRA[@]+"${EXTRA[@]}"} &
SERVER=$!
FRONT=
if [ "$OPENAI" = 1 ]; then
    echo "[serve] OpenAI front http://${OPENAI_HOST:-$HOST}:$OPENAI_PORT/v1 (over grpc $HOST:$GRPC_PORT)"
    # Restarted whenever it dies (1 s, doubling to 30 s between quick deaths), each death logged;
    # a bad flag (usage error, status 2) is final. Its port refuses while it is down.
    "$VENV/bin/python" "$ROOT/scripts/keep_running.py" --name "OpenAI front" --final-status 2 -- \
    "$VENV/bin/python" -m tt_backend.openai_front --host "${OPENAI_HOST:-$HOST}" --port "$OPENAI_PORT" \
        --triton-url "$HOST:$GRPC_PORT" --model "$MODEL_DIR" --max-model-len "$MAX_MODEL_LEN" \
        --served-model-name "$SERVED_MODEL_NAME" \
        --triton-metrics-url "http://$LOCAL_URL:$METRICS_PORT/metrics" \
        ${OPENAI_ARGS[@]+"${OPENAI_ARGS[@]}"} &
    FRONT=$!
fi
stop() { kill -TERM $SERVER ${FRONT:+$FRONT} 2>/dev/null || true; }
trap stop INT TERM
set +e
wait $SERVER
rc=$?
# A signal interrupts the first wait; wait again for tritonserver to finish unloading.
kill -0 $SERVER 2>/dev/null && wait $SERVER && rc=$?
[ -n "$FRONT" ] && kill -TERM $FRONT 2>/dev/null && wait $FRONT
exit $rc
