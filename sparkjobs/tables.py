"""Spark aggregation of one micro-batch's events (EVENTS_SCHEMA) into the tables' deltas.

The job (sparkjobs/report.py) reduces each batch to small deltas here, in one Spark job (one
scan, one shuffle: GROUPING SETS), and merges them into the tables on disk
(sbemu.reporttables, which documents every table and its columns). Deltas:

traffic      (namespace, entity, partition, minute) -> count per TRAFFIC_EVENTS, as logged: a
             topic logs one `enqueued` per subscription copy; a scheduled message logs
             `scheduled` then `activated` (no column), not `enqueued`.
reasons      (namespace, entity, reason) -> `deadlettered` events (reason null when the
             client gave none; MaxDeliveryCountExceeded, TTLExpiredException).
latency      (namespace, entity, partition, latency_ms) -> completions outside dead-letter
             queues (enqueue to complete, milliseconds): the exact-percentile histogram.
partitions   (namespace, entity, partition) -> events, new messages, last sent number.
sessions     (namespace, entity, session_id) -> new messages, first/last event time.

A message counts (partition_skew, sessions) at its first `enqueued`/`scheduled` event:
sequence numbers grow in log order per partition, so an event whose number is at most the
partition's last one before this batch (`prev_max_seq`) is a copy already counted (a topic
logs one `enqueued` per subscription, all with the message's number).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from sbemu.reporttables import TABLES, TRAFFIC_EVENTS

__all__ = ["DLQ_SUFFIX", "SENT_EVENTS", "TABLES", "TRAFFIC_EVENTS", "batch_deltas"]

SENT_EVENTS = ("enqueued", "scheduled")
DLQ_SUFFIX = "/$deadletterqueue"
GROUP_COLUMNS = ("namespace", "entity", "partition", "minute", "reason", "latency_ms",
                 "session_id")
SETS = {
    "traffic": ("namespace", "entity", "partition", "minute"),
    "reasons": ("namespace", "entity", "reason"),
    "latency": ("namespace", "entity", "partition", "latency_ms"),
    "partitions": ("namespace", "entity", "partition"),
    "sessions": ("namespace", "entity", "session_id"),
}
PREV_SCHEMA = StructType(
    [
        StructField("namespace", StringType()),
        StructField("entity", StringType()),
        StructField("partition", IntegerType()),
        StructField("prev_max_seq", LongType()),
    ]
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _grouping_id(columns: tuple[str, ...]) -> int:
    """Spark's grouping_id() of a set: one bit per GROUP_COLUMNS entry, 1 = not grouped."""
    gid = 0
    for name in GROUP_COLUMNS:
        gid = (gid << 1) | (0 if name in columns else 1)
    return gid


def batch_deltas(
    spark: SparkSession, events: DataFrame, prev_max_seq: dict[tuple[str, str, int], int]
) -> dict[str, list[dict[str, Any]]]:
    """Every delta of one micro-batch (see the module docstring), as lists of dict rows;
    timestamps as aware UTC datetimes."""
    keys = ["namespace", "entity", "partition"]
    prev = spark.createDataFrame(
        [(ns, ent, part, seq) for (ns, ent, part), seq in prev_max_seq.items()], PREV_SCHEMA
    )
    e = F.col("event")
    sent = e.isin(*SENT_EVENTS)
    seq = F.col("sequence_number")
    done = (e == "completed") & ~F.col("queue").endswith(DLQ_SUFFIX) & F.col(
        "enqueued_time"
    ).isNotNull()
    ev = events.join(F.broadcast(prev), keys, "left").select(
        *keys,
        F.date_trunc("minute", "timestamp").alias("minute"),
        F.when(e == "deadlettered", F.col("reason")).alias("reason"),
        F.when(done, F.unix_millis("timestamp") - F.unix_millis("enqueued_time")).alias(
            "latency_ms"
        ),
        "session_id",
        "event",
        "timestamp",
        F.when(sent, seq).alias("sent_seq"),
        F.when(
            sent & (F.col("prev_max_seq").isNull() | (seq > F.col("prev_max_seq"))), seq
        ).alias("new_seq"),
        done.alias("done"),
    )
    grouped = ev.groupingSets([list(cols) for cols in SETS.values()], *GROUP_COLUMNS).agg(
        F.grouping_id().alias("gid"),
        F.count(F.lit(1)).alias("events"),
        *[F.count_if(F.col("event") == name).alias(name) for name in TRAFFIC_EVENTS],
        F.count_if(F.col("done")).alias("completions"),
        F.count_distinct("new_seq").alias("new_messages"),
        F.max("sent_seq").alias("max_seq"),
        F.unix_micros(F.min("timestamp")).alias("first_us"),
        F.unix_micros(F.max("timestamp")).alias("last_us"),
    ).withColumn("minute_us", F.unix_micros("minute"))
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in SETS}
    by_gid = {_grouping_id(cols): name for name, cols in SETS.items()}
    for row in grouped.collect():
        r = row.asDict()
        name = by_gid[r["gid"]]
        base = {c: r[c] for c in SETS[name]}
        if name == "traffic":
            if not any(r[n] for n in TRAFFIC_EVENTS):
                continue
            base["minute"] = _EPOCH + timedelta(microseconds=r["minute_us"])
            base.update({n: r[n] for n in TRAFFIC_EVENTS})
        elif name == "reasons":
            if r["deadlettered"] == 0:
                continue
            base["count"] = r["deadlettered"]
        elif name == "latency":
            if r["latency_ms"] is None:
                continue
            base["count"] = r["completions"]
        elif name == "partitions":
            base.update(events=r["events"], new_messages=r["new_messages"], max_seq=r["max_seq"])
        else:  # sessions
            if r["session_id"] is None:
                continue
            base.update(messages=r["new_messages"],
                        first_time=_EPOCH + timedelta(microseconds=r["first_us"]),
                        last_time=_EPOCH + timedelta(microseconds=r["last_us"]))
        out[name].append(base)
    return {"traffic": out["traffic"], "reasons": out["reasons"], "latency": out["latency"],
            "partitions": out["partitions"], "sessions": out["sessions"]}
