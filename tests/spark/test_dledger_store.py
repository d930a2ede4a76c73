"""spark-export and the CommitLog data source over a DLedger-mode store (records inside DLedger entries)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqctl.spark.export import export
from mqctl.spark.source import list_files, plan_tasks, read_split
from store import dledger as dl
from store.message import Message
from tests.support.stores import dledger_store

COUNT = 300


@pytest.fixture(scope="module")
def dstore(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Message]]:
    root = tmp_path_factory.mktemp("dledger") / "store"
    return root, dledger_store(root, COUNT)


def _entry_offsets(root: Path) -> list[int]:
    """Each record's offset as the DLedger log says: entry pos + BODY_OFFSET."""
    out = []
    for path in sorted((root / "dledger-n0" / "data").iterdir()):
        raw, pos, base = path.read_bytes(), 0, int(path.name)
        while pos + 8 <= len(raw) and raw[pos : pos + 4] == b"\0\0\0\1":
            entry = dl.decode_entry(raw, pos)
            out.append(base + pos + dl.BODY_OFFSET)
            pos += entry.size
    return out


def test_the_source_reads_every_record_of_the_entries(dstore: tuple[Path, list[Message]]) -> None:
    root, msgs = dstore
    files = list_files(root)
    assert len(files) >= 2 and all(f.entry_header == dl.BODY_OFFSET for f in files)
    offsets: list[int] = []
    bodies: list[bytes] = []
    for task in plan_tasks(files, partitions=3):
        for split in task.splits:
            for batch in read_split(split, with_body=True):
                offsets += batch.column("physical_offset").to_pylist()
                bodies += batch.column("body").to_pylist()
    assert offsets == _entry_offsets(root)
    assert bodies == [m.body for m in msgs]


@pytest.mark.spark
@pytest.mark.slow
def test_spark_export_of_a_dledger_store(
    spark: Any, dstore: tuple[Path, list[Message]], tmp_path: Path
) -> None:
    root, msgs = dstore
    out = tmp_path / "out"
    result = export(spark, root, out, with_body=True, partitions=2)
    assert result.rows == COUNT
    rows = sorted(pq.read_table(out).to_pylist(), key=lambda r: r["physical_offset"])
    assert [r["physical_offset"] for r in rows] == _entry_offsets(root)
    assert [hashlib.sha256(r["body"]).hexdigest() for r in rows] == [
        hashlib.sha256(m.body).hexdigest() for m in msgs
    ]
    assert [r["keys"] for r in rows] == [[m.properties["KEYS"]] for m in msgs]
