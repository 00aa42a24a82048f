# Two commands do all set-up on a fresh machine (they create .venv and install into it):
#   make demo    run the main job: a long synthetic conversation through the strategies
#   make test    run the whole test suite
# Also: make lint (ruff + mypy), make bench (benchmarks), make ci (what .ci/run runs).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench ci clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m langmem_ext demo

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check langmem_ext tests bench scripts
	$(BIN)/ruff format --check langmem_ext tests bench scripts
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)
	$(BIN)/python -m bench.summaries $(BENCH_ARGS)

ci: lint test

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache .hypothesis
