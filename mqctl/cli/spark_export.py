"""``mqctl spark-export``: CommitLog (``--store``) or a running cluster's queues (``--cluster``) to
Parquet/JSON/CSV on Spark, and ``spark-export report`` on either.

Thin: options are parsed here, the work is in ``mqctl.spark`` (imported inside the commands, so
that building the CLI never loads pyspark, pyarrow or numpy).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer

from mqctl.cli.common import ExistingPath, SinceOpt, UntilOpt, cluster_options, flags
from mqctl.spark.export import EXPORT_FORMATS  # stdlib-only at import time, like all of mqctl.spark's surface
from mqctl.units import plural

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from mqctl.spark.export import ExportProgress, Source

_IMPORTED = time.monotonic()

app = typer.Typer(invoke_without_command=True)  # its help: NOUNS in mqctl.cli.app

_STORE = typer.Option(
    "--store", help="Store root directory (holds commitlog/).", click_type=ExistingPath(file_okay=False)
)
ClusterOpt = Annotated[
    bool,
    typer.Option("--cluster", help="Read a running cluster over the protocol (-n/--context; the 'rocketmq' "
                 "data source) instead of a --store directory."),
]  # fmt: skip
TopicOpt = Annotated[list[str] | None, typer.Option("--topic", "-t", help="Only this topic (repeatable).")]
MasterOpt = Annotated[
    str | None,
    typer.Option("--master", help="Spark master URL, e.g. spark://host:7077 (default: the current context's "
                 "Spark Connect server if it names one, else an embedded local[*]).", envvar="MQCTL_SPARK_MASTER"),
]  # fmt: skip


def _remote_option(paths: str) -> Any:
    """``--remote``, its help naming the paths of this command the server sees (each command has its own)."""
    return typer.Option("--remote", help=f"Run on an existing Spark Connect server, sc://HOST:PORT (no local "
                        f"JVM); {paths}. Default: the current context's Spark Connect server ('context add "
                        "--spark-remote'), unless --master is given.", envvar="MQCTL_SPARK_REMOTE")  # fmt: skip


PartitionsOpt = Annotated[
    int | None,
    typer.Option("--partitions", min=1, help="Number of read splits of a --store (default: one per 64 MiB); "
                 "a --cluster read makes one per queue range."),
]  # fmt: skip


def _process_seconds() -> float:
    """Seconds since this process started (Linux /proc; elsewhere since the CLI was loaded)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


@contextmanager
def _session(master: str | None, remote: str | None, app_name: str) -> Iterator[SparkSession]:
    """The Spark session of one command; JVM and Spark log lines only with the root ``--debug``.

    Ctrl-C becomes :class:`~mqctl.errors.Interrupted` here: Typer would turn the
    KeyboardInterrupt into a silent exit 130, and the user is owed one line saying why it stopped.
    """
    from mqctl.config import context_spark_remote
    from mqctl.errors import Interrupted
    from mqctl.spark.session import spark_session

    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    if remote is None and master is None:
        remote = context_spark_remote()
    try:
        with spark_session(master, remote=remote, app_name=app_name, debug=debug) as spark:
            yield spark
    except KeyboardInterrupt:
        raise Interrupted("interrupted; Spark jobs cancelled") from None


def _check_local(
    master: str | None, remote: str | None, store: Source, out: Path | None = None, *, overwrite: bool = False
) -> None:
    """What can be refused before a JVM starts (seconds of it): a --store without commitlog/ and an --out
    that exists without --overwrite. On Spark Connect the paths are the server's: it checks them."""
    from mqctl.config import context_spark_remote
    from mqctl.errors import ConflictError, UsageError

    if remote is not None or (master is None and context_spark_remote() is not None):
        return
    if isinstance(store, Path) and not (store / "commitlog").is_dir():
        raise UsageError(f"--store {store} holds no commitlog/ directory: not a broker's store")
    if out is not None and out.exists() and not overwrite:
        raise ConflictError(f"{out} already exists", hint="use --overwrite to replace it")


@contextmanager
def _source(store: Path | None, cluster: bool) -> Iterator[Source]:
    """``--store DIR`` or ``--cluster``; exactly one. A cluster is reached as every online command reaches
    it (``-n``, ``--context``, the root's TLS, key and ``--timeout``, ``$MQCTL_*``, the context), resolved
    here and handed to the source whole: Spark's workers know no root flag. A secret given inline goes
    to them in an owner-only file that lives as long as the command."""
    from mqctl.errors import UsageError

    namesrv, context = flags().namesrv, flags().context
    if cluster == (store is not None):
        raise UsageError("spark-export reads either --store DIR or --cluster (with -n NAMESRV or a context)")
    if store is not None:
        if namesrv or context:
            raise UsageError("-n/--context go with --cluster; --store reads a directory")
        yield store
        return
    from mqctl.spark.connection import connection_of
    from mqctl.spark.export import ClusterSource

    timeout = flags().timeout
    given = {"namesrv": namesrv, "context": context, "timeout": None if timeout is None else repr(timeout)}
    connection = connection_of({k: v for k, v in given.items() if v is not None}, root_flags=True)
    named = {"context": context} if context else {}  # the current one is the workers' current one too
    if connection.credentials is None or connection.credentials.secret_file is not None:
        yield ClusterSource({**connection.options(), **named}, connection)
        return
    import shutil
    import tempfile

    from mqctl.auth import write_secret

    private = Path(tempfile.mkdtemp(prefix="mqctl-spark-"))
    try:
        write_secret(private / "secret", connection.credentials.secret_key)
        yield ClusterSource({**connection.options(str(private / "secret")), **named}, connection)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _window(since: str | None, until: str | None) -> tuple[int | None, int | None]:
    """``--since``/``--until`` as epoch ms (inclusive), parsed like every other time flag."""
    import time

    from mqctl.errors import UsageError
    from mqctl.timespec import parse_time

    now = int(time.time() * 1000)
    first = parse_time(since, now_ms=now, flag="--since") if since else None
    last = parse_time(until, now_ms=now, flag="--until") if until else None
    if first is not None and last is not None and first > last:
        raise UsageError(f"empty time window: --since {since} is after --until {until}")
    return first, last


@app.callback()
@cluster_options()
def export(
    ctx: typer.Context,
    store: Annotated[Path | None, _STORE] = None,
    cluster: ClusterOpt = False,
    out: Annotated[Path | None, typer.Option("--out", help="Output directory (Spark part files).")] = None,
    fmt: Annotated[
        str,
        typer.Option("--format", help="Export format.", click_type=click.Choice(EXPORT_FORMATS)),
    ] = "parquet",
    topic: TopicOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    with_body: Annotated[
        bool,
        typer.Option(
            "--with-body",
            help="Include message bodies, inflated when compressed (body_size stays the stored size; body_inflated_size where it differs).",
        ),
    ] = False,
    master: MasterOpt = None,
    remote: Annotated[
        str | None, _remote_option("--store and --out are paths the server's workers see")
    ] = None,
    partitions: PartitionsOpt = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace --out if it exists.")] = False,
) -> None:
    """Export every record of the CommitLog, or every message of a running cluster's topics (one row
    each, the same columns), and print a summary."""
    if ctx.invoked_subcommand is not None:
        return
    from mqctl.errors import UsageError

    if out is None or (store is None and not cluster):
        raise UsageError(
            "spark-export needs --store DIR (or --cluster) and --out PATH (or the 'report' command)"
        )
    from mqctl.output import render
    from mqctl.spark.export import check_source, export as run_export

    with _source(store, cluster) as source:
        check_source(source, partitions)
        first, last = _window(since, until)
        _check_local(master, remote, source, out, overwrite=overwrite)
        started = time.perf_counter()
        with _progress_bar() as progress, _session(master, remote, "mqctl spark-export") as spark:
            startup = time.perf_counter() - started
            result = run_export(
                spark, source, out, fmt=fmt, topics=topic or (), since_ms=first, until_ms=last,
                with_body=with_body, partitions=partitions, overwrite=overwrite, progress=progress,
            )  # fmt: skip
    render(result.over(_process_seconds(), startup), flags().output)


@contextmanager
def _progress_bar() -> Iterator[Callable[[ExportProgress], None]]:
    """A files/bytes progress bar on stderr, drawn only on a terminal, fed by the export service."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    from mqctl.output import stderr_console

    console = stderr_console(soft_wrap=False)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal, transient=True) as progress:
        task = progress.add_task("starting Spark", total=None)

        def update(p: ExportProgress) -> None:
            description = f"{plural(p.files, 'file')}, split {p.splits_done}/{p.splits}"
            progress.update(task, total=p.bytes_total, completed=p.bytes_done, description=description)

        yield update


@app.command("report")
@cluster_options()
def report(
    store: Annotated[Path | None, _STORE] = None,
    cluster: ClusterOpt = False,
    topic: TopicOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    master: MasterOpt = None,
    remote: Annotated[
        str | None,
        _remote_option("--store is a path the server's workers see; --json and --charts are written here"),
    ] = None,
    partitions: PartitionsOpt = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the whole report as JSON here.")
    ] = None,
    charts: Annotated[
        Path | None,
        typer.Option("--charts", help="Write PNG charts of the per-minute series into this directory."),
    ] = None,
    top: Annotated[
        int, typer.Option("--top", min=1, help="Rows in the top-N sections (keys, producers).")
    ] = 20,
) -> None:
    """Per-topic throughput, sizes, producers, latency, hot keys, queue skew, retries/DLQ, per-file content."""
    from mqctl.output import render
    from mqctl.spark.export import check_source
    from mqctl.spark.report import build_report, write_charts, write_json

    with _source(store, cluster) as source:
        check_source(source, partitions)
        first, last = _window(since, until)
        _check_local(master, remote, source)
        started = time.perf_counter()
        with _session(master, remote, "mqctl spark-export report") as spark:
            startup = time.perf_counter() - started
            result = build_report(
                spark,
                source,
                topics=topic or (),
                since_ms=first,
                until_ms=last,
                partitions=partitions,
                top=top,
            )
    result.timed(_process_seconds(), startup)
    if json_out is not None:
        write_json(result, json_out)
    if charts is not None:
        write_charts(result, charts)
    if flags().output == "table":
        for title, rows in result.sections():
            render(rows, "table", title=title)
    else:
        render(result, flags().output)
