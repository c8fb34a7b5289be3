"""Spark test set-up: one local SparkSession for the whole run, skipped without pyspark/java.

Tests that need Spark take the `spark` fixture; when pyspark, pyarrow or java is missing it
skips them with the reason (install the `spark` extra: pip install -e '.[spark]').
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the shared traffic helpers (spark_traffic.py)
    sys.path.insert(0, str(HERE))

from sparkjobs.launch import spark_missing_reason  # noqa: E402

SPARK_MISSING = spark_missing_reason()


@pytest.fixture(scope="session")
def spark():
    if SPARK_MISSING:
        pytest.skip(f"Spark tests need pyspark, pyarrow and java: {SPARK_MISSING}")
    from sparkjobs.session import build_session

    # Spark hands timestamps to Python as naive local times: local time is UTC meanwhile.
    saved_tz = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    session = build_session(
        "local[2]",
        app_name="sbemu-tests",
        shuffle_partitions=2,
        conf={"spark.default.parallelism": 2},
    )
    yield session
    session.stop()
    if saved_tz is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved_tz
    time.tzset()
