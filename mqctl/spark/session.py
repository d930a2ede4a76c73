"""Starting Spark for mqctl: prerequisite checks, the settings that matter, data source registration.

The settings are the ones a prototype on this kind of machine needed: loopback binding, no UI
or console progress (mqctl draws its own), UTC so timestamps print as stored, microsecond
Parquet timestamps (readable by every Parquet reader), Python filter pushdown, without which
PySpark refuses a reader that implements ``pushFilters``, and reused Python workers (a worker
imports numpy, pyarrow and the decoder once, not once per task).

Two ways in: a driver JVM started here (``--master``, default ``local[*]``), or a Spark Connect
server that already runs (``--remote sc://HOST:PORT``), where only the ``spark.sql.*`` settings
apply, set on our session; the server's Python workers must be able to import mqctl.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from mqctl.errors import UsageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.python.worker.reuse": "true",
    # A Python worker that imports pyspark, pyarrow and mqctl on a busy host can take longer than Spark's
    # 15 s over its authentication and first reads, and the task then fails instead of waiting. (A
    # streaming source's own worker has a fixed 10 s to connect back, which no setting changes.)
    "spark.python.authenticate.socketTimeout": "120s",
}
_EXTRA_MODULES = ("pyspark", "pyarrow", "numpy")
# What pyspark's Spark Connect client imports (its 'connect' extra); mqctl's 'spark' extra has them.
_CONNECT_MODULES = ("pandas", "grpc", "grpc_status", "google.rpc", "zstandard")
# Spark's default log4j profile announces itself, and logs a WARN line on every start; mqctl's
# stderr is for its own progress and errors. WARN is also the level the shell launcher wants, so
# it does not announce a level change either.
_LOG4J2 = """\
rootLogger.level = warn
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = spark: %p %c{1}: %m%n%ex
"""


def _log4j_config() -> Path:
    """The log4j2 file handed to the driver JVM (written once per user into the temp directory)."""
    path = Path(tempfile.gettempdir()) / f"mqctl-spark-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return path


def check_prerequisites(*, remote: bool = False) -> None:
    """Fail with one actionable line when the ``spark`` extra or (for a local driver) Java is missing."""
    missing = []
    for module in _EXTRA_MODULES + (_CONNECT_MODULES if remote else ()):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise UsageError(
            f"spark-export needs the 'spark' extra ({', '.join(missing)} not installed): "
            "pip install 'mqctl[spark]'"
        )
    if not remote and find_java() is None:
        raise UsageError(
            "Spark needs Java 17 or 21 and none was found: install a JRE "
            "(e.g. 'apt install openjdk-17-jre-headless') or set JAVA_HOME"
        )


def find_java() -> str | None:
    """The ``java`` Spark's launcher would run: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        return str(java) if os.access(java, os.X_OK) else None
    return shutil.which("java")


def _not_py4j(record: logging.LogRecord) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def _quiet_loggers(debug: bool) -> None:
    """py4j logs a traceback for every call a Ctrl-C cuts short, some of them on the root logger;
    mqctl reports the interrupt itself, in one line."""
    if not debug:
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        root = logging.getLogger()
        if _not_py4j not in root.filters:
            root.addFilter(_not_py4j)


@contextmanager
def _jvm_stderr(debug: bool) -> Iterator[None]:
    """Point fd 2 at a log file while the driver JVM is launched, so the JVM (and the Python
    workers it starts) keep writing there: the launcher's and Spark's warnings stay off mqctl's
    stderr unless ``--debug``. One file per user, replaced by each run (:func:`jvm_log`)."""
    if debug:
        yield
        return
    fd = os.open(jvm_log(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    saved = os.dup(2)
    sys.stderr.flush()
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def jvm_log() -> Path:
    """Where the driver JVM's own output goes when mqctl started it without ``--debug``."""
    return Path(tempfile.gettempdir()) / f"mqctl-spark-{os.getuid()}.log"


def register_sources(spark: SparkSession) -> None:
    """Register both data sources (``rocketmq-commitlog``, ``rocketmq``) and the ``spark.sql.*``
    settings they need on a session."""
    from mqctl.spark.cluster import RocketMQDataSource
    from mqctl.spark.source import CommitLogDataSource

    for key, value in SPARK_CONF.items():
        if key.startswith("spark.sql."):  # the rest only applies when a JVM starts
            spark.conf.set(key, value)
    spark.dataSource.register(CommitLogDataSource)
    spark.dataSource.register(RocketMQDataSource)


@contextmanager
def spark_session(
    master: str | None = None,
    *,
    remote: str | None = None,
    app_name: str = "mqctl",
    conf: Mapping[str, str] | None = None,
    debug: bool = False,
) -> Iterator[SparkSession]:
    """A SparkSession with the data source registered; stopped on exit only if this call started it.

    ``remote`` (``sc://HOST:PORT``) connects to a Spark Connect server instead of starting a JVM.
    An already active classic session (a test fixture, a notebook) is reused as it is, so its
    master wins.
    """
    if remote is not None and master is not None:
        raise UsageError(
            "--master and --remote exclude each other: a Spark Connect server has its own master"
        )
    if remote is not None and not remote.startswith("sc://"):
        raise UsageError(f"--remote wants a Spark Connect URL sc://HOST:PORT, not {remote!r}")
    check_prerequisites(remote=remote is not None)
    _quiet_loggers(debug)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Executors (also on a standalone worker) must run this interpreter, which has mqctl installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    if remote is not None:
        log.debug("connecting to Spark Connect at %s", remote)
        spark = SparkSession.builder.remote(remote).appName(app_name).getOrCreate()
        try:
            register_sources(spark)
            yield spark
        finally:
            spark.stop()
        return
    active = SparkSession.getActiveSession()
    if active is not None:
        register_sources(active)
        yield active
        return
    builder = SparkSession.builder.appName(app_name).master(master or DEFAULT_MASTER)
    settings = {
        **SPARK_CONF,
        "spark.driver.host": os.environ["SPARK_LOCAL_IP"],
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_log4j_config().as_uri()}",
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    log.debug("starting Spark, master %s", master or DEFAULT_MASTER)
    with _jvm_stderr(debug):
        spark = builder.getOrCreate()
    try:
        register_sources(spark)
        yield spark
    finally:
        spark.stop()
