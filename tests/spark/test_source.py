"""Split planning, split reading and filter pushdown of the data source, driven without Spark."""

from __future__ import annotations

import shutil
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan, StringStartsWith

from mqctl.spark.source import (
    CommitLogDataSource,
    CommitLogReader,
    Split,
    list_files,
    plan_splits,
    plan_tasks,
    read_split,
)
from store.errors import CorruptRecordError
from store.record import read_record_info


def offsets(splits: list[Split], **kwargs: object) -> list[int]:
    out: list[int] = []
    for split in splits:
        for batch in read_split(split, **kwargs):  # type: ignore[arg-type]
            out.extend(batch.column("physical_offset").to_pylist())
    return out


def reference_offsets(store: Path) -> list[int]:
    """Every record start, by walking each file with the reference codec."""
    out = []
    for f in list_files(store):
        data = Path(f.path).read_bytes()
        pos = 0
        while pos + 8 <= len(data) and data[4:8] != b"\0\0\0\0":
            try:
                info = read_record_info(data, pos)
            except CorruptRecordError:
                break
            out.append(info.commit_log_offset)
            pos += info.size
    return out


@pytest.mark.slow
def test_files_are_listed_in_offset_order(store_a: Path) -> None:
    files = list_files(store_a)
    assert [f.base_offset for f in files] == [0, 1 << 20, 2 << 20, 3 << 20]
    assert list_files(store_a / "commitlog") == files


@pytest.mark.slow
@pytest.mark.parametrize(("partitions", "tasks"), [(None, 1), (1, 1), (3, 3), (6, 6), (8, 8)])
def test_small_files_share_a_task_and_tasks_cover_every_split_in_order(
    store_a: Path, partitions: int | None, tasks: int
) -> None:
    """store-a (four 1 MiB files, 3.4 MB) is one task by default: one Python worker, not four."""
    planned = plan_tasks(list_files(store_a), partitions=partitions)
    assert len(planned) == tasks
    assert [s for t in planned for s in t.splits] == plan_splits(list_files(store_a), partitions=partitions)
    assert offsets([s for t in planned for s in t.splits]) == reference_offsets(store_a)


@pytest.mark.slow
@pytest.mark.parametrize("partitions", [None, 1, 3, 8, 50, 400])
def test_any_split_count_reads_every_record_exactly_once(store_a: Path, partitions: int | None) -> None:
    splits = plan_splits(list_files(store_a), partitions=partitions)
    assert len(splits) >= min(partitions or 4, 4)
    got = offsets(splits)
    assert len(got) == 5612
    assert got == reference_offsets(store_a)
    starts = set(got)
    assert all(s.start == 0 or s.base_offset + s.start in starts for s in splits)


def test_a_chain_that_misses_the_next_split_fails_loudly(store_a: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(store_a / "commitlog", store / "commitlog")
    splits = plan_splits(list_files(store), partitions=8)
    victim = splits[0]
    assert not victim.last_in_file
    with open(victim.path, "r+b") as f:  # grow the first record so the chain skips its successor
        size = struct.unpack(">i", f.read(4))[0]
        f.seek(0)
        f.write(struct.pack(">i", size + 4))
    with pytest.raises(CorruptRecordError) as err:
        offsets([victim])
    assert err.value.path == victim.path and err.value.offset == 0


def test_a_missing_commitlog_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list_files(tmp_path)


@pytest.mark.slow
def test_topic_and_time_filters_are_pushed_and_the_rest_handed_back(store_a: Path) -> None:
    since = datetime(2026, 11, 21, 9, 10, 0, tzinfo=UTC)
    until = datetime(2026, 11, 21, 9, 10, 30, tzinfo=UTC)
    unsupported = StringStartsWith(("tags",), "mix")
    reader = CommitLogReader(str(store_a), with_body=False, partitions=6, split_bytes=1 << 20)
    left = list(reader.pushFilters([
        In(("topic",), ("FixA_Mixed", "FixA_Events")),
        EqualTo(("topic",), "FixA_Mixed"),
        GreaterThanOrEqual(("store_timestamp",), since),
        LessThan(("store_timestamp",), until),
        unsupported,
    ]))  # fmt: skip
    assert left == [unsupported]
    rows = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    every = [r for s in plan_splits(list_files(store_a)) for b in read_split(s) for r in b.to_pylist()]
    expected = [
        r["physical_offset"]
        for r in every
        if r["topic"] == "FixA_Mixed" and since <= r["store_timestamp"] < until
    ]
    assert expected and [r["physical_offset"] for r in rows] == expected


def test_naive_timestamp_literals_are_read_as_local_time(store_a: Path) -> None:
    """PySpark hands timestamp literals over as naive local datetimes."""
    reader = CommitLogReader(str(store_a), with_body=False, partitions=None, split_bytes=1 << 20)
    aware = datetime(2026, 11, 21, 9, 10, tzinfo=UTC)
    assert (
        list(
            reader.pushFilters(
                [GreaterThanOrEqual(("store_timestamp",), aware.astimezone().replace(tzinfo=None))]
            )
        )
        == []
    )
    assert reader.record_filter.store_from_us == int(aware.timestamp()) * 1_000_000


def test_options_are_case_insensitive_and_schema_follows_with_body(store_a: Path) -> None:
    source = CommitLogDataSource({"path": str(store_a), "With_Body": "TRUE", "PARTITIONS": "5"})
    assert "body BINARY" in source.schema()
    reader = source.reader(None)
    assert isinstance(reader, CommitLogReader) and reader.with_body and reader.partitions_wanted == 5
    assert "body BINARY" not in CommitLogDataSource({"path": str(store_a)}).schema()
