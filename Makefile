# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint docs bench clean native

# (Re)build the virtualenv when it is missing or the packaging changed since the last install.
# `make run` needs the base package only; tests, lint and benchmarks add the spark and dev extras.
# (An editable install compiles nothing: `make native` builds build/native, used while it matches the sources.)
$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

DEV_STAMP := $(VENV)/.installed-dev
$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[spark,dev,grpc]'
	touch $(DEV_STAMP)

# The real third-party clients (C++ via PyPI rocketmq==0.4.4, Node ali-ons) that tests/interop drives.
INTEROP_STAMP := .venv-interop/.installed
$(INTEROP_STAMP): scripts/install-interop-clients.sh tests/interop/package.json tests/interop/package-lock.json
	bash scripts/install-interop-clients.sh
	mkdir -p .venv-interop && touch $(INTEROP_STAMP)

# The broker's hot modules compiled with mypyc into build/native (store/native.py, scripts/build_native.py,
# docs/design/compiled-build.md), and the ACL check's HMAC-SHA1 in C where OpenSSL's headers are; mypy (the `native` extra) is installed
# first when missing. A no-op when the build matches the sources; pure Python (and hashlib) without a
# compiler. It waits for a build `make run` started in the background, so what follows tests that build.
native: $(STAMP)
	$(BIN)/python scripts/build_native.py --install-deps

# Starts at once: when build/native is missing or stale it is compiled in the background, and this start
# runs pure Python (the broker's start-up line says which build runs; `mqctl --version` too).
# ARGS go to `mqctl up`, e.g. make run ARGS='--data /tmp/mq --namesrv-port 19876 --broker-port 20911'.
ARGS ?=
run: $(STAMP)
	$(BIN)/python scripts/build_native.py --install-deps --background
	$(BIN)/mqctl up $(ARGS)

# pytest-xdist workers: more than the cores, since most tests wait on sockets, subprocesses and JVMs;
# --dist loadgroup keeps the tests on the shared local Spark session in one worker (one driver JVM).
PYTEST_WORKERS ?= 4
PYTEST := $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

test: $(DEV_STAMP) $(INTEROP_STAMP) native
	$(PYTEST)

# The quick loop while editing: everything but the tests marked slow (Spark, interop clients, daemons and
# CLIs started as processes, SIGKILL runs, pure_python reruns, the longest property tests). `make test`
# still runs them all.
test-fast: $(DEV_STAMP) native
	$(PYTEST) -m "not slow"

lint: $(DEV_STAMP)
	$(BIN)/ruff check mqctl daemon store tests benchmarks
	$(BIN)/ruff format --check mqctl daemon store tests benchmarks
	$(BIN)/mypy

docs: $(STAMP)
	$(BIN)/python -m mqctl.docs .

# Every goal benchmark with its default (small) sizes, about ten minutes in all; each ends with one line
# "bench_NAME: FIGURE (...; load L)" (docs/performance.md). benchmarks/tools/ holds the A/B harness and
# the load generators, which take arguments and are not run here.
bench: $(DEV_STAMP) $(INTEROP_STAMP) native
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build
