"""The dashboard snapshot's rows: one entity's sub-queues with counts and sizes per partition
(counts walk the partitions, so the dashboard reuses the snapshot while it is fresh)."""

from __future__ import annotations

from typing import Any

from ..partitions import DLQ_SUFFIX, MAIN, SCHEDULED_QUEUE, TRANSFER_DLQ_SUFFIX, Entity, Router
from .rates import PartitionRates


def entity_rows(router: Router, rates: PartitionRates, entity: Entity) -> list[dict[str, Any]]:
    """The snapshot's rows of one entity: per sub-queue its counts and size, per partition and
    in sum, with the partitions' health and rates."""
    spec = entity.spec
    status = router.partition_status(entity)
    health = {p["partition"]: p for p in status["partitions"]}
    bases: list[tuple[str, str, str | None]] = []  # (kind, sub-queue, subscription name)
    if spec.kind == "queue":
        bases.append(("queue", MAIN, None))
    elif entity.subscriptions is not None:
        for sub in entity.subscriptions.by_name.values():
            bases.append(("subscription", sub.queue, sub.name))
    per_base: list[dict[str, Any]] = []
    ns_key, name_key = spec.namespace.lower(), entity.name.lower()
    part_rates = {
        b.partition_id: rates.partition(ns_key, name_key, b.partition_id) for b in entity.partitions
    }
    entity_rates = rates.entity(ns_key, name_key, part_rates)
    for kind, queue, sub_name in bases:
        parts = []
        for broker in entity.partitions:
            counts = broker.counts(queue)
            dlq = broker.counts(queue + DLQ_SUFFIX)
            tdlq = broker.counts(queue + TRANSFER_DLQ_SUFFIX)
            size = sum(
                broker.stored_bytes(q)
                for q in (queue, queue + DLQ_SUFFIX, queue + TRANSFER_DLQ_SUFFIX)
            )
            h = health[broker.partition_id]
            parts.append(
                {
                    "id": broker.partition_id,
                    "active": counts["active"],
                    "deferred": counts["deferred"],
                    "scheduled": counts["scheduled"],
                    "deadletter": sum(dlq.values()),
                    "transferdeadletter": sum(tdlq.values()),
                    "size": size,
                    "online": h["online"],
                    "accepting": h["accepting"],
                    "reason": h["reason"],
                    # the partition's, over all its sub-queues: a topic's for a subscription
                    "rates": part_rates[broker.partition_id],
                }
            )
        status_of = (
            entity.settings.status if sub_name is None else (entity.receiver_settings(queue).status)
        )
        per_base.append(
            {
                "namespace": spec.namespace,
                "entity": entity.name,
                "name": entity.name
                if sub_name is None
                else f"{entity.name}/Subscriptions/{sub_name}",
                "subscription": sub_name,
                "kind": kind,
                "partitioned": entity.partitioned,
                "status": status_of.value,
                "availability": status["status"],
                # incoming/outgoing msg/s of the queue, or of a subscription's topic
                "rates": entity_rates,
                "requires_session": bool(entity.views[queue].requires_session),
                "counts": _sum_counts(parts),
                "partitions": parts,
                "size_bytes": sum(p["size"] for p in parts),
                "consumers": _consumers(entity, queue),
            }
        )
    rows = list(per_base)
    if spec.kind == "topic":
        subs = [r for r in per_base]
        parts = []
        for broker in entity.partitions:
            h = health[broker.partition_id]
            part = {
                "id": broker.partition_id,
                "online": h["online"],
                "accepting": h["accepting"],
                "reason": h["reason"],
                "rates": part_rates[broker.partition_id],
            }
            for field in (
                "active",
                "deferred",
                "scheduled",
                "deadletter",
                "transferdeadletter",
                "size",
            ):
                part[field] = sum(r["partitions"][broker.partition_id][field] for r in subs)
            # scheduled messages wait in the topic's own sub-queue until due
            if broker.has_queue(SCHEDULED_QUEUE):
                part["scheduled"] += broker.counts(SCHEDULED_QUEUE)["scheduled"]
            parts.append(part)
        rows.insert(
            0,
            {
                "namespace": spec.namespace,
                "entity": entity.name,
                "name": entity.name,
                "subscription": None,
                "kind": "topic",
                "partitioned": entity.partitioned,
                "status": entity.settings.status.value,
                "availability": status["status"],
                "rates": entity_rates,
                "requires_session": False,
                "subscription_count": len(subs),
                "consumers": sum(r["consumers"] for r in subs),
                "counts": _sum_counts(parts),
                "partitions": parts,
                "size_bytes": sum(p["size"] for p in parts),
            },
        )
    return rows


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
