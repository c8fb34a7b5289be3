"""The reporting tables' names and columns (the order Spark and the tests see), and their
Parquet files: where a table's files are and what one holds (rows and the last batch merged)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

TABLES = ("traffic_by_minute", "deadletter_reasons", "latency", "partition_skew", "sessions")
TRAFFIC_EVENTS = ("enqueued", "delivered", "completed", "abandoned", "deadlettered", "expired")
# traffic_by_minute's counts, defined as /metrics counts them (docs/spark.md): `sent`, the
# messages sent to the entity (scheduled ones included: sbemu_incoming_messages_total);
# `scheduled`, those of them sent with a ScheduledEnqueueTimeUtc; then one column per log
# event, where `enqueued` counts the copies placed in sub-queues at send (on a topic one per
# subscription that takes it: the fan-out deliveries; on a queue its sends not scheduled)
TRAFFIC_COUNTS = ("sent", "scheduled", *TRAFFIC_EVENTS)
SESSION_BUCKETS = 16
BATCH_META = b"sbemu.batch"

# Column names and kinds of every table (the order Spark and the tests see).
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "traffic_by_minute": (
        ("namespace", "string"),
        ("entity", "string"),
        ("partition", "int32"),
        ("minute", "timestamp"),
        *((name, "int64") for name in TRAFFIC_COUNTS),
    ),
    "deadletter_reasons": (
        ("namespace", "string"),
        ("entity", "string"),
        ("reason", "string"),
        ("count", "int64"),
    ),
    "latency": (
        ("namespace", "string"),
        ("entity", "string"),
        ("partition", "int32"),
        ("completed", "int64"),
        ("p50_ms", "double"),
        ("p95_ms", "double"),
        ("p99_ms", "double"),
        ("max_ms", "int64"),
    ),
    "partition_skew": (
        ("namespace", "string"),
        ("entity", "string"),
        ("partitions", "int64"),
        ("messages", "int64"),
        ("min_per_partition", "int64"),
        ("max_per_partition", "int64"),
        ("mean_per_partition", "double"),
        ("max_over_mean", "double"),
        ("messages_per_partition", "list<int64>"),
    ),
    "sessions": (
        ("namespace", "string"),
        ("entity", "string"),
        ("session_id", "string"),
        ("messages", "int64"),
        ("first_time", "timestamp"),
        ("last_time", "timestamp"),
    ),
    "_state/latency_histogram": (
        ("namespace", "string"),
        ("entity", "string"),
        ("partition", "int32"),
        ("latency_ms", "int64"),
        ("count", "int64"),
    ),
    "_state/partition_messages": (
        ("namespace", "string"),
        ("entity", "string"),
        ("partition", "int32"),
        ("messages", "int64"),
        ("max_seq", "int64"),
        ("max_seq_before", "int64"),
    ),
}


def arrow_schema(table: str, batch: int | None) -> Any:
    import pyarrow as pa

    kinds = {
        "string": pa.string(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "double": pa.float64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "list<int64>": pa.list_(pa.int64()),
    }
    meta = {BATCH_META: str(batch).encode()} if batch is not None else None
    return pa.schema([pa.field(n, kinds[k]) for n, k in COLUMNS[table]], metadata=meta)


def table_files(root: str) -> Iterator[str]:
    """Parquet files under a table directory, skipping hidden/underscore names like Spark."""
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        for name in sorted(files):
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                yield os.path.join(dirpath, name)


def read_file(path: str) -> tuple[int, list[dict[str, Any]]]:
    """(last batch merged into the file, its rows); (-1, []) when it does not exist."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        return -1, []
    meta = table.schema.metadata or {}
    return int(meta.get(BATCH_META, b"-1")), table.to_pylist()


def read_rows(out: str, table: str) -> list[dict[str, Any]]:
    """Every row of a table under OUT (pyarrow; for the summary, the HTML report, tests)."""
    rows: list[dict[str, Any]] = []
    for path in table_files(os.path.join(out, table)):
        rows.extend(read_file(path)[1])
    return rows
