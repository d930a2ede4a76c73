"""Analytics on Spark: PySpark data sources (a store's CommitLog, a running cluster), export and report.

Everything here needs the ``spark`` extra (pyspark, pyarrow, numpy, matplotlib) and Java, so the
CLI imports this package only inside the ``spark-export`` command, never at start-up.
"""

from __future__ import annotations

FORMAT_NAME = "rocketmq-commitlog"
"""The short name the data source is registered under: ``spark.read.format(FORMAT_NAME)``."""

CLUSTER_FORMAT_NAME = "rocketmq"
"""The short name of the data source over a running cluster: ``spark.read.format(CLUSTER_FORMAT_NAME)``."""
