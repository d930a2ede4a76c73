"""The vectorised Spark decoder finds the same records, with the same fields, and the same end of data as
the CommitLog's one record iterator (``store.commitlog.RecordWalk``, which recovery and dispatch use):
on the real broker's store-a and on a store of ours whose files end in blank fillers. No Spark needed."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mqctl.spark.decode import batches, scan
from store import BLANK_MAGIC_CODE, DefaultMessageStore, Message, StoreConfig
from store.commitlog import RecordWalk
from store.inspect import commit_log, layout

pytestmark = pytest.mark.slow  # whole stores decoded twice, store-a unpacked: a second or more each

# walk's stop -> decoder's reason
_TAIL = {"blank-filler": "blank", "zeros": "eod", "end-of-file": "eod", "corrupt": "invalid"}


def _ms(value: datetime) -> int:
    return round(value.timestamp() * 1000)


def compare_files(root: Path) -> tuple[int, set[str]]:
    """Check every CommitLog file of ``root``; returns the records compared and the ways files ended."""
    compared = 0
    tails = set()
    with commit_log(layout(root)) as cl:
        for mf in cl.files.files:
            base = mf.file_from_offset
            walk = RecordWalk(cl.files, base, mf.end_offset)
            walked = [
                (
                    i.commit_log_offset,
                    i.size,
                    i.topic,
                    i.queue_id,
                    i.queue_offset,
                    i.sys_flag,
                    i.store_timestamp,
                    i.properties,
                )
                for i in walk
            ]
            buf = np.frombuffer(mf.view, dtype=np.uint8)
            found = scan(buf)
            rows: list[dict[str, Any]] = []
            for batch in batches(buf, found, base, mf.path):
                rows.extend(batch.to_pylist())
            decoded = [
                (
                    r["physical_offset"],
                    r["record_size"],
                    r["topic"],
                    r["queue_id"],
                    r["queue_offset"],
                    r["sys_flag"],
                    _ms(r["store_timestamp"]),
                    dict(r["properties"]),
                )
                for r in rows
            ]
            assert decoded == walked, mf.path
            assert (walk.corruption is not None) == (walk.stop == "corrupt"), mf.path
            assert (found.stop, found.reason) == (walk.data_end - base, _TAIL[walk.stop]), mf.path
            compared += len(walked)
            tails.add(walk.stop)
    return compared, tails


def test_decoder_agrees_with_the_record_iterator_on_store_a(store_a: Path, manifest: dict[str, Any]) -> None:
    compared, tails = compare_files(store_a)
    assert compared == sum(manifest["counts"]["recordsInCommitLogPerTopic"].values())
    assert tails == {"blank-filler", "zeros"}  # files the broker rolled, and the last one


def test_decoder_agrees_across_blank_fillers(tmp_path: Path) -> None:
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=16 * 1024)
    with DefaultMessageStore(cfg) as store:
        for n in range(120):
            props = {"TAGS": f"t{n % 3}", "KEYS": f"k{n} other"} if n % 2 else {}
            store.put_message(
                Message(topic=f"T{n % 2}", queue_id=n % 4, body=b"x" * (n * 7), properties=props)
            )
    compared, tails = compare_files(tmp_path / "store")
    assert compared == 120
    assert tails == {"blank-filler", "zeros"}


def test_decoder_agrees_that_a_blank_magic_short_of_the_file_end_is_damage(tmp_path: Path) -> None:
    """The writer's filler is TOTALSIZE = the bytes left in its file
    (docs/store-format.md §end-of-file-filler): a record whose magic reads as the filler's but whose size
    stops short ends the data as damage in both readers, never as a filler that quietly jumps over the rest of
    the file's records."""
    root = tmp_path / "store"
    size = 16 * 1024
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=size)
    with DefaultMessageStore(cfg) as store:
        offsets = [
            store.put_message(Message(topic="T", queue_id=0, body=b"x" * 300)).phys_offset for _ in range(100)
        ]
    victim = offsets[5]
    path = root / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[victim + 4 : victim + 8] = BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True)
    path.write_bytes(bytes(data))
    compared, tails = compare_files(root)
    assert compared == 100 - len([o for o in offsets if o < size]) + 5  # the damaged file's first five
    assert tails == {"corrupt", "blank-filler", "zeros"}
    found = scan(np.frombuffer(data, dtype=np.uint8))
    assert (found.stop, found.reason) == (victim, "invalid") and "file" in found.detail
