"""Export and report through Spark Connect: a Connect server from the installed pyspark on 127.0.0.1.

The server is pyspark's own ``SparkConnectServer`` class (what ``sbin/start-connect-server.sh``
starts), run in the foreground with ``spark-submit`` on a free loopback port. Its Python workers
run this interpreter with this checkout on ``PYTHONPATH``, as a cluster's must have mqctl installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.daemons import local_cluster
from tests.support.bounded import GRACE
from tests.support.cli import RunCli
from tests.support.cluster_data import Sent, create_topics, send_known
from tests.support.ports import free_port
from tests.support.spark import home_without_python_lib


@pytest.fixture
def cli(cli_process: RunCli) -> RunCli:
    """A fresh ``mqctl`` process per call: its own Spark Connect client (end to end)."""
    return cli_process


#: The first test of the module also waits for the Connect server's start (``connect_server``), which
#: pytest-timeout counts in that test's time: ~10 CPU seconds, at load 30 on two cores 150-250 s of wall
#: time before the test's own work begins. The bound is on the server's CPU (``START_CPU``), not on this.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: CPU seconds the server's processes may use before it must have started: a start takes ~10. A loaded
#: host stretches the wall time of those seconds many times over, so a wall-clock deadline failed a
#: healthy start (180 s passed at load 30 with the server still loading classes).
START_CPU = 120.0
#: Wall seconds, only against a start that hangs without using CPU.
START_WALL = 600.0
ROOT = Path(__file__).resolve().parents[2]


def _why_not() -> str | None:
    """Why the installed pyspark cannot serve or speak Spark Connect here, or None."""
    import pyspark

    from mqctl.spark.session import _CONNECT_MODULES, find_java

    if find_java() is None:
        return "the Connect server needs Java"
    if not list((Path(pyspark.__file__).parent / "jars").glob("spark-connect_*.jar")):
        return "this pyspark ships no spark-connect jar (a cluster must run the Connect server)"
    missing = [m for m in _CONNECT_MODULES if importlib.util.find_spec(m.split(".")[0]) is None]
    return (
        f"the Spark Connect client needs {', '.join(missing)} (pip install 'mqctl[spark]')"
        if missing
        else None
    )


def _session_cpu(session: int) -> float:
    """User and system CPU seconds of the processes of a session, with their waited-for children's."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone since the listing
            continue
        if int(fields[3]) == session:  # stat's fields from the state on: session is the 4th
            total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return total / tick


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of a local[2] Spark Connect server, stopped after the module."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    import pyspark

    home = Path(pyspark.__file__).parent
    work = tmp_path_factory.mktemp("connect")
    port = free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(home_without_python_lib(home, work)),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.local.dir": str(work),
        "spark.python.authenticate.socketTimeout": "120s",  # as mqctl's own sessions: a busy host
    }
    command = [str(home / "bin" / "spark-submit"), "--class", SERVER, "--master", "local[2]"]
    # The server's JVM with the client compiler only: C2's compiler threads took half of the start's CPU
    # (the server started on ~18-21 CPU seconds against ~9-10), and at load 30 on two cores that was the
    # 180 s deadline. The queries here are a few hundred rows: C1's code is fast enough for them.
    command += ["--driver-java-options", "-XX:TieredStopAtLevel=1"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    log = work / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_WALL
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            used = _session_cpu(proc.pid)
            if proc.poll() is not None or used > START_CPU or time.monotonic() > deadline:
                pytest.fail(
                    f"the Connect server did not start ({used:.0f} CPU s):\n"
                    f"{log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its session: the JVM and any Python worker it started
            proc.wait(GRACE)


def test_export_through_spark_connect_holds_the_manifests_messages(
    cli: RunCli, connect_server: str, store_a: Path, manifest: dict[str, Any], tmp_path: Path
) -> None:
    """With --partitions the data source reads on the server (registered there from this client)."""
    out = tmp_path / "out"
    args = ["--store", str(store_a), "--out", str(out), "--with-body", "--partitions", "2", "-o", "json"]
    result = cli("spark-export", *args, env={"MQCTL_SPARK_REMOTE": connect_server}, timeout=300)
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    summary = result.json()
    assert (summary["rows"], summary["files"], summary["splits"]) == (5612, 4, 2)
    assert summary["wall_seconds"] >= summary["spark_start_seconds"] + summary["job_seconds"] > 0
    rows = pq.read_table(out, columns=["physical_offset", "topic", "keys", "tags", "body"]).to_pylist()
    by_offset = {r["physical_offset"]: r for r in rows}
    assert len(by_offset) == len(rows) == 5612
    for m in manifest["messages"]:
        row = by_offset[m["commitLogOffset"]]
        assert (row["keys"], row["tags"]) == (m["keys"], m["storedTags"])
        assert hashlib.sha256(row["body"]).hexdigest() == m["bodySha256"]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["topic"]] = counts.get(r["topic"], 0) + 1
    assert counts == manifest["counts"]["recordsInCommitLogPerTopic"]


def test_report_through_spark_connect(
    cli: RunCli, connect_server: str, store_a: Path, manifest: dict[str, Any]
) -> None:
    """A one-task store goes to the server as one Arrow table; the aggregation runs there. The server
    comes from the current context (`context add --spark-remote`), as an operator would save it."""
    added = cli(
        "context", "add", "connect", "-n", "127.0.0.1:9876", "--spark-remote", connect_server, "--use"
    )
    assert added.code == 0, added.stderr
    result = cli("spark-export", "report", "--store", str(store_a), "-o", "json", timeout=300)
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert {r["topic"]: r["records"] for r in report["topics"]} == manifest["counts"][
        "recordsInCommitLogPerTopic"
    ]
    assert report["totals"]["records"] == 5612 and report["run"]["data_bytes"] > 0


_READ_THROUGH_CONNECT = """
import hashlib, json, sys
from pyspark.sql import SparkSession
from mqctl.spark.cluster import register

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
register(spark)
rows = (spark.read.format("rocketmq").option("namesrv", sys.argv[2]).option("topic", "SparkConnect")
        .option("maxMessagesPerPartition", "8").load().collect())
print(json.dumps([[r.topic, r.store_host, r.queue_id, r.queue_offset, hashlib.sha256(r.body).hexdigest()]
                  for r in rows]))
spark.stop()
"""


def test_the_rocketmq_source_reads_a_cluster_through_spark_connect(
    connect_server: str, tmp_path: Path
) -> None:
    """Registered from a Connect client; planned and read by the server's Python workers."""
    with local_cluster(tmp_path) as local:
        sent: Sent = {}
        local.loop.run(create_topics(local.namesrv_addr, [local.broker_addr], ("SparkConnect",)))
        local.loop.run(send_known({"broker-a": local.broker}, ("SparkConnect",), range(20), sent))
        done = subprocess.run(
            [sys.executable, "-c", _READ_THROUGH_CONNECT, connect_server, local.namesrv_addr],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        rows = json.loads(done.stdout)
        assert {(t, h, q, o): s for t, h, q, o, s in rows} == sent and len(rows) == len(sent)


_STREAM_THROUGH_CONNECT = """
import sys
from pyspark.sql import SparkSession
from mqctl.spark.cluster import register

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
register(spark)
query = (spark.readStream.format("rocketmq").option("namesrv", sys.argv[2]).option("topic", "SparkConnectStream")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "30").load()
         .writeStream.format("parquet").option("path", sys.argv[3]).option("checkpointLocation", sys.argv[4])
         .trigger(availableNow=True).start())
query.awaitTermination()
spark.stop()
"""


#: How Spark fails a streaming query whose source's Python worker (started on its own for the query)
#: did not connect back within the fixed 10 s that no setting changes (``createSimpleWorker``).
WORKER_LATE = "Timed out while waiting for the Python worker to connect back"


def test_a_stream_through_spark_connect_writes_every_message_once(
    connect_server: str, tmp_path: Path
) -> None:
    """readStream registered from a Connect client, run to what was stored (Trigger.AvailableNow) in
    batches of at most 30 messages, into Parquet on the server. A query that Spark failed because its
    source's worker was late on a busy host is started again on the same checkpoint, as an operator
    would restart it: every message is still written once."""
    from mqctl.spark.stream import sink_files

    out = tmp_path / "out"
    with local_cluster(tmp_path / "cluster") as local:
        sent: Sent = {}
        local.loop.run(create_topics(local.namesrv_addr, [local.broker_addr], ("SparkConnectStream",)))
        local.loop.run(send_known({"broker-a": local.broker}, ("SparkConnectStream",), range(20), sent))
        args = [connect_server, local.namesrv_addr, str(out), str(tmp_path / "checkpoint")]
        for _ in range(3):
            try:
                done = subprocess.run(
                    [sys.executable, "-c", _STREAM_THROUGH_CONNECT, *args],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
            except subprocess.TimeoutExpired as late:  # say where the query was, not only that it was late
                stderr = (
                    late.stderr.decode(errors="replace") if isinstance(late.stderr, bytes) else late.stderr
                )
                pytest.fail(f"the streaming query outlived 300 s:\n{(stderr or '')[-3000:]}")
            if WORKER_LATE not in done.stderr:
                break
        assert done.returncode == 0, done.stderr[-3000:]
    files = sink_files(out)
    assert max(files.values()) >= 2  # 80 messages, 30 a batch
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    got = {
        (r["topic"], r["store_host"], r["queue_id"], r["queue_offset"]): hashlib.sha256(r["body"]).hexdigest()
        for r in rows
    }
    assert got == sent and len(rows) == len(sent)
