"""A Structured Streaming query from the ``rocketmq`` source into Parquet, as its own driver process (so a
test can SIGKILL the driver, JVM and all, and start it again on the same checkpoint), and the reading of
what a file sink committed.

``python -m tests.support.spark_stream NAMESRV PATTERN CHECKPOINT OUT TRIGGER_S [OPTION=VALUE ...]``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def start(
    namesrv: str, pattern: str, checkpoint: Path, out: Path, trigger_s: float, **options: str
) -> subprocess.Popen[bytes]:
    """The driver in a session of its own: ``os.killpg`` of its pid reaches the JVM and workers too. Its
    output and its JVM's, each batch's progress (durations in ms) among it, is appended to
    ``checkpoint``.log (:func:`log_tail`). Its Python workers import the installed pyspark, not
    ``pyspark.zip`` (:func:`tests.support.spark.home_without_python_lib`): the query's source worker has
    a fixed 10 s to connect back, which compiling the zip's modules outlasted on a busy host."""
    import pyspark

    from tests.support.spark import home_without_python_lib

    home = home_without_python_lib(Path(pyspark.__file__).parent, checkpoint.parent)
    args = [
        sys.executable,
        "-m",
        "tests.support.spark_stream",
        namesrv,
        pattern,
        str(checkpoint),
        str(out),
        str(trigger_s),
    ]
    args += [f"{k}={v}" for k, v in options.items()]
    with open(f"{checkpoint}.log", "ab") as log:
        return subprocess.Popen(
            args,
            start_new_session=True,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "SPARK_HOME": str(home)},
        )


def log_tail(checkpoint: Path, driver: subprocess.Popen[bytes], size: int = 3000) -> str:
    """Whether the driver still runs, and the end of its log: what a failed wait shows."""
    state = "running" if driver.poll() is None else f"exited {driver.returncode}"
    try:
        text = Path(f"{checkpoint}.log").read_bytes()[-size:].decode(errors="replace")
    except OSError as e:
        text = f"(no log: {e})"
    return f"the driver {state}; its log ends:\n{text}"


class Sink:
    """What a file sink committed (:func:`mqctl.spark.stream.sink_files`), each file read once."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.tables: dict[str, pa.Table] = {}

    def poll(self) -> pa.Table | None:
        from mqctl.spark.stream import sink_files

        for path in sink_files(self.out):
            if path not in self.tables:
                self.tables[path] = pq.read_table(path)
        tables = [self.tables[p] for p in sorted(self.tables)]
        return pa.concat_tables(tables) if tables else None


def main(argv: list[str]) -> None:
    from mqctl.spark.session import spark_session

    namesrv, pattern, checkpoint, out, trigger = argv[:5]
    # debug: the JVM writes to this process's stderr, the test's log of the driver, not mqctl's own file
    with spark_session("local[2]", app_name="mqctl-stream-test", debug=True) as spark:
        reader = (
            spark.readStream.format("rocketmq").option("namesrv", namesrv).option("topicPattern", pattern)
        )
        for option in argv[5:]:
            key, _, value = option.partition("=")
            reader = reader.option(key, value)
        query = (
            reader.load()
            .writeStream.format("parquet")
            .option("checkpointLocation", checkpoint)
            .option("path", out)
            .trigger(processingTime=f"{float(trigger)} seconds")
            .start()
        )
        seen = None
        while not query.awaitTermination(0.5):
            progress = query.lastProgress
            if progress is not None and progress["batchId"] != seen:
                seen = progress["batchId"]
                print(
                    json.dumps({"batch": seen, "rows": progress["numInputRows"], **progress["durationMs"]}),
                    flush=True,
                )


if __name__ == "__main__":
    main(sys.argv[1:])
