"""One local Spark session for the Spark tests, recreated when a test broke it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def home_without_python_lib(home: Path, work: Path) -> Path:
    """pyspark's directory as a SPARK_HOME, but for its ``python/`` (``python/lib/pyspark.zip``), made in
    ``work`` once and reused.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path, and Python
    keeps no compiled bytecode for a zip: each worker compiles the pyspark modules it imports, several
    times the CPU of importing the same installed package. A streaming source's worker
    (``PythonStreamingSourceRunner``) is started on its own and has a fixed 10 s, which no setting
    changes, to connect back; beside the suite's other workers on a small host, the zip's imports
    alone outlasted it. Without the zip the workers import the installed pyspark (the same version).
    """
    overlay = work / "spark-home"
    overlay.mkdir(exist_ok=True)
    for entry in home.iterdir():
        if entry.name != "python" and not (overlay / entry.name).is_symlink():
            (overlay / entry.name).symlink_to(entry)
    return overlay


class SparkKeeper:
    """One local[2] session shared by the Spark tests (start-up costs seconds), checked before each
    use and recreated, JVM and all, when it is broken: a test cut short inside a py4j call (a
    pytest-timeout) leaves the gateway's socket out of step, and every later call on it fails
    (py4j ``KeyError: 'c'``). So one broken test fails alone."""

    def __init__(self) -> None:
        self._session: Any = None
        self._context: Any = None

    def get(self) -> Any:
        if self._session is not None and not self._healthy():
            self.discard()
        elif self._session is not None:  # a job a timed-out test left running would hold the cores
            self._session.sparkContext.cancelAllJobs()
        if self._session is None:
            from mqctl.spark.session import spark_session

            self._context = spark_session("local[2]", app_name="mqctl-tests")
            self._session = self._context.__enter__()
        return self._session

    def _healthy(self) -> bool:
        """Two calls with known, different answers: a desynchronised gateway gets one wrong or raises."""
        try:
            jvm = self._session.sparkContext._jvm
            return bool(
                jvm.java.lang.Math.abs(-7) == 7
                and jvm.java.lang.Math.abs(-11) == 11
                and not self._session.sparkContext._jsc.sc().isStopped()
            )
        except Exception:
            return False

    def kill_driver(self) -> None:
        """Kill the driver JVM, nothing else: a py4j call blocked on it then fails at once (its socket
        closes) and the next ``get`` starts a new session."""
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None) if gateway is not None else None
        if proc is not None:
            proc.kill()

    @contextlib.contextmanager
    def watchdog(self, seconds: float) -> Iterator[None]:
        """Kill the driver if the block outlives ``seconds``. pytest-timeout interrupts a test once, and a
        test cut short inside ``DataFrame.collect`` is then stuck in pyspark's own clean-up call on the
        out-of-step gateway, waiting for an answer that comes when the job ends: the whole worker hangs.
        Killing the JVM ends that wait, so the test fails and the others go on."""
        timer = threading.Timer(seconds, self.kill_driver)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def discard(self) -> None:
        """Kill the driver JVM (a graceful stop would wait for a stuck job) and forget it, so the
        next session starts clean."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        self._context = self._session = None
        gateway = SparkContext._gateway
        if gateway is not None:
            proc = getattr(gateway, "proc", None)
            if proc is not None:
                proc.kill()
                proc.wait(timeout=30)
            with contextlib.suppress(Exception):
                gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
        SparkSession._instantiatedSession = None
        SparkSession._activeSession = None
