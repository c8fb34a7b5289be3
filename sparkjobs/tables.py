"""Spark aggregations of one micro-batch's events (EVENTS_SCHEMA), whatever their source.

The job (sparkjobs/report.py) reduces each batch to small deltas with these and merges them
into the tables on disk (sbemu.reporttables, which documents every table and its columns).
Every table carries `namespace` before `entity` (two namespaces may reuse an entity name).

traffic_by_minute  events per UTC minute, as logged: a topic logs one `enqueued` per
                   subscription copy; a scheduled message logs `scheduled` then `activated`
                   (no column here), not `enqueued`.
deadletter_reasons `deadlettered` events by reason (null when the client gave none;
                   MaxDeliveryCountExceeded, TTLExpiredException).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sbemu.reporttables import TABLES, TRAFFIC_EVENTS

__all__ = ["DLQ_SUFFIX", "SENT_EVENTS", "TABLES", "TRAFFIC_EVENTS", "deadletter_reasons",
           "traffic_by_minute"]

SENT_EVENTS = ("enqueued", "scheduled")
DLQ_SUFFIX = "/$deadletterqueue"


def traffic_by_minute(events: DataFrame) -> DataFrame:
    """(namespace, entity, partition, minute, <one count per TRAFFIC_EVENTS>)."""
    e = F.col("event")
    return (
        events.where(e.isin(*TRAFFIC_EVENTS))
        .groupBy(
            "namespace", "entity", "partition", F.date_trunc("minute", "timestamp").alias("minute")
        )
        .agg(*[F.count_if(e == name).alias(name) for name in TRAFFIC_EVENTS])
    )


def deadletter_reasons(events: DataFrame) -> DataFrame:
    """(namespace, entity, reason, count)."""
    return (
        events.where(F.col("event") == "deadlettered")
        .groupBy("namespace", "entity", "reason")
        .agg(F.count(F.lit(1)).alias("count"))
    )
