"""The export, in a fresh ``mqctl`` process, against a real standalone master and worker from the installed pyspark."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.cli import RunCli
from tests.support.ports import free_port


@pytest.fixture
def cli(cli_process: RunCli) -> RunCli:
    """A fresh ``mqctl`` process per call: its own JVM (end to end)."""
    return cli_process


pytestmark = [pytest.mark.spark, pytest.mark.slow]

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def _wait_for(log_dir: Path, pattern: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(pattern in p.read_text(errors="replace") for p in log_dir.glob("*.out")):
            return
        time.sleep(0.3)
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in log_dir.glob("*.out"))
    raise AssertionError(f"no {pattern!r} in the daemon logs within {timeout} s:\n{logs}")


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A master and one worker on 127.0.0.1 (``sbin/spark-daemon.sh``: the pip package has no start-*.sh)."""
    import pyspark

    from mqctl.spark.session import find_java

    if find_java() is None:
        pytest.skip("Spark needs Java")
    home = Path(pyspark.__file__).parent
    work = tmp_path / "spark"
    for sub in ("logs", "pids", "work", "conf"):
        (work / sub).mkdir(parents=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_CONF_DIR": str(work / "conf"),
        "SPARK_LOG_DIR": str(work / "logs"),
        "SPARK_PID_DIR": str(work / "pids"),
        "SPARK_WORKER_DIR": str(work / "work"),
        "SPARK_IDENT_STRING": f"mqctl-test-{os.getpid()}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    daemon = [str(home / "sbin" / "spark-daemon.sh")]
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = [MASTER, "1", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())]
    worker = [
        WORKER,
        "1",
        "--host",
        "127.0.0.1",
        "--cores",
        "2",
        "--memory",
        "1g",
        "--webui-port",
        str(free_port()),
        url,
    ]
    try:
        subprocess.run([*daemon, "start", *master], env=env, check=True, capture_output=True, timeout=60)
        # (generous: on a loaded host the master's JVM took 24 s to lead, and a worker connected but had not
        # registered 45 s after it started)
        _wait_for(work / "logs", "I have been elected leader", 180)
        subprocess.run([*daemon, "start", *worker], env=env, check=True, capture_output=True, timeout=60)
        _wait_for(work / "logs", "Successfully registered with master", 180)
        yield url, work
    finally:
        for cls in (WORKER, MASTER):
            subprocess.run([*daemon, "stop", cls, "1"], env=env, capture_output=True, timeout=60)


#: A liveness bound for the export, its driver's and executor's JVMs started on a host that may be running
#: the suite's other Spark tests beside it (half of it ran out on a loaded host with another test's
#: streaming query running); pytest-timeout's bound is above it and the cluster's start, so a late
#: export's own output is shown.
EXPORT_S = 600


@pytest.mark.timeout(EXPORT_S + 480)
def test_export_with_bodies_on_a_standalone_cluster(
    cli: RunCli, standalone: tuple[str, Path], store_a: Path, manifest: dict[str, Any], tmp_path: Path
) -> None:
    url, work = standalone
    out = tmp_path / "out"
    args = ["--store", str(store_a), "--out", str(out), "--with-body", "--master", url, "--partitions", "6"]
    try:
        result = cli("spark-export", *args, "-o", "json", timeout=EXPORT_S)
    except subprocess.TimeoutExpired as late:  # say where the export was, not only that it was late
        stderr = late.stderr.decode(errors="replace") if isinstance(late.stderr, bytes) else late.stderr
        executors = "\n".join(p.read_text(errors="replace")[-1500:] for p in work.glob("work/app-*/*/stderr"))
        pytest.fail(f"spark-export outlived {EXPORT_S} s:\n{(stderr or '')[-3000:]}\nexecutors:\n{executors}")
    assert result.code == 0, result.stderr
    summary = result.json()
    assert (summary["rows"], summary["files"], summary["splits"], summary["format"]) == (
        5612,
        4,
        6,
        "parquet",
    )
    # a rate, not a speed test: rounded to 0.0 on a loaded machine (speed lives in benchmarks/)
    assert summary["mb_per_s"] >= 0 and summary["data_bytes"] >= summary["record_bytes"] > 0
    rows = pq.read_table(out, columns=["physical_offset", "keys", "tags", "body"]).to_pylist()
    by_offset = {r["physical_offset"]: r for r in rows}
    assert len(by_offset) == 5612
    for m in manifest["messages"]:
        row = by_offset[m["commitLogOffset"]]
        assert (row["keys"], row["tags"]) == (m["keys"], m["storedTags"])
        assert hashlib.sha256(row["body"]).hexdigest() == m["bodySha256"]
    assert list((work / "work").glob("app-*/*/stderr")), "no executor ran on the worker"
