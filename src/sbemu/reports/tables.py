"""The reporting tables: what the Spark job (sparkjobs/report.py) and ``sbemu report`` use.

The rooms: ``schema`` (the tables' columns and their Parquet files), ``deltas`` (one
micro-batch's events reduced to deltas), ``store`` (TableStore: the deltas merged into the
files exactly once, the derived tables); here, what the console summary reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .deltas import DELTA_COLUMNS, batch_deltas
from .schema import COLUMNS, SESSION_BUCKETS, TABLES, TRAFFIC_COUNTS, read_rows
from .store import TableStore, percentiles

__all__ = [
    "COLUMNS",
    "DELTA_COLUMNS",
    "SESSION_BUCKETS",
    "TABLES",
    "TRAFFIC_COUNTS",
    "TableStore",
    "batch_deltas",
    "percentiles",
    "read_rows",
    "summary_rows",
]


def summary_rows(out: str) -> list[dict[str, Any]]:
    """One row per entity for the console (sums over minutes and partitions; `p95_ms`: the
    worst partition's p95; `sessions`: sessions seen), ordered by namespace, entity."""
    per: dict[tuple[str, str], dict[str, Any]] = {}

    def row(r: Mapping[str, Any]) -> dict[str, Any]:
        key = (r["namespace"], r["entity"])
        if key not in per:
            per[key] = {
                "namespace": key[0],
                "entity": key[1],
                "partitions": None,
                "max_over_mean": None,
                **{n: 0 for n in TRAFFIC_COUNTS},
                "p95_ms": None,
                "sessions": 0,
            }
        return per[key]

    for r in read_rows(out, "partition_skew"):
        row(r).update(partitions=r["partitions"], max_over_mean=r["max_over_mean"])
    for r in read_rows(out, "traffic_by_minute"):
        target = row(r)
        for n in TRAFFIC_COUNTS:
            target[n] += r[n]
    for r in read_rows(out, "latency"):
        target = row(r)
        if target["p95_ms"] is None or r["p95_ms"] > target["p95_ms"]:
            target["p95_ms"] = r["p95_ms"]
    for r in read_rows(out, "sessions"):
        row(r)["sessions"] += 1
    return [per[k] for k in sorted(per)]
