"""``mqctl spark-export`` through the real entry point: a fresh-process export, report, and the error lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqctl.cli.app import main
from mqctl.errors import UsageError
from tests.conftest import RunCli


@pytest.mark.spark
@pytest.mark.slow
def test_export_in_a_fresh_process(cli: RunCli, store_a: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli(
        "spark-export",
        "--store",
        str(store_a),
        "--out",
        str(out),
        "--master",
        "local[2]",
        "-o",
        "json",
        timeout=240,
    )
    assert result.code == 0, result.stderr
    summary = result.json()
    assert (summary["rows"], summary["files"], summary["format"]) == (5612, 4, "parquet")
    assert summary["mb_per_s"] > 0 and summary["data_bytes"] >= summary["record_bytes"] > 0
    table = pq.read_table(out)
    assert table.num_rows == 5612 and "body" not in table.column_names


@pytest.mark.spark
def test_report_prints_tables_and_writes_json_and_charts(
    spark: Any, store_a: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "spark-export",
            "report",
            "--store",
            str(store_a),
            "--json",
            str(tmp_path / "r.json"),
            "--charts",
            str(tmp_path / "png"),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    for title in (
        "Records per topic",
        "Queue skew per topic",
        "Retry, DLQ and scheduled volume",
        "Per-file content",
    ):
        assert title in printed
    report = json.loads((tmp_path / "r.json").read_text())
    assert {r["topic"]: r["records"] for r in report["topics"]}["FixA_Orders"] == 2800
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == [
        "throughput-record-bytes.png",
        "throughput-records.png",
    ]


@pytest.mark.spark
def test_report_as_json_on_stdout(spark: Any, store_a: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["spark-export", "report", "--store", str(store_a), "--topic", "FixA_Events", "-o", "json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert [(r["topic"], r["records"]) for r in report["topics"]] == [("FixA_Events", 2000)]
    assert [(q["queues"], q["min_records"], q["max_records"]) for q in report["queues"]] == [(4, 500, 500)]


def test_missing_java_is_one_line_that_says_what_to_install(
    cli: RunCli, store_a: Path, tmp_path: Path
) -> None:
    result = cli(
        "spark-export",
        "--store",
        str(store_a),
        "--out",
        str(tmp_path / "o"),
        env={"JAVA_HOME": str(tmp_path)},
    )
    assert result.code == UsageError.exit_code
    assert result.stderr.count("\n") == 1 and "Java" in result.stderr and "install" in result.stderr


def test_missing_spark_extra_is_one_line(cli: RunCli, store_a: Path, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "pyspark"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named pyspark')\n")
    result = cli("spark-export", "report", "--store", str(store_a), env={"PYTHONPATH": str(shadow.parent)})
    assert result.code == UsageError.exit_code
    assert result.stderr.count("\n") == 1 and "pip install 'mqctl[spark]'" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["spark-export", "--store", "{store}"],
        ["spark-export", "--store", "{store}", "--out", "{tmp}/o", "--since", "yesterday-ish"],
        ["spark-export", "--store", "{store}", "--out", "{tmp}/o", "--since", "now", "--until", "-1h"],
        ["spark-export", "--store", "{tmp}/missing", "--out", "{tmp}/o"],
        ["spark-export", "--store", "{store}", "--out", "{tmp}/o", "--format", "avro"],
    ],
)
def test_usage_errors(cli: RunCli, store_a: Path, tmp_path: Path, args: list[str]) -> None:
    result = cli(*(a.format(store=store_a, tmp=tmp_path) for a in args))
    assert result.code == UsageError.exit_code
    assert result.stderr.startswith("mqctl: error:") and result.stderr.count("\n") == 1
