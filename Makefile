# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint docs bench clean

# (Re)build the virtualenv when it is missing or pyproject.toml changed since the last install.
# `make run` needs the base package only; tests, lint and benchmarks add the spark and dev extras.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

DEV_STAMP := $(VENV)/.installed-dev
$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[spark,dev]'
	touch $(DEV_STAMP)

# The real third-party clients (C++ via PyPI rocketmq==0.4.4, Node ali-ons) that tests/interop drives.
INTEROP_STAMP := .venv-interop/.installed
$(INTEROP_STAMP): scripts/install-interop-clients.sh tests/interop/package.json tests/interop/package-lock.json
	bash scripts/install-interop-clients.sh
	mkdir -p .venv-interop && touch $(INTEROP_STAMP)

run: $(STAMP)
	$(BIN)/mqctl up

test: $(DEV_STAMP) $(INTEROP_STAMP)
	$(BIN)/python -m pytest

lint: $(DEV_STAMP)
	$(BIN)/ruff check mqctl daemon store tests benchmarks
	$(BIN)/mypy

docs: $(STAMP)
	$(BIN)/python -m mqctl.docs .

bench: $(DEV_STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
