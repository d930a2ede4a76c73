"""CommitLog analytics on Spark: a PySpark data source, export and report services.

Everything here needs the ``spark`` extra (pyspark, pyarrow, numpy, matplotlib) and Java, so the
CLI imports this package only inside the ``spark-export`` command, never at start-up.
"""

from __future__ import annotations

FORMAT_NAME = "rocketmq-commitlog"
"""The short name the data source is registered under: ``spark.read.format(FORMAT_NAME)``."""
