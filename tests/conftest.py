"""Fixtures shared by the whole suite (helpers live in tests/support/)."""

from __future__ import annotations

import functools
import gc
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from store.native import active as native_modules
from tests.support.cli import RunCli, clean_env, run_in_process, run_process
from tests.support.sources import parse

# Property tests check correctness, not speed (speed lives in benchmarks/): no per-example deadline, so a
# loaded machine cannot fail them. Loaded here, before any test module builds its own @settings on top.
settings.register_profile("mqctl", deadline=None)
settings.load_profile("mqctl")


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: own config dir, no inherited NameServer or colour settings."""
    return clean_env(tmp_path)


@pytest.fixture
def cli(cli_env: dict[str, str]) -> RunCli:
    """Run ``mqctl`` in this process (its real ``main``, own environment and streams): no interpreter
    start-up per call. Modules that test the entry point itself use ``cli_process``."""
    return functools.partial(run_in_process, cli_env)


@pytest.fixture
def cli_process(cli_env: dict[str, str]) -> RunCli:
    """Run the real ``mqctl`` entry point in a subprocess."""
    return functools.partial(run_process, cli_env)


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the commands tests start. A run started in the background by a script without job
    control (``pytest ... &``) begins with SIGINT ignored, and every program it starts would inherit
    that: ``msg tail`` would never stop on its press. Python's own handler is reset for the programs
    started (a handler set in Python is not inherited across exec; an ignored signal is)."""
    del config
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: Tests that take tens of seconds each (JVMs, real clients), started first so that under pytest-xdist
#: they run alongside the many short tests instead of being the last ones left.
LONG_FIRST = ("tests/spark/", "tests/interop/")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark slow what collection can tell is slow: a test on the shared local Spark session (a driver
    JVM starts in seconds) and a ``pure_python`` test while the compiled build is in use (a pytest
    subprocess of its own, see ``pytest_pyfunc_call``). Under pytest-xdist (``--dist loadgroup``) the
    Spark-session tests share one worker, one JVM, and so do the tests on the Spark Connect server (one
    server, not one per worker)."""
    xdist = config.pluginmanager.hasplugin("xdist")
    compiled = native_modules() is not None
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if compiled and item.get_closest_marker("pure_python") is not None:
            item.add_marker(pytest.mark.slow)
        if {"spark", "spark_keeper"} & fixtures:
            item.add_marker(pytest.mark.slow)
            if xdist:
                item.add_marker(pytest.mark.xdist_group("spark-session"))
        elif xdist and "connect_server" in fixtures:
            item.add_marker(pytest.mark.xdist_group("spark-connect"))
    if xdist:
        items.sort(
            key=lambda item: not item.nodeid.startswith(LONG_FIRST)
        )  # stable: same order on every worker


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A ``pure_python`` test injects faults into the store's own methods, which the compiled build
    (store/native.py) does not let it replace: while that build is in use, the test runs in a pytest
    subprocess on the pure-Python modules, the same sources, and fails here with its output."""
    if pyfuncitem.get_closest_marker("pure_python") is None or native_modules() is None:
        return None
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", pyfuncitem.nodeid],
        cwd=pyfuncitem.config.rootpath,
        env={**os.environ, "MQCTL_NATIVE": "0"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    if proc.returncode != 0:
        pytest.fail(f"on the pure-Python modules:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}", pytrace=False)
    return True


def pytest_sessionfinish() -> None:
    """Free the parsed product tree (tests/support/sources.py) before pytest's garbage collections at exit:
    five full passes over millions of AST nodes kept that worker ~1 s longer than the others.

    Those five passes (pytest's unraisable-exception check) cost ~0.2 s each over a worker's heap even so:
    one pass here collects every unreachable cycle, its finalizers' exceptions still reported, and the
    survivors are frozen, out of the passes that follow."""
    parse.cache_clear()
    gc.collect()
    gc.freeze()
