"""``mqctl spark-export`` through the real entry point: report (on the shared session) and the error lines.

The fresh-process export runs in ``test_standalone`` (against a real master), so it is not repeated here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mqctl.cli.app import main
from mqctl.errors import NotFoundError, UsageError
from tests.support.cli import RunCli


@pytest.fixture
def cli(cli_process: RunCli) -> RunCli:
    """A fresh ``mqctl`` process per call: its own JVM and PYTHONPATH (end to end)."""
    return cli_process


@pytest.mark.spark
def test_report_prints_tables_and_writes_json_and_charts(
    spark: Any, store_a: Path, manifest: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report's numbers against the manifest, as written to --json, plus the tables and PNGs."""
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
    assert {r["topic"]: r["records"] for r in report["topics"]} == manifest["counts"][
        "recordsInCommitLogPerTopic"
    ]
    assert report["totals"]["records"] == 5612 and report["totals"]["files"] == 4
    assert (
        sum(r["records"] for r in report["throughput"]) == sum(r["records"] for r in report["files"]) == 5612
    )
    assert {(r["kind"], r["topic"]): r["records"] for r in report["retries"]} == {
        ("retry topic", "%RETRY%FixA_CG_Retry"): 2,
        ("scheduled delay", "SCHEDULE_TOPIC_XXXX"): 8,
        ("scheduled retry", "SCHEDULE_TOPIC_XXXX"): 2,
    }
    orders = next(q for q in report["queues"] if q["topic"] == "FixA_Orders")
    assert (orders["queues"], orders["min_records"], orders["max_records"], orders["skew"]) == (
        4,
        700,
        700,
        1.0,
    )
    assert report["top_keys"][0]["records"] >= report["top_keys"][-1]["records"] > 1
    assert all(r["born_ip"] == "127.0.0.1" for r in report["producers"])
    sizes = {r["topic"]: r for r in report["sizes"]}
    assert 64 <= sizes["FixA_Orders"]["body_p50"] <= sizes["FixA_Orders"]["body_max"] == 463
    assert all(r["p50"] >= 0 for r in report["latency"])
    charts = sorted((tmp_path / "png").iterdir())
    assert [p.name for p in charts] == ["throughput-record-bytes.png", "throughput-records.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in charts)


@pytest.mark.spark
def test_report_as_json_on_stdout(spark: Any, store_a: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["spark-export", "report", "--store", str(store_a), "--topic", "FixA_Events", "-o", "json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert [(r["topic"], r["records"]) for r in report["topics"]] == [("FixA_Events", 2000)]
    assert [(q["queues"], q["min_records"], q["max_records"]) for q in report["queues"]] == [(4, 500, 500)]


@pytest.mark.slow
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


@pytest.mark.slow
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
        ["spark-export", "--store", "{store}", "--out", "{tmp}/o", "--format", "avro"],
    ],
)
@pytest.mark.slow
def test_usage_errors(cli: RunCli, store_a: Path, tmp_path: Path, args: list[str]) -> None:
    result = cli(*(a.format(store=store_a, tmp=tmp_path) for a in args))
    assert result.code == UsageError.exit_code
    assert result.stderr.startswith("mqctl: error:") and result.stderr.count("\n") == 1


@pytest.mark.slow
def test_a_missing_store_is_not_found(cli: RunCli, tmp_path: Path) -> None:
    """As every command's missing --store, -f or -c: exit 3 (README's table), one line naming it."""
    result = cli("spark-export", "--store", str(tmp_path / "missing"), "--out", str(tmp_path / "o"))
    assert result.code == NotFoundError.exit_code
    assert result.stderr.startswith("mqctl: error: --store") and result.stderr.count("\n") == 1


@pytest.mark.spark
def test_ctrl_c_is_one_line_and_exit_130(
    spark: Any,
    store_a: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Typer turns a KeyboardInterrupt into a silent exit 130; the command says why it stopped."""
    from mqctl.spark import export as service

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(service, "export", interrupted)
    assert main(["spark-export", "--store", str(store_a), "--out", str(tmp_path / "o")]) == 130
    assert capsys.readouterr().err == "mqctl: error: interrupted; Spark jobs cancelled\n"
