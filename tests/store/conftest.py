"""Fixtures for store tests: the real RocketMQ 4.9.8 store ``store-a`` and small-file configs."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from store.config import StoreConfig
from tests.conftest import SHARED

FIXTURES = SHARED / "fixtures"
STORE_A_TAR = FIXTURES / "store-a.tar.xz"
STORE_A_MANIFEST = FIXTURES / "store-a.manifest.json"


def unpack_store_a(dest: Path) -> Path:
    """Unpack the fixture tarball into ``dest`` and return the store root."""
    with tarfile.open(STORE_A_TAR) as tar:
        tar.extractall(dest, filter="data")
    return dest / "store-a"


def store_a_config(root: Path, **overrides: Any) -> StoreConfig:
    """The fixture broker's store settings (1 MiB CommitLog, 300-unit ConsumeQueues, small index)."""
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=1_048_576,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=5000,
        max_index_num=20000,
        **overrides,
    )


@pytest.fixture(scope="session")
def store_a_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One shared, read-only unpacked copy of store-a (tests that write unpack their own)."""
    if not STORE_A_TAR.exists():
        pytest.skip("store-a fixture not available")
    return unpack_store_a(tmp_path_factory.mktemp("store-a-shared"))


@pytest.fixture
def store_a_copy(tmp_path: Path) -> Path:
    """A private, writable copy of store-a."""
    if not STORE_A_TAR.exists():
        pytest.skip("store-a fixture not available")
    return unpack_store_a(tmp_path)


@pytest.fixture(scope="session")
def manifest() -> dict[str, Any]:
    with open(STORE_A_MANIFEST, encoding="utf-8") as f:
        return json.load(f)


def small_config(root: Path, **overrides: Any) -> StoreConfig:
    """Tiny files so tests roll CommitLog, ConsumeQueue and index files quickly."""
    values: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": 64 * 1024,
        "mapped_file_size_consume_queue": 20 * 50,
        "max_hash_slot_num": 64,
        "max_index_num": 400,
        "flush_interval_commit_log": 50,
        "flush_interval_consume_queue": 50,
    }
    values.update(overrides)
    return StoreConfig(**values)
