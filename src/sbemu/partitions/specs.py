"""What the router knows of a configured queue or topic, and how its sub-queues are named.

An entity is a queue or a topic [SB partitioning P1-P3]. Its sub-queues are named inside its
partitions: `main` (the queue itself), `main/$deadletterqueue`, `main/$Transfer/...` (the
transfer dead-letter queue), and for a topic `subscriptions/<name>` with the same suffixes,
plus `$scheduled` (a topic's scheduled messages before they are fanned out).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import EntityNotFound
from .broker import DLQ_SUFFIX
from .forwarding import TRANSFER_DLQ_SUFFIX
from .subqueue import SubQueueSettings
from .subscriptions import SubscriptionSpec
from .transitions import SCHEDULED_QUEUE

MAIN = "main"
MIB = 1024 * 1024


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
        sub_name = lowered[idx + len(marker):]
        suffix = sub.removeprefix(MAIN)
        return lowered[:idx], f"subscriptions/{sub_name}{suffix}"
    raise EntityNotFound(f"The messaging entity '{path}' could not be found.")


def with_scheduled(spec: EntitySpec) -> dict[str, SubQueueSettings]:
    """A topic's sub-queues plus the one holding its scheduled (not yet fanned out) messages."""
    if spec.kind != "topic":
        return spec.subqueues
    # Never delivered from: no delivery limit, no expiry before it fires, no DLQ.
    return {**spec.subqueues, SCHEDULED_QUEUE: SubQueueSettings(60_000, None, None, False, None)}
