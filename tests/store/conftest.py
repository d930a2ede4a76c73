"""Fixtures for store tests: the real RocketMQ 4.9.8 store ``store-a`` (helpers: tests/support/stores.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import store_a_manifest
from tests.support.stores import unpack_store_a


@pytest.fixture(scope="session")
def store_a_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One shared, read-only unpacked copy of store-a (tests that write unpack their own)."""
    return unpack_store_a(tmp_path_factory.mktemp("store-a-shared"))


@pytest.fixture
def store_a_copy(tmp_path: Path) -> Path:
    """A private, writable copy of store-a."""
    return unpack_store_a(tmp_path)


@pytest.fixture(scope="session")
def manifest() -> dict[str, Any]:
    return store_a_manifest()
