"""Stores built on disk with a known shape, for tests of healing and inspection."""

from __future__ import annotations

from pathlib import Path

from store import DefaultMessageStore
from store.message import Message
from tests.store.conftest import small_config


def keyed_store(root: Path, **overrides: int) -> list[str]:
    """A store with three index files (400 entries each: 199 messages with a UNIQ_KEY and one KEY)."""
    keys = []
    with DefaultMessageStore(small_config(root, **overrides)) as s:
        for i in range(450):
            key = f"k{i}"
            msg = Message("K", f"b{i}".encode(), properties={"KEYS": key, "UNIQ_KEY": f"U{i:08d}"})
            assert s.put_message(msg).ok
            keys.append(key)
        assert len(s.index.files) == 3
    return keys
