"""The admin operations on an entity: what a management request changes in its partitions.

The router finds the entity and keeps its own books (links to detach, forwarding, idle
tracking); what the operation does to the entity, its partitions and its spec is here:
status [P17, P18], new settings (partitioning never changes [P4]), subscriptions created,
updated and deleted at runtime, purges. Every operation that changes partitions first checks
that all of them are in service [P17].
"""

from __future__ import annotations

import dataclasses

from ..errors import EntityAlreadyExists, InvalidOperation, QuotaExceeded, ServerBusy
from .broker import DLQ_SUFFIX
from .completions import Done, join_completions
from .dispatch import EntityView
from .entity import Entity
from .forwarding import TRANSFER_DLQ_SUFFIX, forward_target, transfer_counts
from .purging import PurgeJob
from .specs import MAIN, MIB, EntitySpec
from .subqueue import SubQueueSettings
from .subscriptions import Subscriptions, SubscriptionSpec, subscription_queue
from .transitions import SCHEDULED_QUEUE

MAX_SUBSCRIPTIONS_PER_TOPIC = 2_000  # Azure's quota per topic [P19 limits page]
PURGE_PAGE = 1_000  # messages read per store page while purging by state


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
    entities at once, each logged as purged; `done` runs after the commits. Returns messages
    purged per entity. (The admin API steps a PurgeJob instead: start_purge.)"""
    for entity in entities:
        check_healthy(entity)
    job = PurgeJob(entities, stepped=False)  # (no large message read off the loop: no wait)
    while not job.step(now_ms):
        pass
    job.finish(done)
    return job.counts


def start_purge(entities: list[Entity]) -> PurgeJob:
    """A purge of these entities to be done a slice at a time (purging.py)."""
    for entity in entities:
        check_healthy(entity)
    return PurgeJob(entities)


def locked_until(entity: Entity, queue: str, seq: int) -> int | None:
    """When a receiver's lock on message `seq` of sub-queue `queue` expires (Unix ms); None
    when it is unlocked."""
    return entity.partition_of_sequence(seq).locked_until(queue, seq)


def purge_state(
    entity: Entity, queue: str, state: int | None, now_ms: int, done: Done
) -> tuple[int, int]:
    """Delete the messages of one sub-queue on every partition in service, each logged: all of
    them when `state` is None (locks end, as `purge` does), else only the unlocked ones in that
    MessageState (a locked one stays with its receiver). `done` runs after the commits.
    Returns (removed, locked messages kept)."""
    removed = kept = 0
    touched = [b for b in entity.partitions if b.health.serving]
    for broker in touched:
        if state is None:
            removed += broker.purge_queue(queue, now_ms)
            continue
        cursor = 0
        while page := broker.peek(queue, cursor, PURGE_PAGE):
            for rec in page:
                cursor = rec.sequence_number + 1
                if rec.state != state:
                    continue
                if broker.remove(queue, rec.sequence_number, now_ms) is None:
                    kept += 1
                else:
                    removed += 1
    part_done = join_completions(len(touched), done) if touched else done
    for broker in touched:
        broker.after_commit(part_done)
    if not touched:
        done(None)
    return removed, kept


def message_counts(entity: Entity, prefix: str = MAIN) -> dict[str, int]:
    """Runtime counts of a queue, topic or subscription (`prefix`) summed over all partitions
    [P17/P18 aggregate]: active, dead_letter, scheduled, transfer, transfer_dead_letter,
    deferred, and size (bytes stored, kept per sub-queue: no message is read)."""
    total = {
        "active": 0,
        "dead_letter": 0,
        "scheduled": 0,
        "transfer": 0,
        "transfer_dead_letter": 0,
        "deferred": 0,
        "size": 0,
    }
    queues: list[str]
    if entity.spec.kind == "topic" and prefix == MAIN:
        queues = [q for q in entity.spec.subqueues if "/$" not in q]
    else:
        queues = [prefix]
    for broker in entity.partitions:
        for queue in queues:
            sq = broker.queues.get(queue)
            if sq is None:
                continue
            c = broker.counts(queue)
            # a forwarding queue's messages are in transfer, not receivable (Azure's
            # TransferMessageCount)
            moving = forward_target(entity, queue) is not None
            total["transfer" if moving else "active"] += c["active"]
            total["scheduled"] += c["scheduled"]
            total["deferred"] += c.get("deferred", 0)
            total["size"] += broker.stored_bytes(queue)
            for suffix, key in (
                (DLQ_SUFFIX, "dead_letter"),
                (TRANSFER_DLQ_SUFFIX, "transfer_dead_letter"),
            ):
                if queue + suffix in broker.queues:
                    dc = broker.counts(queue + suffix)
                    total[key] += dc["active"] + dc["deferred"] + dc["scheduled"]
                    total["size"] += broker.stored_bytes(queue + suffix)
        if entity.spec.kind == "topic" and prefix == MAIN and SCHEDULED_QUEUE in broker.queues:
            # a topic's scheduled messages wait in the topic until they fire: Azure counts
            # them (and their bytes) in the topic's ScheduledMessageCount and SizeInBytes
            total["scheduled"] += broker.counts(SCHEDULED_QUEUE)["scheduled"]
            total["size"] += broker.stored_bytes(SCHEDULED_QUEUE)
    return total
