"""Stores for tests: the real RocketMQ 4.9.8 store ``store-a``, small-file configs, and stores built with a
known shape for tests of healing and inspection."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

from store import DefaultMessageStore, GetMessageStatus, MessageStore
from store.config import StoreConfig
from store.ha import ReplicaStore, frame_extent
from store.message import Message
from tests.support.paths import STORE_A_TAR


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


def ha_frames(master: ReplicaStore, start: int, batch: int) -> list[tuple[int, bytes]]:
    """What a master's HA transfer loop sends from ``start``: frames within files, up to ``batch`` bytes."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while n := frame_extent(offset, master.max_phy_offset, master.commit_log_file_size, batch):
        data = master.read_commit_log(offset, n)
        assert data is not None and len(data) == n
        out.append((offset, data))
        offset += n
    return out


def all_bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    """Every body a queue serves, pulled from offset 0 in 32-message reads."""
    out: list[bytes] = []
    offset = 0
    while True:
        res = store.get_messages("g", topic, queue_id, offset, 32)
        if res.status is not GetMessageStatus.FOUND:
            return out
        out += [m.message.body for m in res.messages]
        offset = res.next_begin_offset


def dledger_config(root: Path, **overrides: Any) -> StoreConfig:
    """:func:`small_config` in DLedger mode (member n0): the CommitLog in ``<root>/dledger-n0/data``; index
    files of 4 entries a slot, the shape offline commands read."""
    values: dict[str, Any] = {"enable_dleger_commit_log": True, "dleger_self_id": "n0", "max_index_num": 256}
    values.update(overrides)
    return small_config(root, **values)


def dledger_store(root: Path, count: int = 300, topic: str = "D", queues: int = 2) -> list[Message]:
    """A DLedger-mode store written by the engine: ``count`` keyed messages over ``queues`` queues."""
    msgs = [
        Message(
            topic,
            f"dledger-{i}-".encode() * 10,
            queue_id=i % queues,
            properties={"TAGS": f"t{i % 3}", "KEYS": f"dk-{i}", "UNIQ_KEY": f"DU{i:08d}"},
        )
        for i in range(count)
    ]
    with DefaultMessageStore(dledger_config(root)) as s:
        for m in msgs:
            assert s.put_message(m).ok
    return msgs


def kill_writer(script: str, root: Path, after: int = 400) -> list[tuple[int, ...]]:
    """Run ``script`` (a store writer printing one line of integers per acknowledged put) on ``root``,
    SIGKILL it after ``after`` lines, and return every line it printed: those printed before the kill
    were acknowledged too."""
    import signal
    import subprocess
    import sys

    from tests.support.bounded import read_line

    acked: list[tuple[int, ...]] = []
    with subprocess.Popen(
        [sys.executable, "-c", script, str(root)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
        text=True,
    ) as proc:
        assert proc.stdout is not None
        while len(acked) < after:
            line = read_line(proc)  # (a writer silent for its bound is killed and fails the test)
            if not line.endswith("\n"):  # its end, or cut by the writer's death (print's pieces are
                break  # separate writes under PYTHONUNBUFFERED): not a line it printed
            acked.append(tuple(int(x) for x in line.split()))
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read().split("\n")[:-1]  # (the last piece: a line the kill cut, or nothing)
        acked.extend(tuple(int(x) for x in line.split()) for line in rest if line.strip())
    return acked
