"""What the router knows of a configured queue or topic, and how its sub-queues are named.

queue_spec / topic_spec / entity_settings turn the configuration (sbemu.config) into them:
the one builder the server, the admin API and the tests use.

An entity is a queue or a topic [SB partitioning P1-P3]. Its sub-queues are named inside its
partitions: `main` (the queue itself), `main/$deadletterqueue`, `main/$Transfer/...` (the
transfer dead-letter queue), and for a topic `subscriptions/<name>` with the same suffixes,
plus `$scheduled` (a topic's scheduled messages before they are fanned out).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..config import NamespaceConfig, QueueConfig, SubscriptionConfig, TopicConfig
from ..errors import EntityNotFound
from .broker import DLQ_SUFFIX
from .entitystatus import EntitySettings, EntityStatus, ReceiverSettings
from .forwarding import TRANSFER_DLQ_SUFFIX
from .subqueue import SubQueueSettings
from .subscriptions import RuleSource, SubscriptionSpec
from .transitions import SCHEDULED_QUEUE

MAIN = "main"
MIB = 1024 * 1024
# Azure's "no expiry" TimeSpan.MaxValue and anything beyond a century: never expire.
NEVER_MS = 100 * 365 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class EntitySpec:
    """What the router needs to know of a configured queue or topic."""

    namespace: str
    name: str
    kind: str  # "queue" | "topic"
    partition_count: int
    partitioned: bool
    max_size_mb: int
    requires_duplicate_detection: bool
    duplicate_detection_window_ms: int
    requires_session: bool
    subqueues: dict[str, SubQueueSettings]
    subscriptions: tuple[SubscriptionSpec, ...] = ()
    max_message_size: int = 0  # bytes (MaxMessageSizeInKilobytes); 0: the namespace's


def base_queue(queue: str) -> str:
    """The queue or subscription a sub-queue belongs to ('main', 'subscriptions/<name>')."""
    if queue.endswith(TRANSFER_DLQ_SUFFIX):
        return queue[: -len(TRANSFER_DLQ_SUFFIX)]
    if queue.endswith(DLQ_SUFFIX):
        return queue[: -len(DLQ_SUFFIX)]
    return queue


def subqueue_names_for_queue() -> list[str]:
    """The sub-queues of a queue: itself, its DLQ and its transfer DLQ."""
    return [MAIN, MAIN + DLQ_SUFFIX, MAIN + TRANSFER_DLQ_SUFFIX]


def resolve_view_name(entity_names: Iterable[str], path: str) -> tuple[str, str]:
    """Split a normalised entity path into (entity name, sub-queue name)."""
    lowered = path.lower()
    sub = MAIN
    if lowered.endswith(TRANSFER_DLQ_SUFFIX):
        lowered = lowered[: -len(TRANSFER_DLQ_SUFFIX)]
        sub = MAIN + TRANSFER_DLQ_SUFFIX
    elif lowered.endswith(DLQ_SUFFIX):
        lowered = lowered[: -len(DLQ_SUFFIX)]
        sub = MAIN + DLQ_SUFFIX
    names = set(entity_names)
    if lowered in names:
        return lowered, sub
    marker = "/subscriptions/"
    idx = lowered.rfind(marker)
    if idx > 0 and lowered[:idx] in names:
        sub_name = lowered[idx + len(marker) :]
        suffix = sub.removeprefix(MAIN)
        return lowered[:idx], f"subscriptions/{sub_name}{suffix}"
    raise EntityNotFound(f"The messaging entity '{path}' could not be found.")


def with_scheduled(spec: EntitySpec) -> dict[str, SubQueueSettings]:
    """A topic's sub-queues plus the one holding its scheduled (not yet fanned out) messages."""
    if spec.kind != "topic":
        return spec.subqueues
    # Never delivered from: no delivery limit, no expiry before it fires, no DLQ.
    return {**spec.subqueues, SCHEDULED_QUEUE: SubQueueSettings(60_000, None, None, False, None)}


# ------------------------------------------------------------------ from the configuration
def _ttl(ms: int | None) -> int | None:
    return None if ms is None or ms <= 0 or ms >= NEVER_MS else ms


def _dlq_settings(lock_duration_ms: int) -> SubQueueSettings:
    # Dead-letter queues keep messages until they are received: no TTL, no delivery limit.
    return SubQueueSettings(lock_duration_ms, None, None, False, None)


def _receivable(
    prefix: str,
    lock_duration_ms: int,
    max_delivery_count: int,
    default_ttl_ms: int | None,
    dead_letter_on_expiration: bool,
    requires_session: bool,
) -> dict[str, SubQueueSettings]:
    return {
        prefix: SubQueueSettings(
            lock_duration_ms,
            max_delivery_count,
            _ttl(default_ttl_ms),
            dead_letter_on_expiration,
            prefix + DLQ_SUFFIX,
            requires_session,
            message_ttl=True,
        ),
        prefix + DLQ_SUFFIX: _dlq_settings(lock_duration_ms),
        prefix + TRANSFER_DLQ_SUFFIX: _dlq_settings(lock_duration_ms),
    }


def queue_spec(ns: NamespaceConfig, q: QueueConfig) -> EntitySpec:
    """The router's view of a configured queue."""
    return EntitySpec(
        namespace=ns.name,
        name=q.name,
        kind="queue",
        partition_count=q.partition_count,
        partitioned=q.enable_partitioning or q.partition_count > 1,
        max_size_mb=q.max_size_mb,
        requires_duplicate_detection=q.requires_duplicate_detection,
        duplicate_detection_window_ms=q.duplicate_detection_window_ms,
        requires_session=q.requires_session,
        max_message_size=(q.max_message_size_kb or ns.max_message_size_bytes // 1024) * 1024,
        subqueues=_receivable(
            MAIN,
            q.lock_duration_ms,
            q.max_delivery_count,
            q.default_message_ttl_ms,
            q.dead_lettering_on_message_expiration,
            q.requires_session,
        ),
    )


def topic_spec(ns: NamespaceConfig, t: TopicConfig) -> EntitySpec:
    """The router's view of a configured topic: one sub-queue set per subscription."""
    subqueues: dict[str, SubQueueSettings] = {}
    for sub in t.subscriptions:
        subqueues.update(_subscription_queues(sub))
    return EntitySpec(
        namespace=ns.name,
        name=t.name,
        kind="topic",
        partition_count=t.partition_count,
        partitioned=t.enable_partitioning or t.partition_count > 1,
        max_size_mb=t.max_size_mb,
        requires_duplicate_detection=t.requires_duplicate_detection,
        duplicate_detection_window_ms=t.duplicate_detection_window_ms,
        requires_session=False,
        max_message_size=(t.max_message_size_kb or ns.max_message_size_bytes // 1024) * 1024,
        subqueues=subqueues,
        subscriptions=tuple(
            SubscriptionSpec(
                sub.name,
                tuple(
                    RuleSource(
                        r.name, r.filter_type, r.sql_expression, r.correlation, r.action_expression
                    )
                    for r in sub.rules
                ),
                sub.dead_lettering_on_filter_evaluation_exceptions,
            )
            for sub in t.subscriptions
        ),
    )


def _subscription_queues(sub: SubscriptionConfig) -> dict[str, SubQueueSettings]:
    return _receivable(
        f"subscriptions/{sub.name.lower()}",
        sub.lock_duration_ms,
        sub.max_delivery_count,
        sub.default_message_ttl_ms,
        sub.dead_lettering_on_message_expiration,
        sub.requires_session,
    )


def entity_settings(cfg: QueueConfig | TopicConfig) -> EntitySettings:
    """The runtime settings (Status, forwarding, idle deletion) of a configured entity."""
    subs: dict[str, ReceiverSettings] = {}
    if isinstance(cfg, TopicConfig):
        for sub in cfg.subscriptions:
            subs[f"subscriptions/{sub.name.lower()}"] = ReceiverSettings(
                EntityStatus(sub.status),
                sub.forward_to,
                sub.forward_dead_lettered_messages_to,
                sub.auto_delete_on_idle_ms,
            )
        return EntitySettings(
            EntityStatus(cfg.status), None, None, cfg.auto_delete_on_idle_ms, subs
        )
    return EntitySettings(
        EntityStatus(cfg.status),
        cfg.forward_to,
        cfg.forward_dead_lettered_messages_to,
        cfg.auto_delete_on_idle_ms,
    )
