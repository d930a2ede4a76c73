"""Export and report on the shared local SparkSession, checked against the fixture's manifest."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import struct
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqctl.errors import ConflictError, StoreError
from mqctl.spark.decode import arrow_schema
from mqctl.spark.export import ExportProgress, _remove_partial, export, load

pytestmark = pytest.mark.spark

SCHEDULE = "SCHEDULE_TOPIC_XXXX"


@pytest.fixture(scope="module")
def exported(
    spark_keeper: Any, store_a: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, dict[str, Any]]:
    """The fixture exported once to Parquet with bodies, read back by physical offset."""
    out = tmp_path_factory.mktemp("export") / "all"
    seen: list[ExportProgress] = []
    result = export(spark_keeper.get(), store_a, out, with_body=True, partitions=6, progress=seen.append)
    assert result.rows == 5612 and result.files == 4
    assert seen[-1].bytes_done == seen[-1].bytes_total == result.data_bytes
    rows = pq.read_table(out).to_pylist()
    for row in rows:
        row["properties"] = dict(row["properties"])
    by_offset = {r["physical_offset"]: r for r in rows}
    assert len(by_offset) == len(rows) == 5612
    return by_offset


def test_spark_derives_exactly_the_decoders_arrow_schema(spark: Any, store_a: Path) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    for with_body in (False, True):
        schema = load(spark, store_a, with_body=with_body).schema
        assert to_arrow_schema(schema, timezone="UTC").equals(arrow_schema(with_body))


def test_export_holds_exactly_the_manifests_messages(
    exported: dict[int, dict[str, Any]], manifest: dict[str, Any]
) -> None:
    copies: set[int] = set()
    for m in manifest["messages"]:
        row = exported[m["commitLogOffset"]]
        topic = row["properties"].get("REAL_TOPIC", row["topic"]) if m["delayed"] else row["topic"]
        assert topic == m["topic"]
        assert row["topic"] == (SCHEDULE if m["delayed"] else m["topic"])
        assert row["queue_offset"] == (m["storedAs"]["queueOffset"] if m["delayed"] else m["queueOffset"])
        assert row["msg_id"] == m["offsetMsgId"]
        assert row["keys"] == m["keys"]
        assert row["tags"] == m["storedTags"]
        assert row["unique_key"] == m["uniqKey"]
        assert row["sys_flag"] == m["sysFlag"]
        assert round(row["born_timestamp"].timestamp() * 1000) == m["bornTimestamp"]
        assert len(row["body"]) == m["bodyLength"]
        assert hashlib.sha256(row["body"]).hexdigest() == m["bodySha256"]
        assert (row["body_size"] < m["bodyLength"]) == m["compressed"]  # body_size is the stored size
        assert row["body_inflated_size"] == (m["bodyLength"] if m["compressed"] else None)
        for copy in ([m["deliveredCopy"]] if m["delayed"] else []) + m.get("retryCopies", []):
            twin = exported[copy["commitLogOffset"]]
            assert (twin["topic"], twin["queue_offset"]) == (copy["topic"], copy["queueOffset"])
            assert hashlib.sha256(twin["body"]).hexdigest() == m["bodySha256"]
            copies.add(copy["commitLogOffset"])
    sent = {m["commitLogOffset"] for m in manifest["messages"]}
    extra = set(exported) - sent - copies
    assert len(sent) == 5600 and len(copies) == 10
    assert [exported[o]["topic"] for o in extra] == [SCHEDULE, SCHEDULE]  # the two retries' schedule copies
    assert all(exported[o]["properties"]["RETRY_TOPIC"] == "FixA_Events" for o in extra)
    counts = Counter(r["topic"] for r in exported.values())
    assert counts == manifest["counts"]["recordsInCommitLogPerTopic"]


def test_topic_and_time_window_export(
    spark: Any, store_a: Path, tmp_path: Path, exported: dict[int, dict[str, Any]]
) -> None:
    since = datetime(2026, 11, 21, 9, 10, tzinfo=UTC)
    until = datetime(2026, 11, 21, 9, 10, 20, tzinfo=UTC)
    result = export(
        spark,
        store_a,
        tmp_path / "w",
        fmt="json",
        topics=["FixA_Mixed", "FixA_Events"],
        since_ms=int(since.timestamp() * 1000),
        until_ms=int(until.timestamp() * 1000),
    )
    expected = sorted(
        o
        for o, r in exported.items()
        if r["topic"] in ("FixA_Mixed", "FixA_Events") and since <= r["store_timestamp"] <= until
    )
    lines = [
        json.loads(line)
        for f in sorted((tmp_path / "w").glob("part-*.json"))
        for line in f.read_text().splitlines()
    ]
    assert 0 < result.rows == len(expected) < 5612
    assert sorted(r["physical_offset"] for r in lines) == expected
    assert lines[0]["store_timestamp"].endswith("Z")


def test_topic_and_time_predicates_leave_spark_for_the_reader(
    spark: Any, store_a: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pushed predicates vanish from Spark's own Filter; the reader applies them (test_source checks how)."""
    load(
        spark,
        store_a,
        topics=["FixA_Mixed"],
        since_ms=1_795_252_190_000,
        until_ms=1_795_252_200_000,
        partitions=1,  # a read by the data source, not the driver's one-table shortcut
    ).explain()
    plan = capsys.readouterr().out
    assert "BatchScan rocketmq-commitlog" in plan
    assert "FixA_Mixed" not in plan and "store_timestamp#" in plan and ">=" not in plan and "<=" not in plan


def test_a_one_task_store_is_decoded_on_the_driver_into_the_same_rows(
    spark: Any, store_a: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """store-a fits one read task: no data source scan (no Python workers), and not one row differs."""
    from pyspark.sql import functions as F

    driver = load(spark, store_a, with_body=True)
    driver.explain()
    assert "BatchScan" not in capsys.readouterr().out
    source = load(spark, store_a, with_body=True, partitions=2)
    comparable = [F.to_json("properties") if c == "properties" else F.col(c) for c in driver.columns]
    a, b = driver.select(*comparable), source.select(*comparable)
    assert a.count() == b.count() == 5612
    assert a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0


def test_csv_flattens_keys_properties_and_body(
    spark: Any, store_a: Path, tmp_path: Path, exported: dict[int, dict[str, Any]]
) -> None:
    result = export(spark, store_a, tmp_path / "c", fmt="csv", topics=["FixA_Orders"], with_body=True)
    rows = [r for f in sorted((tmp_path / "c").glob("part-*.csv")) for r in csv.DictReader(f.open())]
    assert result.rows == len(rows) == 2800
    first = next(r for r in rows if r["physical_offset"] == "0")
    assert first["keys"] == " ".join(exported[0]["keys"]) == "ord-00000 cust-000"
    assert json.loads(first["properties"])["TAGS"] == "TagA"


def test_a_store_without_records_exports_nothing(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "store" / "commitlog").mkdir(parents=True)
    (tmp_path / "store" / "commitlog" / f"{0:020d}").write_bytes(bytes(4096))  # preallocated, never written
    result = export(spark, tmp_path / "store", tmp_path / "out")
    assert (result.rows, result.files, result.splits) == (0, 0, 0)


def test_an_existing_output_needs_overwrite(spark: Any, store_a: Path, tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    with pytest.raises(ConflictError):
        export(spark, store_a, tmp_path / "o", topics=["FixA_Mixed"])
    assert export(spark, store_a, tmp_path / "o", topics=["FixA_Mixed"], overwrite=True).rows == 800


def test_a_corrupt_record_names_its_file_and_offset(spark: Any, store_a: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(store_a / "commitlog", store / "commitlog")
    with open(store / "commitlog" / "00000000000000000000", "r+b") as f:
        f.write(struct.pack(">i", 289 + 4))  # the first record now claims 4 more bytes
    with pytest.raises(StoreError, match=r"corrupt record at .*00000000000000000000@0"):
        export(spark, store, tmp_path / "out", partitions=8)
    assert not (tmp_path / "out").exists()


def test_a_failed_job_s_output_written_after_its_first_removal_is_removed_too(tmp_path: Path) -> None:
    """A task of the failed stage still being killed can write its part after the first removal (the
    suite once saw the corrupt-record test's output left behind so)."""
    out = tmp_path / "out"
    (out / "_temporary").mkdir(parents=True)

    def straggler() -> None:
        while out.exists():
            time.sleep(0.001)
        (out / "_temporary" / "0").mkdir(parents=True)
        (out / "_temporary" / "0" / "part-00007.csv").write_text("late")

    late = threading.Thread(target=straggler)
    late.start()
    _remove_partial(out, settle=0.05)
    late.join()
    assert not out.exists()
