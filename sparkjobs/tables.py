"""The reporting tables, computed from an event DataFrame (EVENTS_SCHEMA), whatever its source.

Every table carries `namespace` before `entity` (two namespaces may reuse an entity name).

traffic_by_minute  (namespace, entity, partition, minute, enqueued, delivered, completed,
                    abandoned, deadlettered, expired): events per UTC minute, as logged:
                    a topic logs one `enqueued` per subscription copy; a scheduled message
                    logs `scheduled` then `activated` (no column here), not `enqueued`.
deadletter_reasons (namespace, entity, reason, count): `deadlettered` events by reason (null
                    when the client gave none; MaxDeliveryCountExceeded, TTLExpiredException).
latency            (namespace, entity, partition, completed, p50_ms, p95_ms, p99_ms, max_ms):
                    enqueue-to-complete time of messages completed outside dead-letter queues;
                    exact percentiles with linear interpolation (Spark's `percentile`),
                    rounded to 3 decimals.
partition_skew     (namespace, entity, partitions, messages, min_per_partition,
                    max_per_partition, mean_per_partition, max_over_mean, messages_per_partition):
                    messages sent (distinct sequence numbers of `enqueued`/`scheduled` events)
                    per partition; with a layout (entity.json) partitions that got nothing
                    count as 0; messages_per_partition is ordered by partition id.
sessions           (namespace, entity, session_id, messages, first_time, last_time): messages
                    sent per session and the first/last event time of any of its messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

TRAFFIC_EVENTS = ("enqueued", "delivered", "completed", "abandoned", "deadlettered", "expired")
SENT_EVENTS = ("enqueued", "scheduled")
DLQ_SUFFIX = "/$deadletterqueue"
TABLES = ("traffic_by_minute", "deadletter_reasons", "latency", "partition_skew", "sessions")

LAYOUT_SCHEMA = StructType(
    [
        StructField("ns_key", StringType()),
        StructField("entity_key", StringType()),
        StructField("partition_count", IntegerType()),
    ]
)


def layout_frame(spark: SparkSession, layout: Iterable[Mapping[str, Any]]) -> DataFrame:
    """A DataFrame of entity layouts (reporting.read_layout() items)."""
    rows = [(d["ns_key"], d["entity_key"], int(d["partition_count"])) for d in layout]
    return spark.createDataFrame(rows, LAYOUT_SCHEMA)


def traffic_by_minute(events: DataFrame) -> DataFrame:
    e = F.col("event")
    return (
        events.where(e.isin(*TRAFFIC_EVENTS))
        .groupBy(
            "namespace", "entity", "partition", F.date_trunc("minute", "timestamp").alias("minute")
        )
        .agg(*[F.count_if(e == name).alias(name) for name in TRAFFIC_EVENTS])
    )


def deadletter_reasons(events: DataFrame) -> DataFrame:
    return (
        events.where(F.col("event") == "deadlettered")
        .groupBy("namespace", "entity", "reason")
        .agg(F.count(F.lit(1)).alias("count"))
    )


def latency(events: DataFrame) -> DataFrame:
    done = events.where(
        (F.col("event") == "completed")
        & ~F.col("queue").endswith(DLQ_SUFFIX)
        & F.col("enqueued_time").isNotNull()
    ).withColumn("latency_ms", F.unix_millis("timestamp") - F.unix_millis("enqueued_time"))
    p = F.percentile("latency_ms", [0.5, 0.95, 0.99])
    return (
        done.groupBy("namespace", "entity", "partition")
        .agg(F.count(F.lit(1)).alias("completed"), p.alias("p"), F.max("latency_ms").alias("max_ms"))
        .select(
            "namespace",
            "entity",
            "partition",
            "completed",
            F.round(F.col("p")[0], 3).alias("p50_ms"),
            F.round(F.col("p")[1], 3).alias("p95_ms"),
            F.round(F.col("p")[2], 3).alias("p99_ms"),
            "max_ms",
        )
    )


def messages_per_partition(events: DataFrame, layout: DataFrame | None = None) -> DataFrame:
    """(namespace, entity, partition, messages), zero rows included when a layout is given."""
    keys = ["namespace", "entity", "partition"]
    sent = (
        events.where(F.col("event").isin(*SENT_EVENTS))
        .groupBy(*keys)
        .agg(F.count_distinct("sequence_number").alias("messages"))
    )
    parts = events.select(*keys).distinct()
    if layout is not None:
        entities = events.select("namespace", "entity").distinct()
        declared = entities.join(
            layout,
            (F.lower(entities["namespace"]) == layout["ns_key"])
            & (F.lower(entities["entity"]) == layout["entity_key"]),
        ).select(
            "namespace",
            "entity",
            F.explode(F.sequence(F.lit(0), F.col("partition_count") - 1)).alias("partition"),
        )
        parts = parts.unionByName(declared).distinct()
    return parts.join(sent, keys, "left").fillna(0, ["messages"])


def partition_skew(events: DataFrame, layout: DataFrame | None = None) -> DataFrame:
    per = messages_per_partition(events, layout)
    mean = F.avg("messages")
    return (
        per.groupBy("namespace", "entity")
        .agg(
            F.count(F.lit(1)).alias("partitions"),
            F.sum("messages").alias("messages"),
            F.min("messages").alias("min_per_partition"),
            F.max("messages").alias("max_per_partition"),
            mean.alias("mean_per_partition"),
            F.sort_array(F.collect_list(F.struct("partition", "messages"))).alias("_pp"),
        )
        .withColumn(
            "max_over_mean",
            F.when(
                F.col("mean_per_partition") > 0,
                F.col("max_per_partition") / F.col("mean_per_partition"),
            ),
        )
        .withColumn("messages_per_partition", F.transform("_pp", lambda s: s["messages"]))
        .drop("_pp")
    )


def sessions(events: DataFrame) -> DataFrame:
    sent = F.when(F.col("event").isin(*SENT_EVENTS), F.col("sequence_number"))
    return (
        events.where(F.col("session_id").isNotNull())
        .groupBy("namespace", "entity", "session_id")
        .agg(
            F.count_distinct(sent).alias("messages"),
            F.min("timestamp").alias("first_time"),
            F.max("timestamp").alias("last_time"),
        )
    )


def build_tables(events: DataFrame, layout: DataFrame | None = None) -> dict[str, DataFrame]:
    """Every aggregate table, by name (the raw `events` table is the input itself)."""
    return {
        "traffic_by_minute": traffic_by_minute(events),
        "deadletter_reasons": deadletter_reasons(events),
        "latency": latency(events),
        "partition_skew": partition_skew(events, layout),
        "sessions": sessions(events),
    }


def summary(tables: Mapping[str, DataFrame]) -> DataFrame:
    """One row per entity for the console, from the (small) aggregate tables.

    Event counts are summed over minutes and partitions; `p95_ms` is the worst partition's
    p95 (exact for one-partition entities); `sessions` counts sessions seen.
    """
    keys = ["namespace", "entity"]
    counts = tables["traffic_by_minute"].groupBy(*keys).agg(
        *[F.sum(name).alias(name) for name in TRAFFIC_EVENTS]
    )
    lat = tables["latency"].groupBy(*keys).agg(F.max("p95_ms").alias("p95_ms"))
    sess = tables["sessions"].groupBy(*keys).agg(F.count(F.lit(1)).alias("sessions"))
    skew = tables["partition_skew"].select(*keys, "partitions", "max_over_mean")
    return (
        skew.join(counts, keys, "full")
        .join(lat, keys, "left")
        .join(sess, keys, "left")
        .fillna(0, [*TRAFFIC_EVENTS, "sessions"])
        .orderBy(*keys)
    )
