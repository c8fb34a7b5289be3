"""A Router over real LMDB in a temp dir, with the server's group-commit turn run inline.

No server, no sockets, no clock: tests pass `now_ms` and call `commit()` where the server's
event-loop turn would commit the dirty partitions.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from builders import incoming_message
from sbemu.config import NamespaceConfig, QueueConfig, SubscriptionConfig, TopicConfig
from sbemu.partitions import specs
from sbemu.partitions.commits import GroupCommit
from sbemu.partitions.entity import Entity
from sbemu.partitions.records import IncomingMessage, MessageRecord
from sbemu.partitions.router import Router
from sbemu.partitions.specs import MAIN, NEVER_MS, EntitySpec
from sbemu.partitions.subscriptions import RuleSource, SubscriptionSpec
from sbemu.protocol.views import encode_property, encode_symbol

NS = "ns"
NOW = 1_700_000_000_000  # Unix ms; every operation takes it explicitly


# The configuration the harness's entities are built from (sbemu.partitions.specs, as the
# server and the admin API build theirs): 1-minute locks, 10 deliveries, no TTL.
NAMESPACE = NamespaceConfig(NS)


def queue_spec(
    name: str = "q",
    partitions: int = 4,
    dup: bool = False,
    dup_window_ms: int = 60_000,
    max_size_mb: int = 16,
    requires_session: bool = False,
) -> EntitySpec:
    return specs.queue_spec(NAMESPACE, QueueConfig(
        name, lock_duration_ms=60_000, max_delivery_count=10, default_message_ttl_ms=NEVER_MS,
        requires_duplicate_detection=dup, duplicate_detection_window_ms=dup_window_ms,
        requires_session=requires_session, partition_count=partitions, max_size_mb=max_size_mb,
    ))  # fmt: skip


def topic_spec(
    subscriptions: dict[str, list[RuleSource]],
    name: str = "t",
    partitions: int = 1,
    dead_letter_on_filter_exceptions: bool = True,
) -> EntitySpec:
    spec = specs.topic_spec(NAMESPACE, TopicConfig(
        name, default_message_ttl_ms=NEVER_MS, partition_count=partitions, max_size_mb=16,
        subscriptions=tuple(
            SubscriptionConfig(
                sub, lock_duration_ms=60_000, max_delivery_count=10,
                default_message_ttl_ms=NEVER_MS,
                dead_lettering_on_filter_evaluation_exceptions=dead_letter_on_filter_exceptions,
            )
            for sub in subscriptions
        ),
    ))  # fmt: skip
    # the rules as the test wrote them (a RuleSource may carry admin-API parameters)
    return dataclasses.replace(spec, subscriptions=tuple(
        SubscriptionSpec(sub, tuple(rules), dead_letter_on_filter_exceptions)
        for sub, rules in subscriptions.items()
    ))  # fmt: skip


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
    body = (
        b"\x00Sw\xb0" + len(payload).to_bytes(4, "big") + payload
        if size > 10
        else b"\x00Sw\xa1\x02hi"
    )
    return incoming_message(
        message_id=message_id,
        session_id=session_id,
        partition_key=partition_key,
        tail=body,
        size=len(body),
        message_id_assigned=assigned,
        view=(lambda: view) if view is not None else None,
    )


class RouterHarness:
    """A Router whose group commits the test runs (as runtime/server.py's turn does)."""

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
