"""The reporting tables on disk, merged one micro-batch at a time (pyarrow, no Spark).

The Spark job (sparkjobs/report.py) writes each micro-batch's events; `batch_deltas` reduces
them to small deltas (Arrow, in the driver) and `TableStore.apply` merges them into Parquet files partitioned by namespace, entity
and (for `traffic_by_minute`) UTC date, so a batch rewrites only the files its events touch and
its cost does not grow with the history::

    OUT/traffic_by_minute/<ns>/<entity>/<YYYY-MM-DD>.parquet
    OUT/deadletter_reasons/<ns>/<entity>/all.parquet
    OUT/latency/<ns>/<entity>/all.parquet           derived from _state/latency_histogram
    OUT/partition_skew/<ns>/<entity>/all.parquet    derived from _state/partition_messages
    OUT/sessions/<ns>/<entity>/bucket-NN.parquet    NN = crc32(session id) % SESSION_BUCKETS
    OUT/_state/latency_histogram/<ns>/<entity>/all.parquet   (partition, latency_ms) -> count
    OUT/_state/partition_messages/<ns>/<entity>/all.parquet  messages and last sent sequence
                                                             number per partition
    OUT/_state/totals.json                          events counted, last batch applied

(<ns>, <entity> are the names percent-quoted.) Every file carries the full rows (the partition
columns included), so ``spark.read.parquet(OUT/<table>)`` or pyarrow read a table whole.

Exactly once: each merged file records in its Parquet metadata (``sbemu.batch``) the last
micro-batch merged into it and is replaced atomically (hidden temp file, fsync, rename). Spark
re-runs an unfinished batch with the same id and the same events after a crash, and a file
that already has that batch is skipped, so a batch counts once in every file whether the crash
came before, during or after its merge. `partition_messages` also keeps the state as it was
before its last batch, so a re-run computes the same deltas.

Latency percentiles are exact: `_state/latency_histogram` counts completions per distinct
enqueue-to-complete time in milliseconds, from which p50/p95/p99 are interpolated linearly
(as Spark's `percentile`). It grows with the number of distinct millisecond latencies per
partition (at most 60 000 rows for latencies under a minute), not with the number of messages.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from sbemu.atomicfile import atomic_write

from .schema import SESSION_BUCKETS, TRAFFIC_COUNTS, arrow_schema, read_file, table_files


def percentiles(histogram: Mapping[int, int], ps: Iterable[float]) -> list[float]:
    """Exact percentiles with linear interpolation (Spark's `percentile`) of a value->count
    histogram: position p*(n-1) in the sorted values."""
    values = sorted(histogram)
    n = sum(histogram.values())
    cum: list[int] = []
    total = 0
    for v in values:
        total += histogram[v]
        cum.append(total)  # values[i] covers sorted positions [cum[i-1], cum[i])

    def at(pos: int) -> int:
        lo, hi = 0, len(cum) - 1
        while lo < hi:  # first i with cum[i] > pos
            mid = (lo + hi) // 2
            if cum[mid] > pos:
                hi = mid
            else:
                lo = mid + 1
        return values[lo]

    out = []
    for p in ps:
        pos = p * (n - 1)
        lo = int(pos)
        a, b = at(lo), at(min(lo + 1, n - 1))
        out.append(a + (b - a) * (pos - lo))
    return out


class TableStore:
    """Merges micro-batch deltas into the tables of one OUT directory (see module docstring)."""

    def __init__(self, out: str) -> None:
        self.out = os.path.abspath(out)

    def path(self, table: str, namespace: str, entity: str, name: str) -> str:
        return os.path.join(
            self.out, table, quote(namespace, safe=""), quote(entity, safe=""), name + ".parquet"
        )

    @property
    def totals_path(self) -> str:
        return os.path.join(self.out, "_state", "totals.json")

    def _write(self, path: str, table: str, rows: list[dict[str, Any]], batch: int | None) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = arrow_schema(table, batch)
        data = pa.Table.from_pylist(rows, schema=schema)
        sink = pa.BufferOutputStream()
        pq.write_table(data, sink, compression="zstd")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, [sink.getvalue().to_pybytes()])

    def _merge(
        self,
        table: str,
        path: str,
        keys: tuple[str, ...],
        delta: list[dict[str, Any]],
        combine: Callable[[dict[str, Any], dict[str, Any]], None],
        batch: int,
        prepare: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]] | None:
        """Merge `delta` rows into one file unless it already has `batch`; returns the rows
        written (None: skipped). `prepare` runs on each stored row first."""
        have, rows = read_file(path)
        if have >= batch:
            return None
        if prepare is not None:
            for r in rows:
                prepare(r)
        index = {tuple(r[k] for k in keys): r for r in rows}
        for d in delta:
            k = tuple(d[c] for c in keys)
            row = index.get(k)
            if row is None:
                index[k] = dict(d)
            else:
                combine(row, d)
        merged = [index[k] for k in sorted(index, key=_sort_key)]
        self._write(path, table, merged, batch)
        return merged

    def partition_state(self, batch: int) -> dict[tuple[str, str, int], int]:
        """The last sent sequence number per partition before `batch` (for `new message`
        tests: sequence numbers grow in log order per partition, and a later copy of a
        message, such as a topic's per-subscription copies, repeats its number)."""
        state: dict[tuple[str, str, int], int] = {}
        for path in table_files(os.path.join(self.out, "_state", "partition_messages")):
            have, rows = read_file(path)
            for r in rows:
                seq = r["max_seq_before"] if have >= batch else r["max_seq"]
                if seq is not None:
                    state[(r["namespace"], r["entity"], r["partition"])] = seq
        return state

    def apply(
        self,
        batch: int,
        *,
        events: int,
        traffic: list[dict[str, Any]],
        reasons: list[dict[str, Any]],
        latency: list[dict[str, Any]],
        partitions: list[dict[str, Any]],
        sessions: list[dict[str, Any]],
        layout: Mapping[tuple[str, str], int],
    ) -> None:
        """Merge one micro-batch's deltas (plain dict rows, see COLUMNS; `partitions` rows:
        namespace, entity, partition, new_messages, max_seq; `latency` rows: histogram) and
        rebuild the derived tables of the entities it touched. Idempotent per batch id.

        `layout`: partition count per (lower-case namespace, lower-case entity), so
        partition_skew counts partitions that never got a message as 0."""
        touched: set[tuple[str, str]] = set()
        for (ns, ent, day), rows in _groups(traffic, _day_of, touched).items():
            self._merge(
                "traffic_by_minute",
                self.path("traffic_by_minute", ns, ent, day),
                ("namespace", "entity", "partition", "minute"),
                rows,
                _adder(TRAFFIC_COUNTS),
                batch,
            )
        for (ns, ent, _), rows in _groups(reasons, _whole, touched).items():
            self._merge(
                "deadletter_reasons",
                self.path("deadletter_reasons", ns, ent, "all"),
                ("namespace", "entity", "reason"),
                rows,
                _adder(("count",)),
                batch,
            )
        for (ns, ent, bucket), rows in _groups(sessions, _session_bucket, touched).items():
            self._merge(
                "sessions",
                self.path("sessions", ns, ent, bucket),
                ("namespace", "entity", "session_id"),
                rows,
                _session_combine,
                batch,
            )
        for (ns, ent, _), rows in _groups(latency, _whole, touched).items():
            self._merge(
                "_state/latency_histogram",
                self.path("_state/latency_histogram", ns, ent, "all"),
                ("namespace", "entity", "partition", "latency_ms"),
                rows,
                _adder(("count",)),
                batch,
            )
        self._merge_partitions(batch, partitions, touched)
        for ns, ent in sorted(touched):
            self._derive_latency(ns, ent)
            self._derive_skew(ns, ent, layout.get((ns.lower(), ent.lower())))
        self._add_total(batch, events)

    def _merge_partitions(
        self, batch: int, partitions: list[dict[str, Any]], touched: set[tuple[str, str]]
    ) -> None:
        """_state/partition_messages: messages and the last sent number per partition, with
        the state before this batch kept for a replay of it."""
        part_rows = [
            {
                "namespace": r["namespace"],
                "entity": r["entity"],
                "partition": r["partition"],
                "messages": r["new_messages"],
                "max_seq": r["max_seq"],
                "max_seq_before": None,
            }
            for r in partitions
        ]
        for (ns, ent, _), rows in _groups(part_rows, _whole, touched).items():
            self._merge(
                "_state/partition_messages",
                self.path("_state/partition_messages", ns, ent, "all"),
                ("namespace", "entity", "partition"),
                rows,
                _partition_combine,
                batch,
                prepare=_remember,
            )

    def _add_total(self, batch: int, events: int) -> None:
        have = self.totals()
        if have["batch"] >= batch:
            return
        data = {"batch": batch, "events": have["events"] + events}
        os.makedirs(os.path.dirname(self.totals_path), exist_ok=True)
        atomic_write(self.totals_path, [json.dumps(data).encode()])

    def totals(self) -> dict[str, int]:
        """{"batch": last batch applied (-1: none), "events": events counted so far}."""
        try:
            with open(self.totals_path) as f:
                data = json.load(f)
            return {"batch": int(data["batch"]), "events": int(data["events"])}
        except FileNotFoundError:
            return {"batch": -1, "events": 0}

    def _derive_latency(self, ns: str, ent: str) -> None:
        _, hist = read_file(self.path("_state/latency_histogram", ns, ent, "all"))
        per: dict[int, dict[int, int]] = {}
        for r in hist:
            per.setdefault(r["partition"], {})[r["latency_ms"]] = r["count"]
        rows = []
        for part in sorted(per):
            h = per[part]
            p50, p95, p99 = percentiles(h, (0.5, 0.95, 0.99))
            rows.append(
                {
                    "namespace": ns,
                    "entity": ent,
                    "partition": part,
                    "completed": sum(h.values()),
                    "p50_ms": round(p50, 3),
                    "p95_ms": round(p95, 3),
                    "p99_ms": round(p99, 3),
                    "max_ms": max(h),
                }
            )
        if rows:
            self._write(self.path("latency", ns, ent, "all"), "latency", rows, None)

    def _derive_skew(self, ns: str, ent: str, partition_count: int | None) -> None:
        _, state = read_file(self.path("_state/partition_messages", ns, ent, "all"))
        per = {r["partition"]: r["messages"] for r in state}
        if not per:
            return
        for p in range(partition_count or 0):
            per.setdefault(p, 0)
        counts = [per[p] for p in sorted(per)]
        mean = sum(counts) / len(counts)
        row = {
            "namespace": ns,
            "entity": ent,
            "partitions": len(counts),
            "messages": sum(counts),
            "min_per_partition": min(counts),
            "max_per_partition": max(counts),
            "mean_per_partition": mean,
            "max_over_mean": max(counts) / mean if mean > 0 else None,
            "messages_per_partition": counts,
        }
        self._write(self.path("partition_skew", ns, ent, "all"), "partition_skew", [row], None)


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, v if v is not None else 0) for v in key)


def _day(minute: datetime) -> str:
    if minute.tzinfo is None:
        minute = minute.replace(tzinfo=UTC)
    return minute.astimezone(UTC).strftime("%Y-%m-%d")


def _session_bucket(row: Mapping[str, Any]) -> str:
    return f"bucket-{zlib.crc32(row['session_id'].encode()) % SESSION_BUCKETS:02d}"


def _groups(
    rows: list[dict[str, Any]],
    name: Callable[[dict[str, Any]], str],
    touched: set[tuple[str, str]],
) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Rows by (namespace, entity, file name); the entities seen are added to `touched`."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        touched.add((r["namespace"], r["entity"]))
        out.setdefault((r["namespace"], r["entity"], name(r)), []).append(r)
    return out


def _whole(row: Mapping[str, Any]) -> str:
    return "all"  # the entity's one file


def _day_of(row: Mapping[str, Any]) -> str:
    return _day(row["minute"])


def _adder(cols: tuple[str, ...]) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    def combine(row: dict[str, Any], d: dict[str, Any]) -> None:
        for c in cols:
            row[c] += d[c]

    return combine


def _session_combine(row: dict[str, Any], d: dict[str, Any]) -> None:
    row["messages"] += d["messages"]
    row["first_time"] = min(row["first_time"], d["first_time"])
    row["last_time"] = max(row["last_time"], d["last_time"])


def _remember(row: dict[str, Any]) -> None:
    """The state before this batch, for replays."""
    row["max_seq_before"] = row["max_seq"]


def _partition_combine(row: dict[str, Any], d: dict[str, Any]) -> None:
    row["messages"] += d["messages"]
    if d["max_seq"] is not None and (row["max_seq"] is None or d["max_seq"] > row["max_seq"]):
        row["max_seq"] = d["max_seq"]
