"""``spark-export``: a store's CommitLog to Parquet, JSON or CSV through the data source.

Services return results and never print; progress goes to an optional callback that the CLI
draws. Topic and time filters are written as DataFrame predicates so Spark pushes them into
the reader (``pushFilters``), where whole batches are dropped before their columns are built.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from mqctl.errors import ConflictError, MqctlError, StoreError, UsageError
from mqctl.spark import CLUSTER_FORMAT_NAME, FORMAT_NAME

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from mqctl.spark.connection import Connection

log = logging.getLogger(__name__)

EXPORT_FORMATS = ("parquet", "json", "csv")
# Parquet columns that are (nearly) unique per record. parquet-mr tries a dictionary for every
# column and falls back only when it overflows; on these that attempt is wasted work, and
# skipping it halves the JVM's share of an export while the files get no bigger.
_NO_DICTIONARY = (
    "physical_offset", "queue_offset", "msg_id", "unique_key", "keys.list.element", "born_timestamp",
    "store_timestamp", "properties.key_value.value", "body",
)  # fmt: skip
_JOB_GROUP = "mqctl-spark-export"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ScanPlan:
    """What a read will cover, computed on the driver for progress and the summary."""

    files: int
    splits: int
    data_bytes: int


@dataclass(frozen=True)
class ClusterSource:
    """A running cluster read through the ``rocketmq`` source, in place of a store directory: ``options``
    are the source's connection options (``namesrv`` or ``context``, credentials, TLS); ``connection``,
    where the caller resolved them already, is what they say (the driver plans with it)."""

    options: Mapping[str, str]
    connection: Connection | None = None

    def __str__(self) -> str:
        where = self.options.get("namesrv") or f"context {self.options.get('context') or '(current)'}"
        return f"cluster {where}"


Source = str | Path | ClusterSource
"""What ``spark-export`` reads: a store directory or a running cluster."""


@dataclass(frozen=True)
class ExportProgress:
    files: int
    splits_done: int
    splits: int
    bytes_done: int
    bytes_total: int


ProgressCallback = Callable[[ExportProgress], None]


@dataclass(frozen=True)
class ExportResult:
    """The summary ``spark-export`` prints.

    ``data_bytes`` is the CommitLog data read (written bytes of the files read); ``record_bytes``
    the TOTALSIZE sum of the exported rows (smaller when filters drop records). ``wall_seconds``
    covers the whole run the caller measured (the CLI: process start to exit, Spark's start and
    stop included), ``spark_start_seconds`` the part of it spent starting Spark, ``job_seconds``
    the export job alone; ``mb_per_s`` is ``data_bytes`` over ``wall_seconds``.
    """

    store: str
    out: str
    format: str
    rows: int
    files: int
    splits: int
    data_bytes: int
    record_bytes: int
    wall_seconds: float
    spark_start_seconds: float
    job_seconds: float
    mb_per_s: float

    def over(self, wall_seconds: float, spark_start_seconds: float) -> ExportResult:
        """The same result timed over a longer run (the rate follows the longer wall time)."""
        return dataclasses.replace(
            self,
            wall_seconds=round(wall_seconds, 3),
            spark_start_seconds=round(spark_start_seconds, 3),
            mb_per_s=rate(self.data_bytes, wall_seconds),
        )


def rate(data_bytes: int, seconds: float) -> float:
    """MB (1e6 bytes) per second, to 0.1, as every figure of this tool is printed."""
    return round(data_bytes / seconds / 1e6, 1) if seconds > 0 else 0.0


def is_connect(spark: SparkSession) -> bool:
    """A Spark Connect session (no SparkContext on this side)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _instant(ms: int) -> datetime:
    """Epoch ms as an aware datetime, exactly (Spark literals of this type are pushed as timestamps)."""
    return _EPOCH + timedelta(milliseconds=ms)


def plan(store: str | Path, partitions: int | None = None) -> ScanPlan:
    """Files, tasks and data bytes of a read (the reader plans the same tasks in Spark)."""
    from mqctl.spark.source import list_files, plan_tasks

    files = list_files(store)
    return ScanPlan(
        len(files), len(plan_tasks(files, partitions=partitions)), sum(f.data_estimate for f in files)
    )


def load(
    spark: SparkSession,
    store: str | Path,
    *,
    topics: Sequence[str] = (),
    since_ms: int | None = None,
    until_ms: int | None = None,
    with_body: bool = False,
    partitions: int | None = None,
) -> DataFrame:
    """The store's records as a DataFrame; the store-time window ``[since_ms, until_ms]`` is inclusive,
    as for every ``--since``/``--until`` of the CLI.

    A store that is one read task (up to 64 MiB of data) and no ``partitions`` asked for is decoded
    here, on the driver, and handed to Spark as one Arrow table: the same decoder without the
    three Python worker start-ups of a data source read (schema, planning, the task), which cost
    more than the decoding of a few MiB. Larger stores are read by the data source in the tasks.
    """
    from pyspark.sql import functions as F

    from mqctl.spark.source import commitlog_dir

    commitlog_dir(store)  # a missing store fails here, not inside a Spark task
    df = None if partitions else _driver_frame(spark, store, with_body)
    if df is None:
        reader = spark.read.format(FORMAT_NAME).option("with_body", str(with_body).lower())
        if partitions:
            reader = reader.option("partitions", str(partitions))
        df = reader.load(str(store))
    if topics:
        df = df.where(F.col("topic").isin(list(topics)))
    if since_ms is not None:
        df = df.where(F.col("store_timestamp") >= F.lit(_instant(since_ms)))
    if until_ms is not None:
        df = df.where(F.col("store_timestamp") <= F.lit(_instant(until_ms)))
    return df


def _driver_frame(spark: SparkSession, store: str | Path, with_body: bool) -> DataFrame | None:
    """The whole store decoded on the driver, if it is a single read task; else None."""
    import pyarrow as pa

    from mqctl.spark.decode import arrow_schema, spark_ddl
    from mqctl.spark.source import list_files, plan_tasks, read_split

    tasks = plan_tasks(list_files(store))
    if len(tasks) > 1:
        return None
    splits = tasks[0].splits if tasks else ()
    batches = [b for s in splits for b in read_split(s, with_body=with_body)]
    if not any(b.num_rows for b in batches):  # pyspark cannot convert an empty Arrow table
        return spark.createDataFrame([], schema=spark_ddl(with_body))
    return spark.createDataFrame(
        pa.Table.from_batches(batches, arrow_schema(with_body)), schema=spark_ddl(with_body)
    )


def check_source(source: Source, partitions: int | None) -> None:
    """What a source refuses before Spark starts."""
    if isinstance(source, ClusterSource) and partitions:
        raise UsageError("--partitions is for --store: a cluster read makes one task per queue range")


def frame(
    spark: SparkSession,
    source: Source,
    *,
    topics: Sequence[str] = (),
    since_ms: int | None = None,
    until_ms: int | None = None,
    with_body: bool = False,
    partitions: int | None = None,
) -> tuple[DataFrame, ScanPlan]:
    """The records of a store (:func:`load`) or of a running cluster (:func:`cluster_frame`), and what
    the read covers."""
    check_source(source, partitions)
    if isinstance(source, ClusterSource):
        return cluster_frame(
            spark, source, topics=topics, since_ms=since_ms, until_ms=until_ms, with_body=with_body
        )
    scan = plan(source, partitions)
    df = load(
        spark, source, topics=topics, since_ms=since_ms, until_ms=until_ms, with_body=with_body,
        partitions=partitions,
    )  # fmt: skip
    return df, scan


def cluster_frame(
    spark: SparkSession,
    source: ClusterSource,
    *,
    topics: Sequence[str] = (),
    since_ms: int | None = None,
    until_ms: int | None = None,
    with_body: bool = False,
) -> tuple[DataFrame, ScanPlan]:
    """The messages of ``topics`` (every user topic when none is named) stored in ``[since_ms, until_ms]``.

    The queue ranges are planned here, once, and handed to the source as per-queue offsets, so the
    read covers exactly what was planned (and counted for progress) while producers go on sending.
    """
    import json

    from pyspark.sql import functions as F

    from mqctl.spark.cluster import bounds, in_session, read_spec

    options = {**source.options, "with_body": str(with_body).lower()}
    options.update({"topic": ",".join(topics)} if topics else {"topicPattern": ".*"})
    if since_ms is not None:
        options["startingOffsets"] = str(since_ms)
    if until_ms is not None:
        options["endingOffsets"] = str(until_ms + 1)  # the first offset stored after the window
    spec = read_spec(options, connection=source.connection)
    found = in_session(spec.connection, lambda admin: bounds(admin, spec))
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for q, start, end in found:
        starts.setdefault(q.topic, {})[q.key] = start
        ends.setdefault(q.topic, {})[q.key] = max(start, end)
    splits = sum(-(-(end - start) // spec.max_messages) for _, start, end in found if end > start)
    reader = spark.read.format(CLUSTER_FORMAT_NAME)
    for key, value in options.items():
        if key not in ("topicPattern", "startingOffsets", "endingOffsets"):
            reader = reader.option(key, value)
    reader = reader.option("topic", ",".join(sorted(ends)))
    reader = reader.option("startingOffsets", json.dumps(starts)).option("endingOffsets", json.dumps(ends))
    df = reader.load()
    if since_ms is not None:
        df = df.where(F.col("store_timestamp") >= F.lit(_instant(since_ms)))
    if until_ms is not None:
        df = df.where(F.col("store_timestamp") <= F.lit(_instant(until_ms)))
    return df, ScanPlan(0, splits, 0)


def _csv_columns(df: DataFrame) -> DataFrame:
    """CSV has no arrays, maps or binary: keys joined by spaces, properties as JSON, body base64."""
    from pyspark.sql import functions as F

    out = df.withColumn("keys", F.array_join("keys", " ")).withColumn("properties", F.to_json("properties"))
    return out.withColumn("body", F.base64("body")) if "body" in df.columns else out


@contextmanager
def _watch(spark: SparkSession, scan: ScanPlan, callback: ProgressCallback | None) -> Iterator[None]:
    """Report task progress of this thread's job group every 0.25 s while the block runs (on Spark
    Connect, where no status tracker is reachable, only the end)."""
    if is_connect(spark):
        yield
        if callback is not None:
            callback(ExportProgress(scan.files, scan.splits, scan.splits, scan.data_bytes, scan.data_bytes))
        return
    sc = spark.sparkContext
    sc.setJobGroup(_JOB_GROUP, "mqctl spark-export")
    stop = threading.Event()

    def poll() -> None:
        tracker = sc.statusTracker()
        while not stop.wait(0.25):
            done = total = 0
            for job in tracker.getJobIdsForGroup(_JOB_GROUP):
                info = tracker.getJobInfo(job)
                for stage_id in info.stageIds if info else ():
                    stage = tracker.getStageInfo(stage_id)
                    if stage is not None:
                        done, total = done + stage.numCompletedTasks, total + stage.numTasks
            if total and callback is not None:
                callback(
                    ExportProgress(scan.files, done, total, scan.data_bytes * done // total, scan.data_bytes)
                )

    thread = threading.Thread(target=poll, name="spark-export-progress", daemon=True)
    if callback is not None:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if callback is not None:
            thread.join()
            callback(ExportProgress(scan.files, scan.splits, scan.splits, scan.data_bytes, scan.data_bytes))
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def spark_failure(exc: Exception) -> MqctlError:
    """A failed Spark job as one line: a corrupt record keeps its file and offset, and an mqctl error a
    worker raised (the last line of its traceback: :func:`mqctl.spark.cluster.told`) is raised again here,
    its class and line kept, so the command exits as it would have without Spark (9 for an ACL refusal,
    not 1 and the traceback's first line)."""
    from mqctl import errors

    text = str(exc)
    corrupt = re.search(r"corrupt record at [^\n]*", text)
    if corrupt:
        return StoreError(corrupt.group(0).strip())
    raised = re.findall(r"^mqctl\.errors\.(\w+): (.+)$", text, re.MULTILINE)
    cls = getattr(errors, raised[-1][0], None) if raised else None
    if isinstance(cls, type) and issubclass(cls, MqctlError):
        message = raised[-1][1].strip()
        if issubclass(cls, errors.BrokerError):
            code = re.search(r"\(response code (-?\d+)\)", message)
            return cls(message, code=int(code.group(1)) if code else 1)
        return cls(message)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return MqctlError(f"Spark job failed: {first}")


def _remove_partial(target: Path, settle: float = 0.2, limit: float = 10.0) -> None:
    """Remove a failed job's partial output. The job fails with its first failed task while the stage's
    other tasks are still being killed, and one of those can write its file after a first removal: so
    remove until the directory stayed gone for ``settle`` seconds (``limit`` at most)."""
    deadline = time.monotonic() + limit
    while True:
        shutil.rmtree(target, ignore_errors=True)
        time.sleep(settle)
        if not target.exists() or time.monotonic() >= deadline:
            return


def export(
    spark: SparkSession,
    store: Source,
    out: str | Path,
    *,
    fmt: str = "parquet",
    topics: Sequence[str] = (),
    since_ms: int | None = None,
    until_ms: int | None = None,
    with_body: bool = False,
    partitions: int | None = None,
    overwrite: bool = False,
    progress: ProgressCallback | None = None,
) -> ExportResult:
    """Write the store's (or cluster's) records to ``out`` (a directory of part files) and summarise the
    run. A cluster's data bytes are its records' sizes, known once they are read."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    from pyspark.sql import Observation, functions as F

    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    target = Path(out)
    if target.exists() and not overwrite:
        raise ConflictError(f"{target} already exists", hint="use --overwrite to replace it")
    started = time.perf_counter()
    df, scan = frame(
        spark, store, topics=topics, since_ms=since_ms, until_ms=until_ms, with_body=with_body,
        partitions=partitions,
    )  # fmt: skip
    log.debug(
        "exporting %s: %d files, %d splits, %d data bytes", store, scan.files, scan.splits, scan.data_bytes
    )
    seen = Observation("mqctl-export")
    df = df.observe(
        seen, F.count(F.lit(1)).alias("rows"), F.coalesce(F.sum("record_size"), F.lit(0)).alias("bytes")
    )
    if fmt == "csv":
        df = _csv_columns(df)
    writer = df.write.mode("overwrite" if overwrite else "error")  # Connect knows no "errorifexists"
    if fmt == "parquet":
        for column in _NO_DICTIONARY:
            writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
    if fmt == "csv":  # RFC 4180 quoting (Spark's default escapes quotes with a backslash)
        writer = writer.option("header", "true").option("escape", '"')
    if overwrite and target.is_file():
        target.unlink()
    try:
        with _watch(spark, scan, progress):
            writer.format(fmt).save(str(target))
    except (PySparkException, Py4JJavaError) as exc:  # Java errors Spark does not convert stay Py4J's
        _remove_partial(target)
        raise spark_failure(exc) from exc
    metrics = seen.get
    job = time.perf_counter() - started
    data_bytes = int(metrics["bytes"]) if isinstance(store, ClusterSource) else scan.data_bytes
    return ExportResult(
        store=str(store),
        out=str(target),
        format=fmt,
        rows=int(metrics["rows"]),
        files=scan.files,
        splits=scan.splits,
        data_bytes=data_bytes,
        record_bytes=int(metrics["bytes"]),
        wall_seconds=round(job, 3),
        spark_start_seconds=0.0,
        job_seconds=round(job, 3),
        mb_per_s=rate(data_bytes, job),
    )
