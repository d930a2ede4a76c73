"""Spark test fixtures: the real broker fixture store, its manifest and one shared local SparkSession."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SHARED

FIXTURES = SHARED / "fixtures"


@pytest.fixture(scope="session")
def store_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """store-a unpacked once; the Spark tests only read it."""
    root = tmp_path_factory.mktemp("store-a")
    with tarfile.open(FIXTURES / "store-a.tar.xz") as tar:
        tar.extractall(root, filter="data")
    return root / "store-a"


@pytest.fixture(scope="session")
def manifest() -> dict[str, Any]:
    return json.loads((FIXTURES / "store-a.manifest.json").read_text())


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] session for the whole run (start-up costs seconds; every Spark test shares it)."""
    from mqctl.spark.session import find_java, spark_session

    if find_java() is None:
        pytest.skip("Spark needs Java")
    with spark_session("local[2]", app_name="mqctl-tests") as session:
        yield session
