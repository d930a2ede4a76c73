"""``spark-export report``: what the CommitLog holds, as tables, JSON and PNG charts.

The records are read once (without bodies) and cached; every section is one Spark aggregation
over that cache. Times are ISO 8601 UTC strings formatted by Spark (the session runs in UTC),
so the JSON does not depend on the local zone of the process that printed it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqctl.output import plain
from mqctl.spark.export import load, spark_failure
from store.message import (
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
        ]


def _rows(df: DataFrame) -> Rows:
    return [row.asDict(recursive=True) for row in df.collect()]


def _iso(column: str | Column, fmt: str = _ISO) -> Column:
    from pyspark.sql import functions as F

    return F.date_format(column, fmt)


def _percentiles(df: DataFrame, value: Column, prefix: str) -> DataFrame:
    """Approximate percentiles (accuracy 10,000: exact for up to 10,000 values per topic) and max."""
    from pyspark.sql import functions as F

    by_topic = df.groupBy("topic").agg(
        F.percentile_approx(value, list(PERCENTILES), 10000).alias("_ps"), F.max(value).alias(f"{prefix}max")
    )
    cols = [F.col("_ps")[i].alias(f"{prefix}p{round(p * 100)}") for i, p in enumerate(PERCENTILES)]
    return by_topic.select("topic", *cols, f"{prefix}max")


def build_report(
    spark: SparkSession,
    store: str | Path,
    *,
    topics: Sequence[str] = (),
    since_ms: int | None = None,
    until_ms: int | None = None,
    partitions: int | None = None,
    top: int = 20,
) -> Report:
    """Every section of the report; the store is read once (no bodies) and cached for the aggregations."""
    from py4j.protocol import Py4JJavaError
    from pyspark import StorageLevel
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    df = load(spark, store, topics=topics, since_ms=since_ms, until_ms=until_ms, partitions=partitions)
    df = df.select(
        "topic", "queue_id", "keys", "born_timestamp", "born_host", "store_timestamp", "reconsume_times",
        "body_size", "record_size", "file",
        # the only property a section needs; caching the whole map would cost more than the rest
        F.col("properties").getItem(PROPERTY_RETRY_TOPIC).isNotNull().alias("has_retry_topic"),
    ).persist(StorageLevel.MEMORY_AND_DISK)  # fmt: skip
    try:
        return _build(df, str(store), top)
    except (PySparkException, Py4JJavaError) as exc:
        raise spark_failure(exc) from exc
    finally:
        df.unpersist()


def _build(df: DataFrame, store: str, top: int) -> Report:
    from pyspark.sql import functions as F

    count = F.count(F.lit(1))
    first, last = F.min("store_timestamp"), F.max("store_timestamp")
    totals = (
        df.agg(
            count.alias("records"),
            F.coalesce(F.sum("record_size"), F.lit(0)).alias("record_bytes"),
            F.countDistinct("topic").alias("topics"),
            F.countDistinct("file").alias("files"),
            _iso(first).alias("first_store_time"),
            _iso(last).alias("last_store_time"),
        )
        .collect()[0]
        .asDict()
    )
    per_topic = _rows(
        df.groupBy("topic")
        .agg(
            count.alias("records"),
            F.sum("record_size").alias("record_bytes"),
            F.sum("body_size").alias("body_bytes"),
            _iso(first).alias("first_store_time"),
            _iso(last).alias("last_store_time"),
        )
        .orderBy(F.desc("records"), "topic")
    )
    minute = F.date_trunc("minute", "store_timestamp")
    throughput = _rows(
        df.groupBy("topic", minute.alias("m"))
        .agg(count.alias("records"), F.sum("record_size").alias("record_bytes"))
        .orderBy("m", "topic")
        .select(_iso("m", _MINUTE).alias("minute"), "topic", "records", "record_bytes")
    )
    sizes = _rows(_percentiles(df, F.col("body_size"), "body_").orderBy("topic"))
    latency_ms = F.unix_millis("store_timestamp") - F.unix_millis("born_timestamp")
    latency = _rows(_percentiles(df, latency_ms, "").orderBy("topic"))
    born_ip = F.regexp_extract("born_host", r"^(.*):\d+$", 1)
    producers = _rows(
        df.groupBy(born_ip.alias("born_ip"))
        .agg(
            count.alias("records"),
            F.sum("record_size").alias("record_bytes"),
            F.countDistinct("born_host").alias("connections"),
            F.array_join(F.array_sort(F.collect_set("topic")), " ").alias("topics"),
        )
        .orderBy(F.desc("records"), "born_ip")
        .limit(top)
    )
    top_keys = _rows(
        df.select("topic", F.explode("keys").alias("key"))
        .groupBy("topic", "key")
        .agg(count.alias("records"))
        .orderBy(F.desc("records"), "topic", "key")
        .limit(top)
    )
    per_queue = df.groupBy("topic", "queue_id").agg(count.alias("n"))
    queues = _rows(
        per_queue.groupBy("topic")
        .agg(
            F.count("queue_id").alias("queues"),
            F.min("n").alias("min_records"),
            F.max("n").alias("max_records"),
            F.round(F.avg("n"), 1).alias("mean_records"),
            F.round(F.max("n") / F.avg("n"), 3).alias("skew"),
        )
        .orderBy(F.desc("skew"), "topic")
    )
    kind = (
        F.when(F.col("topic").startswith(RETRY_GROUP_TOPIC_PREFIX), F.lit("retry topic"))
        .when(F.col("topic").startswith(DLQ_GROUP_TOPIC_PREFIX), F.lit("dead-letter topic"))
        .when(
            (F.col("topic") == SCHEDULE_TOPIC) & F.col("has_retry_topic"),
            F.lit("scheduled retry"),
        )
        .when(F.col("topic") == SCHEDULE_TOPIC, F.lit("scheduled delay"))
        .when(F.col("reconsume_times") > 0, F.lit("redelivered"))
    )
    retries = _rows(
        df.where(kind.isNotNull())
        .groupBy(kind.alias("kind"), "topic")
        .agg(count.alias("records"), F.sum("record_size").alias("record_bytes"))
        .orderBy("kind", "topic")
    )
    file_topics: dict[str, list[str]] = {}
    for row in (
        df.groupBy("file", "topic").agg(count.alias("n")).orderBy("file", F.desc("n"), "topic").collect()
    ):
        file_topics.setdefault(row["file"], []).append(f"{row['topic']}={row['n']}")
    files = _rows(
        df.groupBy("file")
        .agg(
            count.alias("records"),
            F.sum("record_size").alias("record_bytes"),
            F.countDistinct("topic").alias("topics"),
            _iso(first).alias("first_store_time"),
            _iso(last).alias("last_store_time"),
        )
        .orderBy("file")
    )
    for entry in files:
        entry["content"] = " ".join(file_topics.get(entry["file"], []))
    return Report(
        store=store,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        totals=totals,
        topics=per_topic,
        throughput=throughput,
        sizes=sizes,
        producers=producers,
        latency=latency,
        top_keys=top_keys,
        queues=queues,
        retries=retries,
        files=files,
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
