"""Starting Spark for mqctl: prerequisite checks, the settings that matter, data source registration.

The settings are the ones a prototype on this kind of machine needed: loopback binding, no UI
or console progress (mqctl draws its own), UTC so timestamps print as stored, microsecond
Parquet timestamps (readable by every Parquet reader), and Python filter pushdown, without
which PySpark refuses a reader that implements ``pushFilters``.
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
}
_EXTRA_MODULES = ("pyspark", "pyarrow", "numpy")
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


def check_prerequisites() -> None:
    """Fail with one actionable line when the ``spark`` extra or Java is missing."""
    missing = []
    for module in _EXTRA_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise UsageError(
            f"spark-export needs the 'spark' extra ({', '.join(missing)} not installed): "
            "pip install 'mqctl[spark]'"
        )
    if find_java() is None:
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


@contextmanager
def spark_session(
    master: str | None = None, *, app_name: str = "mqctl", conf: Mapping[str, str] | None = None
) -> Iterator[SparkSession]:
    """A SparkSession with the data source registered; stopped on exit only if this call started it.

    An already active session (a test fixture, a notebook) is reused as it is, so its master wins.
    """
    check_prerequisites()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Executors (also on a standalone worker) must run this interpreter, which has mqctl installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from mqctl.spark.source import CommitLogDataSource

    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in SPARK_CONF.items():
            if key.startswith("spark.sql."):  # the rest only applies when a JVM starts
                active.conf.set(key, value)
        active.dataSource.register(CommitLogDataSource)
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
    spark = builder.getOrCreate()
    try:
        spark.dataSource.register(CommitLogDataSource)
        yield spark
    finally:
        spark.stop()
