"""The dashboard snapshot's rows: one entity's sub-queues with counts and sizes per partition
(counts walk the partitions, so the dashboard reuses the snapshot while it is fresh)."""

from __future__ import annotations

from typing import Any

from ..partitions import DLQ_SUFFIX, MAIN, SCHEDULED_QUEUE, TRANSFER_DLQ_SUFFIX, Entity, Router
from .rates import PartitionRates, Rate


def entity_rows(router: Router, rates: PartitionRates, entity: Entity) -> list[dict[str, Any]]:
    """The snapshot's rows of one entity: per sub-queue its counts and size, per partition and
    in sum, with the partitions' health and rates (a topic's own row first)."""
    spec = entity.spec
    status = router.partition_status(entity)
    health = {p["partition"]: p for p in status["partitions"]}
    ns_key, name_key = spec.namespace.lower(), entity.name.lower()
    part_rates = {
        b.partition_id: rates.partition(ns_key, name_key, b.partition_id) for b in entity.partitions
    }
    shared = {
        "namespace": spec.namespace,
        "entity": entity.name,
        "partitioned": entity.partitioned,
        "availability": status["status"],
        # incoming/outgoing msg/s of the queue, or of a subscription's topic
        "rates": rates.entity(ns_key, name_key, part_rates),
    }
    if spec.kind == "queue":
        return [_receiver_row(entity, MAIN, None, health, part_rates, shared)]
    subs = [
        _receiver_row(entity, sub.queue, sub.name, health, part_rates, shared)
        for sub in (entity.subscriptions.by_name.values() if entity.subscriptions else ())
    ]
    return [_topic_row(entity, subs, health, part_rates, shared), *subs]


def _receiver_row(
    entity: Entity,
    queue: str,
    sub_name: str | None,
    health: dict[int, dict[str, Any]],
    part_rates: dict[int, Rate],
    shared: dict[str, Any],
) -> dict[str, Any]:
    """A queue's or a subscription's row: its counts and size per partition and in sum."""
    parts = []
    for broker in entity.partitions:
        counts = broker.counts(queue)
        dlq = broker.counts(queue + DLQ_SUFFIX)
        tdlq = broker.counts(queue + TRANSFER_DLQ_SUFFIX)
        size = sum(
            broker.stored_bytes(q) for q in (queue, queue + DLQ_SUFFIX, queue + TRANSFER_DLQ_SUFFIX)
        )
        parts.append(
            {
                **_partition_health(broker.partition_id, health, part_rates),
                "active": counts["active"],
                "deferred": counts["deferred"],
                "scheduled": counts["scheduled"],
                "deadletter": sum(dlq.values()),
                "transferdeadletter": sum(tdlq.values()),
                "size": size,
            }
        )
    status_of = (
        entity.settings.status if sub_name is None else entity.receiver_settings(queue).status
    )
    return {
        **shared,
        "name": entity.name if sub_name is None else f"{entity.name}/Subscriptions/{sub_name}",
        "subscription": sub_name,
        "kind": "queue" if sub_name is None else "subscription",
        "status": status_of.value,
        "requires_session": bool(entity.views[queue].requires_session),
        "counts": _sum_counts(parts),
        "partitions": parts,
        "size_bytes": sum(p["size"] for p in parts),
        "consumers": _consumers(entity, queue),
    }


def _topic_row(
    entity: Entity,
    subs: list[dict[str, Any]],
    health: dict[int, dict[str, Any]],
    part_rates: dict[int, Rate],
    shared: dict[str, Any],
) -> dict[str, Any]:
    """A topic's row: its subscriptions' counts summed per partition, plus the scheduled
    messages that wait in the topic's own sub-queue until due."""
    parts = []
    for broker in entity.partitions:
        part = _partition_health(broker.partition_id, health, part_rates)
        for field in (
            "active",
            "deferred",
            "scheduled",
            "deadletter",
            "transferdeadletter",
            "size",
        ):
            part[field] = sum(r["partitions"][broker.partition_id][field] for r in subs)
        if broker.has_queue(SCHEDULED_QUEUE):
            part["scheduled"] += broker.counts(SCHEDULED_QUEUE)["scheduled"]
        parts.append(part)
    return {
        **shared,
        "name": entity.name,
        "subscription": None,
        "kind": "topic",
        "status": entity.settings.status.value,
        "requires_session": False,
        "subscription_count": len(subs),
        "consumers": sum(r["consumers"] for r in subs),
        "counts": _sum_counts(parts),
        "partitions": parts,
        "size_bytes": sum(p["size"] for p in parts),
    }


def _partition_health(
    pid: int, health: dict[int, dict[str, Any]], part_rates: dict[int, Rate]
) -> dict[str, Any]:
    h = health[pid]
    return {
        "id": pid,
        "online": h["online"],
        "accepting": h["accepting"],
        "reason": h["reason"],
        # the partition's, over all its sub-queues: a topic's for a subscription
        "rates": part_rates[pid],
    }


def _consumers(entity: Entity, queue: str) -> int:
    """Receive links attached to a sub-queue and its dead-letter queues (sessions included)."""
    views = entity.views
    return sum(
        len(views[q].consumers)
        for q in (queue, queue + DLQ_SUFFIX, queue + TRANSFER_DLQ_SUFFIX)
        if q in views
    )


def _sum_counts(parts: list[dict[str, Any]]) -> dict[str, int]:
    fields = ("active", "deferred", "scheduled", "deadletter", "transferdeadletter")
    out = {f: sum(p[f] for p in parts) for f in fields}
    out["transfer"] = 0  # no auto-forwarding yet: nothing waits for transfer
    return out
