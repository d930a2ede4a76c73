"""``spark-export report``: what the CommitLog holds, as tables, JSON and PNG charts.

One read, one aggregation: the records (without bodies) go through a single Spark aggregation
over grouping sets, one set per view a section needs (per topic, topic x minute, topic x body
size, topic x latency, born host x topic, topic x queue, kind x topic, file x topic, topic x
key), and the sections are put together on the driver from its rows. Keys are counted on the
same pass by exploding each record into one record row plus one row per key; only the top N
keys come back. Percentiles are exact (computed from the per-value counts). Times are ISO 8601
UTC strings formatted by Spark (the session runs in UTC), so the JSON does not depend on the
local zone of the process that printed it.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqctl.output import plain
from mqctl.spark.export import ClusterSource, Source, frame, rate, spark_failure
from store import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_RETRY_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

Rows = list[dict[str, Any]]
_ISO = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
_MINUTE = "yyyy-MM-dd'T'HH:mm'Z'"
PERCENTILES = (0.5, 0.9, 0.99)
# The grouping columns, and each view as the subset of them it groups by.
_COLUMNS = ("topic", "minute", "body_size", "latency_ms", "born_host", "queue_id", "kind", "file", "key")
_VIEWS: dict[str, tuple[str, ...]] = {
    "totals": (),
    "topic": ("topic",),
    "minute": ("topic", "minute"),
    "size": ("topic", "body_size"),
    "latency": ("topic", "latency_ms"),
    "host": ("born_host", "topic"),
    "queue": ("topic", "queue_id"),
    "kind": ("kind", "topic"),
    "file": ("file", "topic"),
    "key": ("topic", "key"),
}
_HOST_PORT = re.compile(r"^(.*):\d+$")


def _grouping_id(columns: tuple[str, ...]) -> int:
    """Spark's ``grouping_id()`` of a set: bit ``n-1-i`` is set when column ``i`` is not grouped."""
    return sum(1 << (len(_COLUMNS) - 1 - i) for i, c in enumerate(_COLUMNS) if c not in columns)


_VIEW_OF = {_grouping_id(cols): name for name, cols in _VIEWS.items()}


@dataclass
class Report:
    """Every section is a list of flat rows, so each renders as one table."""

    store: str
    generated_at: str
    totals: dict[str, Any]
    topics: Rows
    throughput: Rows
    sizes: Rows
    producers: Rows
    latency: Rows
    top_keys: Rows
    queues: Rows
    retries: Rows
    files: Rows
    run: dict[str, Any] = field(default_factory=dict)
    """How the report was made: data read, seconds (whole run, Spark start-up, the job) and rate."""

    def timed(self, wall_seconds: float, spark_start_seconds: float) -> None:
        """Time the report over a longer run than the job (the CLI: process start to exit)."""
        self.run.update(
            wall_seconds=round(wall_seconds, 3),
            spark_start_seconds=round(spark_start_seconds, 3),
            mb_per_s=rate(self.run.get("data_bytes", 0), wall_seconds),
        )

    def sections(self) -> list[tuple[str, Rows]]:
        return [
            ("Totals", [self.totals]),
            ("Records per topic", self.topics),
            ("Body size percentiles per topic (stored bytes)", self.sizes),
            ("Producers by born host", self.producers),
            ("Born-to-store latency per topic (ms)", self.latency),
            ("Top keys", self.top_keys),
            ("Queue skew per topic", self.queues),
            ("Retry, DLQ and scheduled volume", self.retries),
            ("Per-file content", self.files),
            ("Throughput per topic and minute", self.throughput),
            ("Run", [self.run]),
        ]


def _iso(column: str | Column, fmt: str = _ISO) -> Column:
    from pyspark.sql import functions as F

    return F.date_format(column, fmt)


def _aggregate(df: DataFrame, top: int) -> DataFrame:
    """Every view in one aggregation; the key view cut to its ``top`` rows inside Spark."""
    from pyspark.sql import Window, functions as F

    kind = (
        F.when(F.col("topic").startswith(RETRY_GROUP_TOPIC_PREFIX), F.lit("retry topic"))
        .when(F.col("topic").startswith(DLQ_GROUP_TOPIC_PREFIX), F.lit("dead-letter topic"))
        .when(
            (F.col("topic") == SCHEDULE_TOPIC)
            & F.col("properties").getItem(PROPERTY_RETRY_TOPIC).isNotNull(),
            F.lit("scheduled retry"),
        )
        .when(F.col("topic") == SCHEDULE_TOPIC, F.lit("scheduled delay"))
        .when(F.col("reconsume_times") > 0, F.lit("redelivered"))
    )
    exploded = df.select(
        "topic", "body_size", "born_host", "queue_id", "file", "record_size", "store_timestamp",
        F.date_trunc("minute", "store_timestamp").alias("minute"),
        (F.unix_millis("store_timestamp") - F.unix_millis("born_timestamp")).alias("latency_ms"),
        kind.alias("kind"),
        # position 0 is the record itself; 1.. are its keys
        F.posexplode(F.concat(F.array(F.lit(None).cast("string")), "keys")).alias("pos", "key"),
    )  # fmt: skip
    record = F.col("pos") == 0
    grouped = exploded.groupingSets([list(cols) for cols in _VIEWS.values()], *_COLUMNS).agg(
        F.grouping_id().alias("gid"),
        F.count_if(record).alias("records"),
        F.sum(F.when(record, F.col("record_size"))).alias("record_bytes"),
        F.sum(F.when(record, F.col("body_size"))).alias("body_bytes"),
        F.min(F.when(record, F.col("store_timestamp"))).alias("first"),
        F.max(F.when(record, F.col("store_timestamp"))).alias("last"),
        F.count_if(~record).alias("key_records"),
    )
    key_gid = _grouping_id(_VIEWS["key"])
    is_key = F.col("gid") == key_gid
    keys = grouped.where(~is_key | (F.col("key_records") > 0))
    rank = F.row_number().over(Window.partitionBy("gid").orderBy(F.desc("key_records"), "topic", "key"))
    return keys.withColumn("rank", F.when(is_key, rank)).where(~is_key | (F.col("rank") <= top)).select(
        "gid", *(c for c in _COLUMNS if c != "minute"), _iso("minute", _MINUTE).alias("minute"),
        "records", "record_bytes", "body_bytes", "key_records",
        _iso("first").alias("first_store_time"), _iso("last").alias("last_store_time"),
    )  # fmt: skip


def build_report(
    spark: SparkSession,
    store: Source,
    *,
    topics: Sequence[str] = (),
    since_ms: int | None = None,
    until_ms: int | None = None,
    partitions: int | None = None,
    top: int = 20,
) -> Report:
    """Every section of the report from one read of the store or cluster (no bodies) and one aggregation."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    started = time.perf_counter()
    df, scan = frame(spark, store, topics=topics, since_ms=since_ms, until_ms=until_ms, partitions=partitions)
    # The shuffle carries aggregates, far smaller than the input: as many reducers as read tasks.
    shuffle = "spark.sql.shuffle.partitions"
    before = spark.conf.get(shuffle)
    spark.conf.set(shuffle, str(max(1, scan.splits)))
    try:
        views: dict[str, Rows] = defaultdict(list)
        for row in _aggregate(df, top).collect():
            entry = row.asDict()
            views[_VIEW_OF[entry.pop("gid")]].append(entry)
    except (PySparkException, Py4JJavaError) as exc:
        raise spark_failure(exc) from exc
    finally:
        spark.conf.set(shuffle, before)  # type: ignore[arg-type]
    report = _sections(views, str(store), top)
    job = time.perf_counter() - started
    data_bytes = scan.data_bytes
    if isinstance(store, ClusterSource):  # known once read: the records' sizes
        data_bytes = int(report.totals.get("record_bytes") or 0)
    report.run = {
        "data_bytes": data_bytes, "splits": scan.splits, "wall_seconds": round(job, 3),
        "spark_start_seconds": 0.0, "job_seconds": round(job, 3), "mb_per_s": rate(data_bytes, job),
    }  # fmt: skip
    return report


def _pick(rows: Iterable[dict[str, Any]], *columns: str) -> Rows:
    return [{c: r[c] for c in columns} for r in rows]


def _percentiles(rows: Rows, value: str, prefix: str) -> Rows:
    """Exact percentiles per topic from per-value counts: the smallest value whose cumulative
    count reaches the share (Spark's ``percentile`` rule), and the maximum."""
    by_topic: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        by_topic[r["topic"]].append((r[value], r["records"]))
    out = []
    for topic, counts in sorted(by_topic.items()):
        counts.sort()
        total = sum(n for _, n in counts)
        entry: dict[str, Any] = {"topic": topic}
        for p in PERCENTILES:
            need, seen = max(1, math.ceil(p * total)), 0
            for v, n in counts:
                seen += n
                if seen >= need:
                    entry[f"{prefix}p{round(p * 100)}"] = v
                    break
        entry[f"{prefix}max"] = counts[-1][0]
        out.append(entry)
    return out


def _producers(rows: Rows, top: int) -> Rows:
    by_ip: dict[str, dict[str, Any]] = {}
    for r in rows:
        match = _HOST_PORT.match(r["born_host"] or "")
        ip = match.group(1) if match else ""
        entry = by_ip.setdefault(
            ip, {"born_ip": ip, "records": 0, "record_bytes": 0, "hosts": set(), "topics": set()}
        )
        entry["records"] += r["records"]
        entry["record_bytes"] += r["record_bytes"]
        entry["hosts"].add(r["born_host"])
        entry["topics"].add(r["topic"])
    ranked = sorted(by_ip.values(), key=lambda e: (-e["records"], e["born_ip"]))[:top]
    return [
        {
            "born_ip": e["born_ip"],
            "records": e["records"],
            "record_bytes": e["record_bytes"],
            "connections": len(e["hosts"]),
            "topics": " ".join(sorted(e["topics"])),
        }
        for e in ranked
    ]


def _queues(rows: Rows) -> Rows:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        by_topic[r["topic"]].append(r["records"])
    out = []
    for topic, counts in by_topic.items():
        mean = sum(counts) / len(counts)
        out.append(
            {
                "topic": topic,
                "queues": len(counts),
                "min_records": min(counts),
                "max_records": max(counts),
                "mean_records": round(mean, 1),
                "skew": round(max(counts) / mean, 3),
            }
        )
    return sorted(out, key=lambda e: (-e["skew"], e["topic"]))


def _files(rows: Rows) -> Rows:
    by_file: dict[str, Rows] = defaultdict(list)
    for r in rows:
        by_file[r["file"]].append(r)
    out = []
    for name, parts in sorted(by_file.items()):
        parts.sort(key=lambda r: (-r["records"], r["topic"]))
        out.append(
            {
                "file": name,
                "records": sum(r["records"] for r in parts),
                "record_bytes": sum(r["record_bytes"] for r in parts),
                "topics": len(parts),
                "first_store_time": min(r["first_store_time"] for r in parts),
                "last_store_time": max(r["last_store_time"] for r in parts),
                "content": " ".join(f"{r['topic']}={r['records']}" for r in parts),
            }
        )
    return out


def _sections(views: dict[str, Rows], store: str, top: int) -> Report:
    """The report's sections from the rows of each view (ISO times sort as they read)."""
    times = ("first_store_time", "last_store_time")
    totals = views["totals"][0] if views["totals"] else {"records": 0, "record_bytes": None}
    topic_rows = sorted(views["topic"], key=lambda r: (-r["records"], r["topic"]))
    return Report(
        store=store,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        totals={
            "records": totals["records"],
            "record_bytes": totals["record_bytes"] or 0,
            "topics": len(views["topic"]),
            "files": len({r["file"] for r in views["file"]}),
            "first_store_time": totals.get("first_store_time"),
            "last_store_time": totals.get("last_store_time"),
        },
        topics=_pick(topic_rows, "topic", "records", "record_bytes", "body_bytes", *times),
        throughput=_pick(
            sorted(views["minute"], key=lambda r: (r["minute"], r["topic"])),
            "minute",
            "topic",
            "records",
            "record_bytes",
        ),
        sizes=_percentiles(views["size"], "body_size", "body_"),
        producers=_producers(views["host"], top),
        latency=_percentiles(views["latency"], "latency_ms", ""),
        top_keys=[
            {"topic": r["topic"], "key": r["key"], "records": r["key_records"]}
            for r in sorted(views["key"], key=lambda r: (-r["key_records"], r["topic"], r["key"]))
        ],
        queues=_queues(views["queue"]),
        retries=_pick(
            sorted(
                (r for r in views["kind"] if r["kind"] is not None), key=lambda r: (r["kind"], r["topic"])
            ),
            "kind",
            "topic",
            "records",
            "record_bytes",
        ),
        files=_files(views["file"]),
    )


def write_json(report: Report, path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(plain(report), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return target


def write_charts(report: Report, directory: str | Path) -> list[Path]:
    """PNG line charts of records and bytes per minute for each topic (matplotlib, no display)."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    # One point per minute from the first to the last, 0 where a topic stored nothing, so gaps show.
    stamp = {row["minute"]: np.datetime64(row["minute"].rstrip("Z"), "m") for row in report.throughput}
    minutes = (
        np.arange(min(stamp.values()), max(stamp.values()) + 1) if stamp else np.array([], "datetime64[m]")
    )
    index = {m: i for i, m in enumerate(minutes)}
    written = []
    for metric, label in (("records", "records per minute"), ("record_bytes", "CommitLog bytes per minute")):
        series: dict[str, np.ndarray] = {}
        for row in report.throughput:
            values = series.setdefault(row["topic"], np.zeros(len(minutes), dtype=np.int64))
            values[index[stamp[row["minute"]]]] = row[metric]
        fig, ax = plt.subplots(figsize=(10, 5))
        for topic, values in sorted(series.items()):
            ax.plot(minutes, values, marker="o", label=topic)
        ax.set_title(f"{label} by topic")
        ax.set_xlabel("store time (UTC)")
        ax.set_ylabel(label)
        if series:
            ax.legend(fontsize="small")
        fig.autofmt_xdate()
        path = out / f"throughput-{metric.replace('_', '-')}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
