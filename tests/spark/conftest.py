"""Spark test fixtures: the real broker fixture store, its manifest and a shared local SparkSession that
a broken test cannot take down with it (tests/support/spark.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import store_a_manifest
from tests.support.spark import SparkKeeper
from tests.support.stores import unpack_store_a


@pytest.fixture(scope="session")
def store_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """store-a unpacked once; the Spark tests only read it."""
    return unpack_store_a(tmp_path_factory.mktemp("store-a"))


@pytest.fixture(scope="session")
def manifest() -> dict[str, Any]:
    return store_a_manifest()


@pytest.fixture(scope="session")
def spark_keeper() -> Iterator[SparkKeeper]:
    from mqctl.spark.session import find_java

    if find_java() is None:
        pytest.skip("Spark needs Java")
    keeper = SparkKeeper()
    yield keeper
    keeper.discard()


#: How long after the test's pytest-timeout the watchdog kills a driver that still has not answered.
WATCHDOG_GRACE = 10.0


@pytest.fixture
def spark(spark_keeper: SparkKeeper, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The shared local session, healthy (recreated if an earlier test broke it), under a watchdog that
    kills the driver a little after the test's timeout (see :meth:`SparkKeeper.watchdog`)."""
    marker = request.node.get_closest_marker("timeout")
    timeout = float(marker.args[0] if marker and marker.args else request.config.getini("timeout") or 300)
    with spark_keeper.watchdog(timeout + WATCHDOG_GRACE):
        yield spark_keeper.get()
