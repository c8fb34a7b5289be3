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
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from sbemu.atomicfile import atomic_write

__all__ = [
    "SESSION_BUCKETS",
    "TABLES",
    "TRAFFIC_COUNTS",
    "TableStore",
    "percentiles",
    "read_rows",
    "summary_rows",
]

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


def _arrow_schema(table: str, batch: int | None) -> Any:
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


def _files(root: str) -> Iterator[str]:
    """Parquet files under a table directory, skipping hidden/underscore names like Spark."""
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        for name in sorted(files):
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                yield os.path.join(dirpath, name)


def _read_file(path: str) -> tuple[int, list[dict[str, Any]]]:
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
    for path in _files(os.path.join(out, table)):
        rows.extend(_read_file(path)[1])
    return rows


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

    # -- paths ------------------------------------------------------------------------------

    def path(self, table: str, namespace: str, entity: str, name: str) -> str:
        return os.path.join(
            self.out, table, quote(namespace, safe=""), quote(entity, safe=""), name + ".parquet"
        )

    @property
    def totals_path(self) -> str:
        return os.path.join(self.out, "_state", "totals.json")

    # -- files ------------------------------------------------------------------------------

    def _write(self, path: str, table: str, rows: list[dict[str, Any]], batch: int | None) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = _arrow_schema(table, batch)
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
        have, rows = _read_file(path)
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

    # -- the batch --------------------------------------------------------------------------

    def partition_state(self, batch: int) -> dict[tuple[str, str, int], int]:
        """The last sent sequence number per partition before `batch` (for `new message`
        tests: sequence numbers grow in log order per partition, and a later copy of a
        message, such as a topic's per-subscription copies, repeats its number)."""
        state: dict[tuple[str, str, int], int] = {}
        for path in _files(os.path.join(self.out, "_state", "partition_messages")):
            have, rows = _read_file(path)
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

        def groups(rows: list[dict[str, Any]], name: Callable[[dict[str, Any]], str]) -> dict:
            out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
            for r in rows:
                touched.add((r["namespace"], r["entity"]))
                out.setdefault((r["namespace"], r["entity"], name(r)), []).append(r)
            return out

        def add(cols: tuple[str, ...]) -> Callable[[dict[str, Any], dict[str, Any]], None]:
            def combine(row: dict[str, Any], d: dict[str, Any]) -> None:
                for c in cols:
                    row[c] += d[c]

            return combine

        for (ns, ent, day), rows in groups(traffic, lambda r: _day(r["minute"])).items():
            self._merge(
                "traffic_by_minute",
                self.path("traffic_by_minute", ns, ent, day),
                ("namespace", "entity", "partition", "minute"),
                rows,
                add(TRAFFIC_COUNTS),
                batch,
            )
        for (ns, ent, _), rows in groups(reasons, lambda r: "all").items():
            self._merge(
                "deadletter_reasons",
                self.path("deadletter_reasons", ns, ent, "all"),
                ("namespace", "entity", "reason"),
                rows,
                add(("count",)),
                batch,
            )

        def session_combine(row: dict[str, Any], d: dict[str, Any]) -> None:
            row["messages"] += d["messages"]
            row["first_time"] = min(row["first_time"], d["first_time"])
            row["last_time"] = max(row["last_time"], d["last_time"])

        for (ns, ent, bucket), rows in groups(sessions, _session_bucket).items():
            self._merge(
                "sessions",
                self.path("sessions", ns, ent, bucket),
                ("namespace", "entity", "session_id"),
                rows,
                session_combine,
                batch,
            )

        for (ns, ent, _), rows in groups(latency, lambda r: "all").items():
            self._merge(
                "_state/latency_histogram",
                self.path("_state/latency_histogram", ns, ent, "all"),
                ("namespace", "entity", "partition", "latency_ms"),
                rows,
                add(("count",)),
                batch,
            )

        def remember(row: dict[str, Any]) -> None:  # the state before this batch, for replays
            row["max_seq_before"] = row["max_seq"]

        def partition_combine(row: dict[str, Any], d: dict[str, Any]) -> None:
            row["messages"] += d["messages"]
            if d["max_seq"] is not None and (
                row["max_seq"] is None or d["max_seq"] > row["max_seq"]
            ):
                row["max_seq"] = d["max_seq"]

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
        for (ns, ent, _), rows in groups(part_rows, lambda r: "all").items():
            self._merge(
                "_state/partition_messages",
                self.path("_state/partition_messages", ns, ent, "all"),
                ("namespace", "entity", "partition"),
                rows,
                partition_combine,
                batch,
                prepare=remember,
            )

        for ns, ent in sorted(touched):
            self._derive_latency(ns, ent)
            self._derive_skew(ns, ent, layout.get((ns.lower(), ent.lower())))
        self._add_total(batch, events)

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

    # -- derived tables ---------------------------------------------------------------------

    def _derive_latency(self, ns: str, ent: str) -> None:
        _, hist = _read_file(self.path("_state/latency_histogram", ns, ent, "all"))
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
        _, state = _read_file(self.path("_state/partition_messages", ns, ent, "all"))
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


# ================================================================================================
# One micro-batch's events -> deltas (pyarrow, in the driver)
# ================================================================================================

SENT_EVENTS = ("enqueued", "scheduled")
DLQ_SUFFIX = "/$deadletterqueue"
DELTA_COLUMNS = (
    "namespace",
    "entity",
    "partition",
    "timestamp",
    "event",
    "queue",
    "sequence_number",
    "session_id",
    "enqueued_time",
    "reason",
    "offset",
)
SCHEDULED_QUEUE = "$scheduled"  # a topic's scheduled messages (partitions/transitions.py)


def _micros(column: Any) -> Any:
    """A timestamp column (any unit, with or without zone: Spark writes UTC instants) as
    int64 microseconds since the epoch."""
    import pyarrow as pa

    t = column.type
    if pa.types.is_timestamp(t) and t.tz is not None:
        column = column.cast(pa.timestamp(t.unit))
    return column.cast(pa.timestamp("us")).cast(pa.int64())


def _utc(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _activation_copies(events: Any, rows: Any) -> Any:
    """Per event row: is it a copy made when a topic's scheduled message came due (it was
    counted as sent by its `scheduled` event)? Those copies get one new sequence number,
    logged right after the `activated` event of the topic's $scheduled sub-queue: the event
    at the next offset of that partition log carries it. ``rows``: namespace, entity,
    partition (int32) and row number of each event."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = ["namespace", "entity", "partition"]
    offset = events.column("offset").cast(pa.int64())
    seq = events.column("sequence_number")
    x = rows.append_column("offset", offset).append_column("seq", seq)
    activated = pc.and_(
        pc.equal(events.column("event"), "activated"),
        pc.equal(events.column("queue"), SCHEDULED_QUEUE),
    )
    after = x.filter(pc.fill_null(activated, False))
    at = after.schema.get_field_index("offset")
    after = after.set_column(at, "offset", pc.add(after.column("offset"), 1)).select(
        [*keys, "offset"]
    )
    enqueued = x.filter(pc.fill_null(pc.equal(events.column("event"), "enqueued"), False))
    copies = enqueued.join(after, [*keys, "offset"], join_type="inner").select([*keys, "seq"])
    if copies.num_rows == 0:
        return pa.array([False] * events.num_rows)
    unique = copies.group_by([*keys, "seq"]).aggregate([])
    unique = unique.append_column("copy", pa.array([True] * unique.num_rows))
    marked = x.join(unique, [*keys, "seq"], join_type="left outer").sort_by("row")
    return pc.fill_null(marked.column("copy"), False)


def batch_deltas(
    events: Any, prev_max_seq: Mapping[tuple[str, str, int], int]
) -> dict[str, list[dict[str, Any]]]:
    """The deltas TableStore.apply() merges, from one micro-batch's events (a pyarrow Table
    with DELTA_COLUMNS): traffic per minute, dead-letter reasons, the latency histogram,
    events/new messages/last sent number per partition, new messages and first/last time per
    session. Timestamps come back as aware UTC datetimes.

    A message counts (partition_skew, sessions) at its first `enqueued`/`scheduled` event:
    sequence numbers grow in log order per partition, so an event whose number is at most the
    partition's last one before this batch (`prev_max_seq`) is a copy already counted (a
    topic logs one `enqueued` per subscription, all with the message's number).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = ["namespace", "entity", "partition"]
    ts = _micros(events.column("timestamp"))
    enq = _micros(events.column("enqueued_time"))
    ev = events.column("event")
    seq = events.column("sequence_number")
    sent = pc.is_in(ev, value_set=pa.array(SENT_EVENTS))
    prev = pa.table(
        {
            "namespace": pa.array([k[0] for k in prev_max_seq], pa.string()),
            "entity": pa.array([k[1] for k in prev_max_seq], pa.string()),
            "partition": pa.array([k[2] for k in prev_max_seq], pa.int32()),
            "prev_max_seq": pa.array(list(prev_max_seq.values()), pa.int64()),
        }
    )
    t = pa.table(
        {
            "namespace": events.column("namespace"),
            "entity": events.column("entity"),
            "partition": events.column("partition").cast(pa.int32()),
            "row": pa.array(range(events.num_rows), pa.int64()),
        }
    )
    prev_col = t.join(prev, keys, join_type="left outer").sort_by("row").column("prev_max_seq")
    fresh = pc.and_kleene(sent, pc.or_kleene(pc.is_null(prev_col), pc.greater(seq, prev_col)))
    # sent: a fresh number that is not a topic's scheduled message fanned out at activation
    new_send = pc.and_(pc.fill_null(fresh, False), pc.invert(_activation_copies(events, t)))
    null64 = pa.scalar(None, pa.int64())
    done = pc.and_(
        pc.and_(
            pc.equal(ev, "completed"), pc.invert(pc.ends_with(events.column("queue"), DLQ_SUFFIX))
        ),
        pc.is_valid(enq),
    )
    done = pc.fill_null(done, False)
    cols = {
        "namespace": events.column("namespace"),
        "entity": events.column("entity"),
        "partition": t.column("partition"),
        "minute": pc.multiply(pc.divide(ts, 60_000_000), 60_000_000),
        "ts": ts,
        "event": ev,
        "reason": events.column("reason"),
        "session_id": events.column("session_id"),
        "latency_ms": pc.if_else(done, pc.divide(pc.subtract(ts, enq), 1000), null64),
        "done": done,
        "sent_seq": pc.if_else(pc.fill_null(sent, False), seq, null64),
        "new_seq": pc.if_else(pc.fill_null(fresh, False), seq, null64),
        "sent_new": pc.if_else(new_send, seq, null64),
        **{f"is_{n}": pc.cast(pc.equal(ev, n), pa.int64()) for n in ("scheduled", *TRAFFIC_EVENTS)},
    }
    x = pa.table(cols)
    distinct = pc.CountOptions(mode="only_valid")

    def rows(table: Any) -> list[dict[str, Any]]:
        return table.to_pylist()

    counted = pa.array(["scheduled", *TRAFFIC_EVENTS])
    traffic = x.filter(pc.is_in(x.column("event"), value_set=counted))
    # sent: the distinct new sequence numbers (a topic's copies share the message's number)
    traffic = traffic.group_by([*keys, "minute"]).aggregate(
        [("sent_new", "count_distinct", distinct)]
        + [(f"is_{n}", "sum") for n in ("scheduled", *TRAFFIC_EVENTS)]
    )
    out_traffic = [
        {
            **{k: r[k] for k in keys},
            "minute": _utc(r["minute"]),
            "sent": r["sent_new_count_distinct"],
            **{n: r[f"is_{n}_sum"] for n in ("scheduled", *TRAFFIC_EVENTS)},
        }
        for r in rows(traffic)
    ]
    reasons = (
        x.filter(pc.equal(x.column("event"), "deadlettered"))
        .group_by(["namespace", "entity", "reason"])
        .aggregate([("event", "count")])
    )
    out_reasons = [
        {
            "namespace": r["namespace"],
            "entity": r["entity"],
            "reason": r["reason"],
            "count": r["event_count"],
        }
        for r in rows(reasons)
    ]
    lat = x.filter(x.column("done")).group_by([*keys, "latency_ms"]).aggregate([("event", "count")])
    out_latency = [
        {**{k: r[k] for k in keys}, "latency_ms": r["latency_ms"], "count": r["event_count"]}
        for r in rows(lat)
    ]
    parts = x.group_by(keys).aggregate(
        [("event", "count"), ("new_seq", "count_distinct", distinct), ("sent_seq", "max")]
    )
    out_parts = [
        {
            **{k: r[k] for k in keys},
            "events": r["event_count"],
            "new_messages": r["new_seq_count_distinct"],
            "max_seq": r["sent_seq_max"],
        }
        for r in rows(parts)
    ]
    sess = (
        x.filter(pc.is_valid(x.column("session_id")))
        .group_by(["namespace", "entity", "session_id"])
        .aggregate([("new_seq", "count_distinct", distinct), ("ts", "min"), ("ts", "max")])
    )
    out_sessions = [
        {
            "namespace": r["namespace"],
            "entity": r["entity"],
            "session_id": r["session_id"],
            "messages": r["new_seq_count_distinct"],
            "first_time": _utc(r["ts_min"]),
            "last_time": _utc(r["ts_max"]),
        }
        for r in rows(sess)
    ]
    return {
        "traffic": out_traffic,
        "reasons": out_reasons,
        "latency": out_latency,
        "partitions": out_parts,
        "sessions": out_sessions,
    }
