"""The ``rocketmq`` Spark source over a running cluster: batch MB/s next to ``spark-export --store`` of the
same data in the same run, and streaming latency from send to a committed sink file.

Batch: ``mqctl up --brokers 2`` in a subprocess (two broker groups on this machine), SIZE MiB of 1 KiB
messages sent to 8 queues on each, then in one local[2] session: the cluster export (Parquet, no bodies,
as ``spark-export --cluster``) and a scan-only read (Spark's ``noop`` sink), the brokers stopped, and
``spark-export --store`` of both stores. MB/s is record bytes (1e6) per second of the job.

Streaming (``--stream-seconds`` > 0): a query in the same session writing Parquet with a 1 s trigger while
a producer sends 1,000 msgs/s, each body carrying its send time; latency is from the send to the moment
the sink's metadata log lists the file holding the message (p50, p99, max).

    python benchmarks/bench_spark_cluster.py [--size-mib 256] [--stream-seconds 20] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_broker_produce import free_port  # run as a script: benchmarks/ is on sys.path
from benchlib import summary

from daemon.broker.headers import SendMessageRequestHeaderV2
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.loop import run

QUEUES = 8
TOPIC, STREAM_TOPIC = "SparkBench", "SparkBenchStream"
BODY = bytes(range(256)) * 4


async def send(addr: str, topic: str, count: int, body: bytes | None = None) -> None:
    """``count`` 1 KiB messages to ``topic`` on one broker, 256 in flight (auto-created topic, 8 queues)."""
    async with RemotingClient() as client:
        for start in range(0, count, 256):
            batch = []
            for i in range(start, min(count, start + 256)):
                h = SendMessageRequestHeaderV2("P", topic, "TBW102", QUEUES, i % QUEUES, 0, 0, 0, "")
                payload = body if body is not None else struct.pack(">d", time.time()) + BODY[8:]
                request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, h.to_ext_fields(), payload)
                batch.append(client.invoke(addr, request, 30))
            for r in await asyncio.gather(*batch):
                assert r.code == ResponseCode.SUCCESS, r.remark


async def fill(addrs: list[str], count: int) -> None:
    await asyncio.gather(*(send(a, TOPIC, count // len(addrs), BODY) for a in addrs))


def up(root: Path) -> tuple[subprocess.Popen[bytes], str, list[str]]:
    """``mqctl up --brokers 2`` on free ports; its NameServer and broker addresses once both answer."""
    ns_port, broker_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqctl", "up", "--brokers", "2", "--data", str(root), "--no-metrics",
         "--namesrv-port", str(ns_port), "--broker-port", str(broker_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    namesrv = f"127.0.0.1:{ns_port}"

    async def brokers() -> list[str]:
        from mqctl.admin.client import Admin

        for _ in range(600):
            try:
                async with Admin([namesrv], timeout=1.0) as admin:
                    info = await admin.cluster_info()
                    addrs = sorted(
                        a for b in info.broker_addr_table.values() for a in b.broker_addrs.values()
                    )
                    if len(addrs) == 2:
                        return addrs
            except Exception:
                pass
            await asyncio.sleep(0.1)
        raise SystemExit("mqctl up did not start two brokers")

    return proc, namesrv, run(brokers())


def _line(name: str, seconds: float, data_bytes: int | None = None, extra: str = "") -> None:
    rate = f"  {data_bytes / seconds / 1e6:7.1f} MB/s" if data_bytes else ""
    print(f"{name:<48} {seconds:8.2f} s{rate}{extra}", flush=True)


def stream_latency(spark: object, namesrv: str, addrs: list[str], work: Path, seconds: float) -> list[float]:
    """Send 1,000 msgs/s for ``seconds`` into a running query (1 s trigger); each message's latency."""
    import pyarrow.parquet as pq

    from mqctl.spark.stream import sink_files

    run(send(addrs[0], STREAM_TOPIC, QUEUES))  # the topic exists before the query starts
    out, checkpoint = work / "stream-out", work / "stream-checkpoint"
    query = (
        spark.readStream.format("rocketmq").option("namesrv", namesrv).option("topic", STREAM_TOPIC)  # type: ignore[attr-defined]
        .load().select("body").writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(checkpoint)).trigger(processingTime="1 second").start()
    )  # fmt: skip
    listed: dict[str, float] = {}
    stop = threading.Event()

    def watch() -> None:  # when each file is first listed by the sink's log
        while not stop.wait(0.02):
            now = time.time()
            for path in sink_files(out):
                listed.setdefault(path, now)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        time.sleep(3)  # the first (empty) batches start the Python workers
        started = time.perf_counter()
        for tick in range(int(seconds * 10)):  # 100 messages every 0.1 s
            run(send(addrs[tick % len(addrs)], STREAM_TOPIC, 100))
            time.sleep(max(0.0, started + (tick + 1) / 10 - time.perf_counter()))
        deadline = time.time() + 30
        while time.time() < deadline:
            time.sleep(0.5)
            if sum(pq.read_metadata(p).num_rows for p in list(listed)) >= seconds * 1000:
                break
    finally:
        stop.set()
        watcher.join()
        query.stop()
    latencies = []
    for path, at in listed.items():
        for body in pq.read_table(path).column("body").to_pylist():
            if body is not None and len(body) == len(BODY):
                latencies.append(at - struct.unpack(">d", body[:8])[0])
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256, help="data to send, over both broker groups")
    parser.add_argument("--stream-seconds", type=float, default=20, help="streaming run (0: none)")
    parser.add_argument("--keep", action="store_true", help="keep the stores and outputs")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mqctl-bench-spark-cluster-", dir="/tmp"))
    proc, namesrv, addrs = up(work / "up")
    count = (args.size_mib << 20) // len(BODY)
    try:
        t = time.perf_counter()
        run(fill(addrs, count))
        _line(f"send {count:,} x 1 KiB to 2 broker groups", time.perf_counter() - t)
        print(
            f"load average before Spark: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
        )
        from mqctl.spark.export import ClusterSource, cluster_frame, export
        from mqctl.spark.session import spark_session

        source = ClusterSource({"namesrv": namesrv})
        with spark_session("local[2]", app_name="mqctl-bench-cluster") as spark:
            cluster = export(spark, source, work / "cluster.parquet", topics=[TOPIC], overwrite=True)
            _line("spark-export --cluster (cold: starts workers)", cluster.job_seconds, cluster.data_bytes)
            cluster = export(spark, source, work / "cluster.parquet", topics=[TOPIC], overwrite=True)
            _line(
                "spark-export --cluster (parquet, no body)", cluster.job_seconds, cluster.data_bytes,
                f"  {cluster.rows:,} rows, {cluster.splits} tasks",
            )  # fmt: skip
            t = time.perf_counter()
            cluster_frame(spark, source, topics=[TOPIC])[0].write.format("noop").mode("overwrite").save()
            scan = time.perf_counter() - t
            _line("cluster scan only (noop sink)", scan, cluster.data_bytes)
            latencies = []
            if args.stream_seconds > 0:
                latencies = stream_latency(spark, namesrv, addrs, work, args.stream_seconds)
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            stores = sorted(
                p
                for p in (work / "up").iterdir()
                if p.name.startswith("store") and (p / "commitlog").is_dir()
            )
            store_seconds = store_bytes = 0.0
            for store in stores:
                result = export(spark, store, work / f"{store.name}.parquet", topics=[TOPIC], overwrite=True)
                store_seconds += result.job_seconds
                store_bytes += result.record_bytes
            _line(f"spark-export --store of {len(stores)} stores", store_seconds, int(store_bytes))
        ratio = (cluster.data_bytes / cluster.job_seconds) / (store_bytes / store_seconds)
        print(f"cluster / store: {ratio:.0%}")
        details = f"{args.size_mib} MiB of 1 KiB, 2 broker groups, local[2]; --cluster {cluster.data_bytes / cluster.job_seconds / 1e6:.1f} MB/s, --store {store_bytes / store_seconds / 1e6:.1f} MB/s"
        if latencies:
            latencies.sort()
            p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
            print(
                f"stream latency send -> sink file, 1,000 msgs/s, 1 s trigger: p50 {p(0.5):.2f} s, p99 {p(0.99):.2f} s, max {latencies[-1]:.2f} s, median {statistics.median(latencies):.2f} s over {len(latencies):,} messages"
            )
            details += f"; stream p50 {p(0.5):.2f} s, p99 {p(0.99):.2f} s at 1,000 msgs/s, 1 s trigger"
        summary(__file__, f"cluster read {ratio:.0%} of --store", details)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
