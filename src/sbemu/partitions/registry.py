"""The admin operations on an entity: what a management request changes in its partitions.

The router finds the entity and keeps its own books (links to detach, forwarding, idle
tracking); what the operation does to the entity, its partitions and its spec is here:
status [P17, P18], new settings (partitioning never changes [P4]), subscriptions created,
updated and deleted at runtime, purges. Every operation that changes partitions first checks
that all of them are in service [P17].
"""

from __future__ import annotations

import dataclasses

from ..completions import Done, join_completions
from ..errors import EntityAlreadyExists, InvalidOperation, QuotaExceeded, ServerBusy
from .dispatch import EntityView
from .entity import Entity
from .forwarding import transfer_counts
from .specs import MIB, EntitySpec
from .subqueue import SubQueueSettings
from .subscriptions import Subscriptions, SubscriptionSpec, subscription_queue

MAX_SUBSCRIPTIONS_PER_TOPIC = 2_000  # Azure's quota per topic [P19 limits page]


def partition_status(entity: Entity) -> dict:
    """Health of an entity and each partition [P18: Limited when any is unhealthy]."""
    parts = [
        {
            "partition": b.partition_id,
            "state": b.health.state.value,  # online | full | offline | faulted
            "online": b.health.serving,
            # an offline partition takes no send, whatever room it has
            "accepting": b.health.serving and b.health.accepting,
            "reason": b.health.describe,
        }
        for b in entity.partitions
    ]
    healthy = all(b.health.serving and b.health.accepting for b in entity.partitions)
    return {
        "namespace": entity.spec.namespace,
        "entity": entity.name,
        "status": "Available" if healthy else "Limited",
        "partitions": parts,
        "transfer": transfer_counts(entity),
    }


def check_healthy(entity: Entity) -> None:
    """[P17] management operations fail while a partition of the entity is unhealthy."""
    bad = [b.partition_id for b in entity.partitions if not b.health.serving]
    if bad:
        raise ServerBusy(
            f"The operation on '{entity.name}' cannot be performed now: partition(s) "
            f"{', '.join(map(str, bad))} are unavailable. Retry once they are back."
        )


def update_entity(entity: Entity, spec: EntitySpec) -> None:
    """New settings for an existing entity; partitioning can never change [P4]. Lock
    duration, delivery count, TTL and dead-lettering apply from the next lock or delivery."""
    old = entity.spec
    if spec.partitioned != old.partitioned or spec.partition_count != old.partition_count:
        raise InvalidOperation(
            f"Partitioning cannot be changed for '{spec.name}': it was created with "
            f"EnablePartitioning={str(old.partitioned).lower()} and that can never change "
            "on an existing entity."
        )
    for broker in entity.partitions:
        broker.health.max_bytes = spec.max_size_mb * MIB  # a new MaxSizeInMegabytes applies at once
        for name, settings in spec.subqueues.items():
            if name in broker.queues:
                broker.update_queue_settings(name, settings)
    entity.spec = spec


def add_subscription(
    namespace: str,
    topic: str,
    entity: Entity,
    subs: Subscriptions,
    spec: SubscriptionSpec,
    subqueues: dict[str, SubQueueSettings],
) -> None:
    """A subscription created at runtime: its sub-queues on every partition, its rules
    (`namespace` and `topic` as the request named them, for the errors)."""
    if spec.name.lower() in subs.by_name:
        raise EntityAlreadyExists(
            f"The messaging entity '{namespace}:{topic}|{spec.name}' already exists."
        )
    if len(subs.by_name) >= MAX_SUBSCRIPTIONS_PER_TOPIC:
        raise QuotaExceeded(
            f"The maximum number of subscriptions ({MAX_SUBSCRIPTIONS_PER_TOPIC}) for the "
            f"topic '{topic}' has been reached."
        )
    subs.add_subscription(spec)
    for broker in entity.partitions:
        for name, settings in subqueues.items():
            broker.add_queue(name, settings)
    for name in subqueues:
        entity.views.setdefault(name, EntityView(entity, name))
    entity.spec = dataclasses.replace(
        entity.spec,
        subqueues={**entity.spec.subqueues, **subqueues},
        subscriptions=(*entity.spec.subscriptions, spec),
    )


def update_subscription(
    entity: Entity,
    subs: Subscriptions,
    spec: SubscriptionSpec,
    subqueues: dict[str, SubQueueSettings],
) -> None:
    """New delivery settings of a subscription (from the next lock or delivery)."""
    sub = subs.subscription(spec.name)
    sub.dead_letter_on_filter_exceptions = spec.dead_letter_on_filter_exceptions
    for broker in entity.partitions:
        for name, settings in subqueues.items():
            broker.update_queue_settings(name, settings)
    entity.spec = dataclasses.replace(
        entity.spec,
        subqueues={**entity.spec.subqueues, **subqueues},
        subscriptions=tuple(
            spec if s.name.lower() == spec.name.lower() else s for s in entity.spec.subscriptions
        ),
    )


def remove_subscription(
    entity: Entity, subs: Subscriptions, name: str, now_ms: int, done: Done
) -> None:
    """Delete a subscription's sub-queues (their messages, logged as purged) on every
    partition and its rules; `done` after the commits. Its views are the router's."""
    prefix = subscription_queue(name)
    gone = [q for q in entity.spec.subqueues if q == prefix or q.startswith(prefix + "/")]
    part_done = join_completions(len(entity.partitions), done)
    for broker in entity.partitions:
        for queue in gone:
            broker.drop_queue(queue, now_ms)
        broker.after_commit(part_done)
    subs.remove_subscription(name)
    entity.spec = dataclasses.replace(
        entity.spec,
        subqueues={q: s for q, s in entity.spec.subqueues.items() if q not in gone},
        subscriptions=tuple(s for s in entity.spec.subscriptions if s.name.lower() != name.lower()),
    )


def purge(entities: list[Entity], now_ms: int, done: Done) -> dict[str, int]:
    """Delete every message (active, locked, deferred, scheduled, dead-lettered) of these
    entities, each logged as purged; `done` runs after the commits. Returns messages purged
    per entity."""
    for entity in entities:
        check_healthy(entity)
    counts: dict[str, int] = {}
    brokers = [b for e in entities for b in e.partitions]
    part_done = join_completions(len(brokers), done) if brokers else done
    for entity in entities:
        total = 0
        for broker in entity.partitions:
            for queue in list(broker.queues):
                total += broker.purge_queue(queue, now_ms)
        counts[entity.name] = total
    for broker in brokers:
        broker.after_commit(part_done)
    if not brokers:
        done(None)
    return counts
