"""A queue or topic and its partitions: its Status, the door of its send path, settlement,
sessions and deferred messages across partitions.

Every send, alone or several at once (send_many), goes one way: the entity checks its Status
and hands the sends to its send path (sending.SendPath), which picks each send's partition
and stages each partition's share with one enqueue. Lock keys (a lock token's int) carry their
partition id, so a settlement goes straight to the right partition [SB partitioning P11].
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..errors import (
    EntityNotFound,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    ServerBusy,
    ServiceBusError,
)
from .broker import SEQUENCE_BITS, PartitionBroker
from .completions import Done, join_completions
from .dedup import DuplicateHistory
from .dispatch import EntityView
from .entitystatus import EntitySettings, EntityStatus, ReceiverSettings, check_receive, check_send
from .forwarding import forward_target
from .keys import partition_for_key
from .outcomes import Outcome
from .records import IncomingMessage, MessageRecord
from .sending import SendPath, Settle
from .specs import MAIN, EntitySpec, base_queue
from .subqueue import Lock
from .subscriptions import Subscriptions, subscription_queue
from .tokens import partition_of_key
from .transitions import SCHEDULED_QUEUE, Route


class Entity:
    """A queue or topic and its partitions."""

    def __init__(
        self,
        spec: EntitySpec,
        partitions: list[PartitionBroker],
        subscriptions: Subscriptions | None = None,
    ) -> None:
        self.spec = spec
        self.subscriptions = subscriptions
        self.name = spec.name
        self.partitioned = spec.partitioned
        self.partitions = partitions
        self.views = {name: EntityView(self, name) for name in spec.subqueues}
        if MAIN not in self.views:  # a topic: its own address is for senders only
            self.views[MAIN] = EntityView(self, MAIN)
        # Serves a view again on the next loop pass (set by the router; None: no such pass, a
        # dispatch serves all the credit at once)
        self.defer_dispatch: Callable[[EntityView], None] | None = None
        self.accessed_ms = 0  # last send or receive (admin API AccessedAt)
        # The admin API's full description of the entity (sbemu.admin.catalog): every property
        # the SDKs round-trip, incl. forward_to, status, auto_delete_on_idle_ms.
        self.description: dict[str, Any] = {}
        # durable duplicate detection, one history per partition (empty: not enabled)
        self.histories: list[DuplicateHistory] = (
            [DuplicateHistory(b, spec.duplicate_detection_window_ms) for b in partitions]
            if spec.requires_duplicate_detection
            else []
        )
        self._send_path = SendPath(spec, partitions, subscriptions, self.histories)
        self.settings = EntitySettings()  # Status and forwarding; see Router.apply_settings
        self.touched = False  # any access since the idle tracker last looked (AutoDeleteOnIdle)
        # subscriptions ('subscriptions/<name>') received from, peeked, updated or given rules
        # since the idle tracker last looked (a send to the topic does not count for them)
        self.touched_subs: set[str] = set()
        self.deleted = False  # removed (AutoDeleteOnIdle): links still holding it get not-found

    def note_access(self, queue: str) -> None:
        """Note a link attach or a management request on one of the entity's sub-queues for
        AutoDeleteOnIdle (for a topic's subscription sub-queue: that subscription too)."""
        self.touched = True
        if self.subscriptions is not None and queue != MAIN:
            self.touched_subs.add(base_queue(queue))

    def touch_subscription(self, name: str) -> None:
        """Note management activity on a subscription (an update, a rule change) for
        AutoDeleteOnIdle; it counts for the topic too."""
        self.touched = True
        self.touched_subs.add(subscription_queue(name))

    # ---------------------------------------------------------------- status
    def receiver_settings(self, queue: str) -> ReceiverSettings:
        """The settings of the queue or subscription a sub-queue (or its DLQ) belongs to."""
        if self.subscriptions is None:
            s = self.settings
            return ReceiverSettings(s.status, s.forward_to, s.forward_dead_lettered_messages_to)
        return self.settings.subscriptions.get(base_queue(queue), ReceiverSettings())

    def check_sendable(self) -> None:
        """Raise EntityDisabled while the Status forbids sends [Azure: entity suspend]."""
        self._check_exists()
        check_send(self.spec.kind, self.name, self.settings.status)

    def check_receive(self, queue: str) -> None:
        """Raise EntityDisabled while the Status forbids receiving from this sub-queue, and
        InvalidOperation when it auto-forwards (its messages are moved, not received)."""
        self._check_exists()
        if forward_target(self, queue) is not None:
            raise InvalidOperation(
                "Cannot create a message receiver on an entity with auto-forwarding enabled "
                f"('{self.views[queue].address if queue in self.views else self.name}' "
                f"forwards to '{forward_target(self, queue)}')."
            )
        if self.subscriptions is None:
            check_receive("queue", self.name, self.settings.status, None)
            return
        path = f"{self.name}/{base_queue(queue)}"
        check_receive(
            "subscription", path, self.receiver_settings(queue).status, self.settings.status
        )

    def _check_exists(self) -> None:
        if self.deleted:
            raise EntityNotFound(f"The messaging entity '{self.name}' could not be found.")

    def may_receive(self, queue: str) -> bool:
        """Whether receivers of this sub-queue may be served now."""
        if (
            self.settings.status is EntityStatus.ACTIVE
            and not self.settings.subscriptions
            and not self.deleted
        ):
            return True
        try:
            self.check_receive(queue)
        except ServiceBusError:
            return False
        return True

    def _settles_freely(self) -> bool:
        """The common case, without building receiver settings per settlement: an Active
        entity that forwards nothing (and, for a topic, no subscription with its own Status
        or forwarding) lets every sub-queue settle [check_receive]."""
        s = self.settings
        return (
            s.status is EntityStatus.ACTIVE
            and s.forward_to is None
            and s.forward_dead_lettered_messages_to is None
            and not s.subscriptions
        )

    def _check_settle(self, broker: PartitionBroker, key: int) -> PartitionBroker:
        if self._settles_freely():
            return broker
        lock = broker.lock_of(key)
        if lock is not None:
            self.check_receive(lock.queue.name)
        return broker

    @property
    def scheduled_queue(self) -> str:
        """The sub-queue holding this entity's scheduled messages."""
        return MAIN if self.subscriptions is None else SCHEDULED_QUEUE

    # ---------------------------------------------------------------- sending
    def send(self, messages: list[IncomingMessage], now_ms: int, done: Done) -> list[int]:
        """Store messages, all-or-nothing per partition; `done` runs after every commit.

        Raises the error that refuses the send; returns the sequence numbers given to the
        stored messages (duplicates dropped by duplicate detection get none). The one send
        path (_send) with one send in it.
        """
        refused: list[Exception] = []
        staging = True

        def settle(_indices: list[int], error: Exception | None) -> None:
            if staging and error is not None:
                refused.append(error)  # refused before anything was staged: raised below
            else:
                done(error)

        numbers = self._send([messages], now_ms, settle)
        staging = False
        if refused:
            raise refused[0]
        return numbers

    def send_many(
        self,
        sends: list[list[IncomingMessage]],
        now_ms: int,
        settle: Settle,
    ) -> None:
        """Several sends at once (the transfers of one read on one link): each is checked and
        answered as its own send, but the sends bound for one partition are staged with one
        enqueue, so they share its bookkeeping and its commit.

        `settle(indices, error)` runs once per group of sends, after the commit that made them
        durable (or with the error that refused them), with the indices of its sends in
        `sends`. Key-less sends of one call share one partition, in turn [P8], as the
        messages of one batch do; sends with a key go where their key says [P7].
        """
        self._send(sends, now_ms, settle)

    def _send(
        self,
        sends: list[list[IncomingMessage]],
        now_ms: int,
        settle: Settle,
    ) -> list[int]:
        """The one send path: the entity's Status lets the sends in (or refuses them all),
        then its send path checks, groups and stages them (SendPath.send). Returns the
        sequence numbers given (in staging order)."""
        self.touched = True
        try:
            self.check_sendable()
        except ServiceBusError as exc:
            settle(list(range(len(sends))), exc)
            return []
        self.accessed_ms = now_ms
        return self._send_path.send(sends, now_ms, settle)

    def routes_for(self, msg: IncomingMessage, now_ms: int) -> list[Route]:
        """Where one message sent here goes (the queue, or the matching subscriptions)."""
        return self._send_path.routes_for(msg, now_ms)

    # ---------------------------------------------------------------- locks
    def _broker_for(self, key: int) -> PartitionBroker:
        self.touched = True
        self._check_exists()
        pid = partition_of_key(key)
        if pid >= len(self.partitions):
            raise MessageLockLost(
                "The lock supplied is invalid. Either the lock expired, or the message has "
                "already been removed from the queue."
            )
        broker = self.partitions[pid]
        if not broker.health.serving:
            raise ServerBusy(f"Partition {pid} of '{self.name}' is unavailable.")
        return broker

    def check_lock(self, key: int, now_ms: int) -> None:
        """Raise the error a settlement would get now (lock lost, partition unavailable)."""
        broker = self._broker_for(key)
        lock = broker.lock_of(key)
        if lock is None or (lock.session is None and lock.until_ms <= now_ms):
            raise MessageLockLost(
                "The lock supplied is invalid. Either the lock expired, or the message has "
                "already been removed from the queue."
            )

    def check_send(self, messages: list[IncomingMessage]) -> None:
        """Raise the error a send of these messages would get now (status, keys, availability)."""
        self.check_sendable()
        self._send_path.check(messages)

    def settle(self, key: int, outcome: Outcome, now_ms: int, done: Done) -> None:
        """Settle a locked message, by its lock token's int, as `outcome` says (complete,
        abandon, defer, dead-letter: sbemu.partitions.outcomes); `done` runs after the
        commit. Raises the error that refuses it (a lost lock, a receive-disabled entity)."""
        self._check_settle(self._broker_for(key), key).settle(key, outcome, now_ms, done)

    def complete_lazy(self, keys: list[int], now_ms: int) -> None:
        """Complete locked messages whose outcome nobody waits for (pre-settled accepts), by
        their lock tokens' ints, one call per partition: lazy deletions (see
        PartitionBroker.complete_lazy); a token whose lock is lost, or whose partition is
        unavailable, is skipped (its message comes back as after a lock expiry)."""
        if self.deleted:
            return
        self.touched = True
        parts = self.partitions
        groups: dict[int, list[int]]
        if len(parts) == 1:
            groups = {0: keys}  # a token of no partition of ours finds no lock there
        else:
            groups = {}
            for key in keys:
                pid = key & 0xFFFF  # partition_of_key
                group = groups.get(pid)
                if group is None:
                    groups[pid] = [key]
                else:
                    group.append(key)
        free = self._settles_freely()
        for pid, group in groups.items():
            if pid >= len(parts) or not parts[pid].health.serving:
                continue
            broker = parts[pid]
            if not free:
                group = [k for k in group if self._may_settle(broker, k)]
            broker.complete_lazy(group, now_ms)

    def _may_settle(self, broker: PartitionBroker, key: int) -> bool:
        try:
            self._check_settle(broker, key)
        except ServiceBusError:
            return False
        return True

    def release(self, key: int, now_ms: int) -> None:
        """Unlock without counting a delivery."""
        try:
            broker = self._broker_for(key)
        except MessageLockLost:
            return
        broker.release(key, now_ms)

    def renew(self, key: int, now_ms: int) -> int:
        """Renew a lock; returns the new locked-until (ms)."""
        return self._check_settle(self._broker_for(key), key).renew(key, now_ms)

    def partition_for_session(self, session_id: str) -> PartitionBroker:
        """[P6] a session lives on the partition its SessionId hashes to."""
        n = len(self.partitions)
        return self.partitions[partition_for_key(session_id, n) if n > 1 else 0]

    def session_owner(self, queue: str, session_id: str, now_ms: int) -> object | None:
        """Who holds a live lock on a session of sub-queue `queue`, if anyone."""
        return self.partition_for_session(session_id).session_owner(queue, session_id, now_ms)

    def renew_session(self, queue: str, session_id: str, owner: object, now_ms: int) -> int:
        """Extend a session lock held by `owner`; returns the new locked-until (Unix ms)."""
        return self.partition_for_session(session_id).renew_session(
            queue, session_id, owner, now_ms
        )

    def get_session_state(self, queue: str, session_id: str) -> bytes | None:
        """A session's stored state (None if it has none)."""
        return self.partition_for_session(session_id).get_session_state(queue, session_id)

    def set_session_state(
        self, queue: str, session_id: str, state: bytes | None, now_ms: int, done: Done
    ) -> None:
        """Store (or clear) a session's state durably; `done` runs after the commit."""
        self.partition_for_session(session_id).set_session_state(
            queue, session_id, state, now_ms, done
        )

    def session_ids(self, queue: str, changed_after_ms: int | None) -> list[str]:
        """Session ids with messages or state over all partitions, sorted."""
        ids: set[str] = set()
        for broker in self.partitions:
            if broker.health.serving:
                ids.update(broker.session_ids(queue, changed_after_ms))
        return sorted(ids)

    def partition_of_sequence(self, seq: int) -> PartitionBroker:
        """The partition that issued a sequence number [P11]."""
        pid = (seq >> SEQUENCE_BITS) if self.partitioned else 0
        if pid >= len(self.partitions):
            raise MessageNotFound(f"No message with sequence number {seq}.")
        return self.partitions[pid]

    def receive_deferred(
        self,
        queue: str,
        numbers: list[int],
        now_ms: int,
        peek_lock: bool,
        read: dict[int, MessageRecord] | None = None,
    ) -> list[tuple[MessageRecord, Lock | None, int | None]]:
        """Fetch deferred messages by sequence number (all must exist); `read`: their
        records as read_stored read them, where they were stored."""
        self.check_receive(queue)
        out = []
        known = read or {}
        for seq in numbers:
            broker = self.partition_of_sequence(seq)
            rec, lock = broker.take_deferred(queue, seq, now_ms, peek_lock, known.get(seq))
            out.append((rec, lock, broker.partition_id if self.partitioned else None))
        return out

    def read_stored(
        self, queue: str, numbers: list[int], then: Callable[[dict[int, MessageRecord]], None]
    ) -> None:
        """`then(records)`: the stored records of these sequence numbers, by number, a large
        one read off the loop by its partition's next commit (for receive_deferred: its
        answer then never decodes one on the loop); those not stored left out."""
        brokers = [self.partition_of_sequence(seq) for seq in numbers]
        found: dict[int, MessageRecord] = {}
        left = len(numbers)

        def got(seq: int, rec: MessageRecord | None) -> None:
            nonlocal left
            if rec is not None:
                found[seq] = rec
            left -= 1
            if not left:
                then(found)

        if not numbers:
            then(found)
        for seq, broker in zip(numbers, brokers, strict=True):
            broker.reader.read_stored(queue, seq, partial(got, seq))

    def cancel_scheduled(
        self,
        numbers: list[int],
        now_ms: int,
        done: Done,
        read: dict[int, MessageRecord] | None = None,
    ) -> None:
        """Cancel scheduled messages by sequence number; unknown numbers are an error
        (`read`: their records as read_stored read them from the scheduled sub-queue)."""
        brokers = []
        known = read or {}
        for seq in numbers:
            broker = self.partition_of_sequence(seq)
            if not broker.cancel_scheduled(self.scheduled_queue, seq, now_ms, known.get(seq)):
                raise MessageNotFound(
                    f"The scheduled message with sequence number {seq} was not found."
                )
            brokers.append(broker)
        if not brokers:
            done(None)
            return
        one_done = join_completions(len(brokers), done)
        for broker in brokers:
            broker.after_commit(one_done)
