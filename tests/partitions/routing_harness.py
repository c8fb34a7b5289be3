"""A Router over real LMDB in a temp dir, with the server's group-commit turn run inline.

No server, no sockets, no clock: tests pass `now_ms` and call `commit()` where the server's
event-loop turn would commit the dirty partitions.
"""

from __future__ import annotations

from pathlib import Path

from sbemu.partitions.broker import DLQ_SUFFIX, SubQueueSettings
from sbemu.partitions.commits import GroupCommit
from sbemu.partitions.entity import Entity
from sbemu.partitions.forwarding import TRANSFER_DLQ_SUFFIX
from sbemu.partitions.records import IncomingMessage, MessageRecord
from sbemu.partitions.router import Router
from sbemu.partitions.specs import MAIN, EntitySpec
from sbemu.partitions.subscriptions import RuleSource, SubscriptionSpec, subscription_queue
from sbemu.protocol.views import encode_property, encode_symbol

NS = "ns"
NOW = 1_700_000_000_000  # Unix ms; every operation takes it explicitly


def receivable(prefix: str, requires_session: bool = False) -> dict[str, SubQueueSettings]:
    """A sub-queue with its dead-letter and transfer dead-letter queues (as server.py)."""
    dlq = SubQueueSettings(60_000, None, None, False, None)
    return {
        prefix: SubQueueSettings(60_000, 10, None, False, prefix + DLQ_SUFFIX, requires_session),
        prefix + DLQ_SUFFIX: dlq,
        prefix + TRANSFER_DLQ_SUFFIX: dlq,
    }


def queue_spec(
    name: str = "q",
    partitions: int = 4,
    dup: bool = False,
    dup_window_ms: int = 60_000,
    max_size_mb: int = 16,
    requires_session: bool = False,
) -> EntitySpec:
    return EntitySpec(
        namespace=NS, name=name, kind="queue", partition_count=partitions,
        partitioned=partitions > 1, max_size_mb=max_size_mb, requires_duplicate_detection=dup,
        duplicate_detection_window_ms=dup_window_ms, requires_session=requires_session,
        subqueues=receivable(MAIN, requires_session),
    )


def topic_spec(
    subscriptions: dict[str, list[RuleSource]],
    name: str = "t",
    partitions: int = 1,
    dead_letter_on_filter_exceptions: bool = True,
) -> EntitySpec:
    subqueues: dict[str, SubQueueSettings] = {}
    for sub in subscriptions:
        subqueues.update(receivable(subscription_queue(sub)))
    return EntitySpec(
        namespace=NS, name=name, kind="topic", partition_count=partitions,
        partitioned=partitions > 1, max_size_mb=16, requires_duplicate_detection=False,
        duplicate_detection_window_ms=60_000, requires_session=False, subqueues=subqueues,
        subscriptions=tuple(
            SubscriptionSpec(sub, tuple(rules), dead_letter_on_filter_exceptions)
            for sub, rules in subscriptions.items()
        ),
    )


def message(
    message_id: str | None = None,
    session_id: str | None = None,
    partition_key: str | None = None,
    size: int = 10,
    assigned: bool = False,
    view: object = None,
) -> IncomingMessage:
    # an amqp-value section: a short string, or a vbin32 of `size` bytes
    payload = b"x" * size
    body = b"\x00Sw\xb0" + len(payload).to_bytes(4, "big") + payload if size > 10 else b"\x00Sw\xa1\x02hi"
    return IncomingMessage(
        message_id=message_id, session_id=session_id, partition_key=partition_key, ttl_ms=None,
        durable=True, priority=None, annotation_count=0, annotations=b"", tail=body,
        size=len(body), message_id_assigned=assigned,
        view=(lambda: view) if view is not None else None,
    )


class RouterHarness:
    """A Router whose group commits the test runs (as server.py's turn does)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.wakes = 0
        self.router = self._open()

    def _wake(self) -> None:
        self.wakes += 1

    def _open(self) -> Router:
        return Router(self.data_dir, self._wake, encode_property, encode_symbol)

    def add(self, spec: EntitySpec) -> Entity:
        return self.router.add_entity(spec)

    def reopen(self, *specs: EntitySpec) -> None:
        """Close every store and open the same data directory again (a restart)."""
        self.commit()
        self.router.close()
        self.router = self._open()
        for spec in specs:
            self.router.add_entity(spec)

    def commit(self) -> None:
        """Commit every dirty partition until none is left (fail-over re-dirties another):
        the server's commit turn (sbemu.partitions.commits), run inline."""
        commits = GroupCommit(self.router)
        while self.router.dirty:
            commits.commit_dirty()

    def send(self, entity: Entity, *messages: IncomingMessage, now_ms: int = NOW) -> list[int]:
        """Send and commit; returns the sequence numbers; raises what the send completed with."""
        outcome: list[Exception | None] = []
        numbers = entity.send(list(messages), now_ms, outcome.append)
        self.commit()
        assert len(outcome) == 1, "the send completes exactly once, after its commits"
        if outcome[0] is not None:
            raise outcome[0]
        return numbers

    def peek(self, entity: Entity, queue: str = MAIN) -> list[tuple[MessageRecord, int | None]]:
        """Every message of one view, in sequence order, with its partition id."""
        return entity.views[queue].peek(0, 10_000)

    def partitions_of(self, entity: Entity, queue: str = MAIN) -> dict[str | None, int | None]:
        """message id -> partition id, of every message in one view."""
        return {rec.message_id: pid for rec, pid in self.peek(entity, queue)}
