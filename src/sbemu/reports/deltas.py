"""One micro-batch's events reduced to the deltas TableStore merges (pyarrow, in the driver):
which events count as sends (a topic's copies and a scheduled message's activation copies
do not count twice), their minute, latency, dead-letter reason, partition and session."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .schema import TRAFFIC_EVENTS

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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


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
    x = _event_columns(events, prev_max_seq)
    return {
        "traffic": _traffic(x),
        "reasons": _reasons(x),
        "latency": _latency(x),
        "partitions": _partitions(x),
        "sessions": _sessions(x),
    }


def _event_columns(events: Any, prev_max_seq: Mapping[tuple[str, str, int], int]) -> Any:
    """One row per event with what the deltas group: its minute, latency, and the sequence
    numbers that count as sent, new, and new sends (see batch_deltas)."""
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
    return pa.table(cols)


_KEYS = ["namespace", "entity", "partition"]
_DISTINCT_VALID = "only_valid"  # count_distinct over the non-null numbers


def _traffic(x: Any) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    counted = pa.array(["scheduled", *TRAFFIC_EVENTS])
    traffic = x.filter(pc.is_in(x.column("event"), value_set=counted))
    # sent: the distinct new sequence numbers (a topic's copies share the message's number)
    traffic = traffic.group_by([*_KEYS, "minute"]).aggregate(
        [("sent_new", "count_distinct", pc.CountOptions(mode=_DISTINCT_VALID))]
        + [(f"is_{n}", "sum") for n in ("scheduled", *TRAFFIC_EVENTS)]
    )
    return [
        {
            **{k: r[k] for k in _KEYS},
            "minute": _utc(r["minute"]),
            "sent": r["sent_new_count_distinct"],
            **{n: r[f"is_{n}_sum"] for n in ("scheduled", *TRAFFIC_EVENTS)},
        }
        for r in traffic.to_pylist()
    ]


def _reasons(x: Any) -> list[dict[str, Any]]:
    import pyarrow.compute as pc

    reasons = (
        x.filter(pc.equal(x.column("event"), "deadlettered"))
        .group_by(["namespace", "entity", "reason"])
        .aggregate([("event", "count")])
    )
    return [
        {
            "namespace": r["namespace"],
            "entity": r["entity"],
            "reason": r["reason"],
            "count": r["event_count"],
        }
        for r in reasons.to_pylist()
    ]


def _latency(x: Any) -> list[dict[str, Any]]:
    lat = (
        x.filter(x.column("done")).group_by([*_KEYS, "latency_ms"]).aggregate([("event", "count")])
    )
    return [
        {**{k: r[k] for k in _KEYS}, "latency_ms": r["latency_ms"], "count": r["event_count"]}
        for r in lat.to_pylist()
    ]


def _partitions(x: Any) -> list[dict[str, Any]]:
    import pyarrow.compute as pc

    distinct = pc.CountOptions(mode=_DISTINCT_VALID)
    parts = x.group_by(_KEYS).aggregate(
        [("event", "count"), ("new_seq", "count_distinct", distinct), ("sent_seq", "max")]
    )
    return [
        {
            **{k: r[k] for k in _KEYS},
            "events": r["event_count"],
            "new_messages": r["new_seq_count_distinct"],
            "max_seq": r["sent_seq_max"],
        }
        for r in parts.to_pylist()
    ]


def _sessions(x: Any) -> list[dict[str, Any]]:
    import pyarrow.compute as pc

    distinct = pc.CountOptions(mode=_DISTINCT_VALID)
    sess = (
        x.filter(pc.is_valid(x.column("session_id")))
        .group_by(["namespace", "entity", "session_id"])
        .aggregate([("new_seq", "count_distinct", distinct), ("ts", "min"), ("ts", "max")])
    )
    return [
        {
            "namespace": r["namespace"],
            "entity": r["entity"],
            "session_id": r["session_id"],
            "messages": r["new_seq_count_distinct"],
            "first_time": _utc(r["ts_min"]),
            "last_time": _utc(r["ts_max"]),
        }
        for r in sess.to_pylist()
    ]
