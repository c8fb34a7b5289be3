"""A SparkSession set up for sbemu's jobs (local by default).

Pitfalls handled here:
- Python workers must run the interpreter that runs us (it has lmdb, msgpack, pyarrow and
  sbemu): PYSPARK_PYTHON is set to sys.executable before the JVM starts;
- the workers import ``sparkjobs`` (the data source class is pickled by reference): it is
  installed with sbemu (pip install -e '.[spark]'), so the same interpreter finds it; on a
  cluster ship it with ``--py-files`` (and install sbemu + pyarrow there);
- the UI is off and log4j is quiet (sparkjobs/log4j2.properties).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

PACKAGE_DIR = Path(__file__).resolve().parent
LOG4J = PACKAGE_DIR / "log4j2.properties"


def prepare_environment() -> None:
    """Environment the JVM and its Python workers inherit; call before the JVM starts."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def build_session(
    master: str | None = None,
    *,
    app_name: str = "sbemu-report",
    shuffle_partitions: int | None = None,
    conf: dict[str, Any] | None = None,
) -> SparkSession:
    """Create (or reuse) the session and register the ``sbemu`` data source on it."""
    prepare_environment()
    master = master or "local[*]"
    cores = os.cpu_count() or 2
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or max(2, cores)))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J}")
        .config("spark.executor.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J}")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Register the ``sbemu`` and ``sbemu_event_files`` data sources on a session (idempotent)."""
    from sparkjobs.source import SbemuDataSource, SbemuEventFilesSource

    spark.dataSource.register(SbemuDataSource)
    spark.dataSource.register(SbemuEventFilesSource)
