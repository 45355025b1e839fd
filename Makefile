# The two commands: `make serve` and `make test`. Both install what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
SERVE_ARGS ?=
BENCH_ARGS ?=

.PHONY: setup serve test test-slow lint bench

setup:
	@bash scripts/setup.sh

serve: setup
	@bash scripts/serve.sh $(SERVE_ARGS)

test: setup
	$(PY) -m pytest -q -m "not slow"

test-slow: setup
	$(PY) -m pytest -q -m slow

bench: setup
	$(VENV)/bin/pip install -q matplotlib
	$(PY) bench/compare.py $(BENCH_ARGS)

lint: setup
	$(VENV)/bin/ruff check tt_backend tests bench scripts client_examples model_repository
	$(VENV)/bin/mypy
