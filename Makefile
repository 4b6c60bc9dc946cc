# Every target installs what it needs first: `make serve` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install clients llama-server serve fake-upstream test lint format bench mutate clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

clients:  ## install the pinned real clients the client tests drive (cached outside the repo)
	scripts/install-clients

llama-server:  ## build the pinned llama.cpp llama-server the llama-server tests run (cached outside the repo)
	scripts/install-llama-server

serve: $(STAMP)  ## serve the gateway on its embedded defaults (ARGS="--upstream ..." to change)
	$(BIN)/stateway serve $(ARGS)

fake-upstream: $(STAMP)  ## a deterministic fake model server on :8000
	$(BIN)/stateway fake-upstream $(ARGS)

# The suite spends most of its time waiting on servers it started (gateways, fake model
# servers, real clients), so it runs in TEST_WORKERS processes, a test file per process
# at a time (module-scoped servers are started once); TEST_WORKERS=0 runs it in one.
TEST_WORKERS ?= 3

# llama-server is built before the suite (minutes, once; longer than a test may take),
# where cmake and a C++ compiler are at hand (elsewhere its tests skip).
# Each server a test starts is a new Python process importing the gateway: its modules
# are compiled once first (into __pycache__, which git ignores), not from source by every
# process where PYTHONDONTWRITEBYTECODE is set, as on CI's machines (half a second of CPU
# a process: a third of tests/cli's time).
test: $(STAMP)  ## the whole test suite (SQLite and PostgreSQL; installs the real clients and builds llama-server on first use)
	@if command -v cmake >/dev/null && command -v c++ >/dev/null; then scripts/install-llama-server >/dev/null; fi
	$(BIN)/python -m compileall -q -j 0 src tests bench >/dev/null
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)  ## latency/throughput/memory benchmark (ARGS="--quick" for a smoke run); writes bench/results/ and docs/benchmarks.md
	@command -v wrk >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq wrk; \
	  else \
	    echo "bench: wrk is missing; install it, e.g. 'sudo apt-get install wrk'" >&2; exit 1; \
	  fi; }
	$(BIN)/python -m bench $(ARGS)

MUTATE_STAMP := $(VENV)/.installed-mutate

$(MUTATE_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,mutate]'
	touch $(MUTATE_STAMP)

# Not a CI gate: a habit before and after changing core/, protocols/ or backends/.
mutate: $(MUTATE_STAMP)  ## mutation testing against the in-memory unit tests ([tool.mutmut]); ARGS="stateway.core.loop*" for one module; see docs/mutation.md
	STATEWAY_HYPOTHESIS_PROFILE=mutate $(BIN)/mutmut run --max-children $(or $(JOBS),2) $(ARGS) </dev/null
	$(BIN)/mutmut results

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache mutants
