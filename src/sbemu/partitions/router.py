"""Entities and their partitions: routing sends, serving receivers, finding locks.

An Entity is a queue or topic made of one partition (not partitioned) or several
[SB partitioning P1-P3]. Sends are routed by key [P6, P7] or round-robin [P8]; a receiver
sees one EntityView that draws from every partition [P10]; lock tokens carry their partition
id so settlement goes straight to the right broker.

The router never reads a clock or touches a socket: callers pass `now_ms`. It asks for a
flush through the `wake` callable whenever a broker has pending writes or a view has
pending dispatch work; the server then calls run_pending() and commits dirty brokers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from ..atomicfile import atomic_write
from ..completions import join_completions
from ..errors import (
    EntityAlreadyExists,
    EntityNotFound,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    QuotaExceeded,
    ServerBusy,
    ServiceBusError,
)
from .broker import (
    DLQ_SUFFIX,
    SCHEDULED_QUEUE,
    SEQUENCE_BITS,
    Done,
    Lock,
    PartitionBroker,
    Route,
    SessionLock,
    SubQueueSettings,
    partition_of_token,
)
from .broker import token_of as token_of  # the protocol side's way from a lock key to its token
from .dedup import DuplicateHistory
from .forwarding import TRANSFER_DLQ_SUFFIX, Forwarder, forward_target, transfer_counts
from .idle import IdleTracker
from .keys import partition_for_key, partition_key_of
from .records import IncomingMessage, MessageRecord
from .status import EntitySettings, EntityStatus, ReceiverSettings, check_receive, check_send
from .store import PartitionStore, map_size_for
from .subscriptions import Subscriptions, SubscriptionSpec, subscription_queue
from .transfer import ViewOf, incoming_from_record

MAIN = "main"
QUEUE_ROUTE = Route(MAIN)
SCHEDULED_ROUTE = Route(SCHEDULED_QUEUE)
MIB = 1024 * 1024
# Messages one dispatch hands to a receiver before the rest of its credit waits for the next
# loop pass: what was built goes out first, so the client works on it meanwhile.
DISPATCH_RUN = 128
RELEASE_RESIDENT_MS = 2_000  # how often the partitions unmap the store pages they touched
MAX_SUBSCRIPTIONS_PER_TOPIC = 2_000  # Azure's quota per topic [P19 limits page]


class _SettleOne:
    """The completion of one send (or one group of sends) of Entity.send_many."""

    __slots__ = ("indices", "settle")

    def __init__(
        self, settle: Callable[[list[int], Exception | None], None], indices: int | list[int]
    ) -> None:
        self.settle = settle
        self.indices = indices if isinstance(indices, list) else [indices]

    def __call__(self, error: Exception | None) -> None:
        self.settle(self.indices, error)


class StorageLayoutError(Exception):
    """The data directory does not match the configuration (e.g. a changed partition count)."""


# A run of messages one take gave a receiver: each record with its lock (peek-lock).
Taken = list[tuple[MessageRecord, Lock | None]]


@dataclass(slots=True)
class Delivered:
    """One message handed to a consumer: the record, its lock (peek-lock) and where it lives."""

    record: MessageRecord
    lock: Lock | None
    partition_id: int | None  # None on non-partitioned entities
    view: EntityView


class Consumer(Protocol):
    """A receiver link as the router sees it."""

    peek_lock: bool
    session: SessionHandle | None  # set for session receivers once a session is accepted

    def credit(self) -> int:
        """How many more messages it may take now."""

    def deliver(self, delivered: Delivered) -> None:
        """Hand over one message (the consumer puts it on the wire)."""

    def deliver_batch(self, taken: Taken, partition_id: int | None) -> None:
        """Hand over messages of one partition, in order (peek-locked: each with its lock)."""


@dataclass(slots=True, eq=False)
class SessionHandle:
    """A receiver's accepted session, as the protocol side holds it.

    Opaque on purpose: which partition holds the session, and its lock, are the router's
    business; the protocol reads the session id and expiry the link reports, releases the
    session when the link goes, and asks whether a lost lock is the one it holds.
    """

    _broker: PartitionBroker
    _lock: SessionLock

    @property
    def session_id(self) -> str:
        """The SessionId of the accepted session."""
        return self._lock.session_id

    @property
    def until_ms(self) -> int:
        """When the session lock expires (Unix ms) unless renewed."""
        return self._lock.until_ms

    def holds(self, lock: object) -> bool:
        """Whether `lock` (as passed to Consumer.session_lost) is this session's lock."""
        return lock is self._lock

    def held(self, now_ms: int) -> bool:
        """Whether this receiver still holds the session lock (not expired, not taken over)."""
        lock = self._lock
        owner = self._broker.session_owner(lock.queue.name, lock.session_id, now_ms)
        return owner is not None and owner is lock.owner

    def release(self, now_ms: int) -> None:
        """The receiver went away: end the session lock; unsettled messages become ready."""
        self._broker.release_session(self._lock, now_ms)

    def touch(self, now_ms: int) -> None:
        """The receiver asked for messages: activity that keeps the session lock alive."""
        self._broker.touch_session(self._lock, now_ms)


@dataclass(slots=True)
class SessionWaiter:
    """A next-available-session receiver waiting for a session [contract 4.4]."""

    owner: object
    deadline_ms: int
    callback: Callable[[SessionHandle | None], None]


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


class EntityView:
    """A receivable sub-queue across all partitions: a queue, a DLQ or a subscription."""

    def __init__(self, entity: Entity, queue: str) -> None:
        self.entity = entity
        self.queue = queue
        self.consumers: list[Consumer] = []
        self.session_waiters: list[SessionWaiter] = []
        self._next_partition = 0
        self._next_consumer = 0

    @property
    def requires_session(self) -> bool:
        """Whether receivers of this view must be session receivers."""
        sq = self.entity.partitions[0].queues.get(self.queue)
        return sq is not None and sq.settings.requires_session

    @property
    def receivable(self) -> bool:
        """False for a topic's own address, which only takes sends."""
        return self.queue in self.entity.partitions[0].queues

    @property
    def address(self) -> str:
        """The entity path of this view, as clients name it."""
        if self.queue == MAIN:
            return self.entity.name
        return f"{self.entity.name}/{self.queue.removeprefix(MAIN + '/')}"

    def attach(self, consumer: Consumer) -> None:
        """Register a receiver; it is served in arrival order with the others."""
        self.consumers.append(consumer)

    def detach(self, consumer: Consumer) -> None:
        """Forget a receiver (its locks stay until they expire, as on the service)."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    # ------------------------------------------------------------ sessions
    def accept_session(
        self, session_id: str | None, owner: object, now_ms: int
    ) -> SessionHandle | None:
        """Lock a named session (on its partition [P6]) or the next available one anywhere."""
        parts = self.entity.partitions
        if session_id is not None:
            broker = self.entity.partition_for_session(session_id)
            named = broker.accept_session(self.queue, session_id, owner, now_ms)
            assert named is not None  # a named session is locked or refused, never None
            return SessionHandle(broker, named)
        n = len(parts)
        for i in range(n):
            broker = parts[(self._next_partition + i) % n]
            if not broker.healthy:
                continue
            lock = broker.accept_session(self.queue, None, owner, now_ms)
            if lock is not None:
                self._next_partition = (self._next_partition + i + 1) % n
                return SessionHandle(broker, lock)
        return None

    def wait_for_session(
        self,
        owner: object,
        deadline_ms: int,
        callback: Callable[[SessionHandle | None], None],
    ) -> None:
        """Call back when a session becomes available, or with None at the deadline."""
        self.session_waiters.append(SessionWaiter(owner, deadline_ms, callback))

    def cancel_wait(self, owner: object) -> None:
        """Forget a waiter whose link went away."""
        self.session_waiters = [w for w in self.session_waiters if w.owner is not owner]

    def _serve_waiters(self, now_ms: int) -> None:
        while self.session_waiters:
            waiter = self.session_waiters[0]
            accepted = self.accept_session(None, waiter.owner, now_ms)
            if accepted is None:
                return
            self.session_waiters.pop(0)
            waiter.callback(accepted)

    def expire_waiters(self, now_ms: int) -> None:
        """Time out session waiters whose deadline passed."""
        due = [w for w in self.session_waiters if w.deadline_ms <= now_ms]
        if due:
            self.session_waiters = [w for w in self.session_waiters if w.deadline_ms > now_ms]
            for waiter in due:
                waiter.callback(None)

    # ------------------------------------------------------------ dispatch
    def dispatch(self, now_ms: int) -> None:
        """Hand ready messages to consumers with credit: one each per round, partitions in turn."""
        if not self.entity.may_receive(self.queue):
            return  # Status forbids receiving; receivers were detached when it changed
        if self.session_waiters:
            self._serve_waiters(now_ms)
        consumers = self.consumers
        if consumers:
            self.entity.accessed_ms = now_ms  # admin API AccessedAt: receives count too
        if len(consumers) == 1:
            consumer = consumers[0]
            if consumer.session is None and consumer.peek_lock:
                self._serve_batches(now_ms, consumer)
                return
            for _ in range(consumer.credit()):
                delivered = self._take(now_ms, consumer)
                if delivered is None:
                    return
                consumer.deliver(delivered)
            return
        while consumers:
            progressed = False
            start = self._next_consumer % len(consumers)
            for consumer in consumers[start:] + consumers[:start]:
                if consumer.credit() <= 0:
                    continue
                delivered = self._take(now_ms, consumer)
                if delivered is None:
                    if consumer.session is not None:
                        continue  # its session is empty; others may still have messages
                    self._next_consumer += 1
                    return
                consumer.deliver(delivered)
                progressed = True
            self._next_consumer += 1
            if not progressed:
                return

    def _serve_batches(self, now_ms: int, consumer: Consumer) -> None:
        """The one peek-lock receiver outside sessions: its credit filled with runs of
        messages, each run as long as one partition gives, partitions in turn (one take per
        run rather than one per message; across partitions the order is not kept anyway
        [P10, P12]; key-less sends fill one partition's commit at a time, so its messages
        sit together).

        At most DISPATCH_RUN messages per call: the rest of the credit is served on the next
        loop pass (Entity.defer_dispatch), after these went out, so the client works on the
        first run while the next one is built instead of waiting for the whole credit.
        (rhea, credit 500: plain queue receive 27.1-29.0k -> 30.3-32.2k msg/s; in runs of
        128 from one partition the 16-partition queue 28.7k, in shares split over the
        partitions 20-25k.)"""
        credit = consumer.credit()
        if credit <= 0 or (self.entity.spec.requires_session and self.queue == MAIN):
            return  # a session entity serves session receivers only
        # credit beyond this run: served on the next pass if the run fills (None: none, or
        # no such pass)
        defer = self.entity.defer_dispatch if credit > DISPATCH_RUN else None
        if defer is not None:
            credit = DISPATCH_RUN
        queue = self.queue
        parts = self.entity.partitions
        n = len(parts)
        partitioned = self.entity.partitioned
        while credit > 0:
            progressed = False
            for _ in range(n):
                idx = self._next_partition
                broker = parts[idx]
                self._next_partition = (idx + 1) % n
                if not broker.healthy or not broker.has_ready(queue):
                    continue
                taken = broker.take_batch(queue, now_ms, credit)
                if not taken:
                    continue
                consumer.deliver_batch(taken, broker.partition_id if partitioned else None)
                credit -= len(taken)
                progressed = True
                if credit <= 0:
                    if defer is not None:  # a full run: there may be more ready
                        defer(self)
                    return
            if not progressed:
                return

    def _take(self, now_ms: int, consumer: Consumer) -> Delivered | None:
        peek_lock = consumer.peek_lock
        session = consumer.session
        if session is not None:
            broker = session._broker
            taken = broker.take_next(self.queue, now_ms, peek_lock, session._lock)
            if taken is None:
                return None
            pid = broker.partition_id if self.entity.partitioned else None
            return Delivered(taken[0], taken[1], pid, self)
        if self.entity.spec.requires_session and self.queue == MAIN:
            return None  # a session entity serves session receivers only
        parts = self.entity.partitions
        n = len(parts)
        for i in range(n):
            idx = (self._next_partition + i) % n
            broker = parts[idx]
            if not broker.healthy or not broker.has_ready(self.queue):
                continue
            taken = broker.take_next(self.queue, now_ms, peek_lock)
            if taken is None:
                continue
            self._next_partition = (idx + 1) % n
            rec, lock = taken
            pid = broker.partition_id if self.entity.partitioned else None
            return Delivered(rec, lock, pid, self)
        return None

    def peek(
        self, from_seq: int, count: int, session_id: str | None = None
    ) -> list[tuple[MessageRecord, int | None]]:
        """Up to `count` messages from every partition with sequence >= from_seq, in order.

        [SB partitioning P12, P13] allow fewer or not-globally-oldest results; returning a
        merged, ordered page lets clients page with last-seen + 1 without skipping any.
        """
        found: list[tuple[MessageRecord, int | None]] = []
        brokers = self.entity.partitions
        if session_id is not None:
            brokers = [self.entity.partition_for_session(session_id)]
        for broker in brokers:
            if not broker.healthy:
                continue
            pid = broker.partition_id if self.entity.partitioned else None
            found.extend(
                (rec, pid) for rec in broker.peek(self.queue, from_seq, count, session_id)
            )
        found.sort(key=lambda item: item[0].sequence_number)
        return found[:count]


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
        self._round_robin = 0
        self._keyless_pid: int | None = None
        # Serves a view again on the next loop pass (set by the router; None: no such pass, a
        # dispatch serves all the credit at once)
        self.defer_dispatch: Callable[[EntityView], None] | None = None
        # The partition key-less sends go to while its batch gathers: (partition, batch number)
        self._keyless_batch: tuple[int, int] | None = None
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

    def _check_settle(self, broker: PartitionBroker, token: uuid.UUID) -> PartitionBroker:
        if self._settles_freely():
            return broker
        lock = broker.lock_of(token)
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

        Returns the sequence numbers given to the stored messages (duplicates dropped by
        duplicate detection get none).
        """
        spec = self.spec
        self.touched = True
        self.check_sendable()
        if spec.requires_session:
            self._check_session_ids(messages)
        self.accessed_ms = now_ms
        groups = self._route(messages)
        for pid in groups:
            self._check_available(pid)
        if self.histories:
            for pid, msgs in groups.items():  # a refused MessageId must not enter the history
                need = sum(
                    m.size * len(t) for m, t in zip(msgs, self._targets(msgs, now_ms), strict=True)
                )
                refused = self.partitions[pid].refuse_over_quota(need)
                if refused is not None:
                    raise refused
            groups = {
                pid: kept
                for pid, msgs in groups.items()
                if (kept := self.histories[pid].admit(msgs, now_ms))
            }
            if not groups:
                done(None)
                return []
        part_done = join_completions(len(groups), done)
        numbers: list[int] = []
        for pid, msgs in groups.items():
            keyless = pid == self._keyless_pid
            numbers.extend(self._enqueue(pid, msgs, now_ms, part_done, keyless, 0))
        return numbers

    def send_many(
        self,
        sends: list[list[IncomingMessage]],
        now_ms: int,
        settle: Callable[[list[int], Exception | None], None],
    ) -> None:
        """Several sends at once (the transfers of one read on one link): each is checked and
        answered as its own send, but the sends bound for one partition are staged with one
        enqueue, so they share its bookkeeping and its commit.

        `settle(indices, error)` runs once per group of sends, after the commit that made them
        durable (or with the error that refused them), with the indices of its sends in
        `sends`. Key-less sends of one call share one partition, in turn [P8], as the
        messages of one batch do; sends with a key go where their key says [P7]. Entities
        with duplicate detection send one by one (their history admits per send).
        """
        if self.histories or len(sends) == 1:
            for i, msgs in enumerate(sends):
                try:
                    self.send(msgs, now_ms, _SettleOne(settle, i))
                except ServiceBusError as exc:
                    settle([i], exc)
            return
        try:
            self.check_sendable()
        except ServiceBusError as exc:
            settle(list(range(len(sends))), exc)
            return
        self.touched = True
        self.accessed_ms = now_ms
        needs_session = self.spec.requires_session
        groups: dict[tuple[int, bool], tuple[list[IncomingMessage], list[int]]] = {}
        keyless: int | None = None
        available: set[int] = set()  # partitions checked in this call
        for i, msgs in enumerate(sends):
            try:
                if needs_session:
                    self._check_session_ids(msgs)
                pid = self._partition_of(msgs)
                if pid is None:  # key-less: the call's partition in turn
                    if keyless is None:
                        keyless = self._keyless_partition()
                    pid = keyless
                    key = (pid, True)
                elif pid < 0:  # keys on several partitions: a send of its own
                    self.send(msgs, now_ms, _SettleOne(settle, i))
                    continue
                else:
                    key = (pid, False)
                if pid not in available:
                    self._check_available(pid)
                    available.add(pid)
            except ServiceBusError as exc:
                settle([i], exc)
                continue
            group = groups.get(key)
            if group is None:
                groups[key] = (list(msgs), [i])
            else:
                group[0].extend(msgs)
                group[1].append(i)
        for (pid, is_keyless), (msgs, indices) in groups.items():
            self._enqueue(pid, msgs, now_ms, _SettleOne(settle, indices), is_keyless, 0)

    def _check_session_ids(self, messages: list[IncomingMessage]) -> None:
        for msg in messages:
            if msg.session_id is None:
                raise InvalidOperation(
                    f"The SessionId was not set on a message, and it cannot be sent to the "
                    f"entity '{self.name}'. Entities that have session support enabled can "
                    "only receive messages that have the SessionId set to a valid value."
                )

    def _partition_of(self, messages: list[IncomingMessage]) -> int | None:
        """The partition one send's messages are pinned to by their keys [P6, P7]: None for
        key-less messages (round-robin), -1 when they name several partitions."""
        n = len(self.partitions)
        dup = self.spec.requires_duplicate_detection
        pid: int | None = None
        if n == 1 and len(messages) == 1:
            msg = messages[0]
            if msg.session_id is None or msg.partition_key is None:
                return 0  # no [P6] conflict possible: the one partition
        for msg in messages:
            mid = None if msg.message_id_assigned else msg.message_id  # sender's id only
            key = partition_key_of(msg.session_id, msg.partition_key, mid, dup)
            if n == 1:
                continue  # still enforces [P6]'s SessionId/PartitionKey rule
            at = None if key is None else partition_for_key(key, n)
            if msg is messages[0]:
                pid = at
            elif at != pid:
                return -1
        return 0 if n == 1 else pid

    def _enqueue(
        self,
        pid: int,
        msgs: list[IncomingMessage],
        now_ms: int,
        done: Done,
        keyless: bool,
        attempt: int,
    ) -> list[int]:
        """Enqueue on one partition; key-less messages fail over when it turns out full [P8]."""
        broker = self.partitions[pid]

        def on_done(error: Exception | None) -> None:
            if error is not None and keyless and (
                not broker.accepting or isinstance(error, QuotaExceeded)
            ):
                if attempt + 1 < len(self.partitions):
                    try:
                        nxt = self._next_round_robin()
                        self._check_available(nxt)
                    except ServiceBusError as exc:
                        done(exc)
                        return
                    self._enqueue(nxt, msgs, now_ms, done, keyless, attempt + 1)
                    return
            done(error)

        got = broker.enqueue(msgs, self._targets(msgs, now_ms), now_ms, on_done)
        return [n for n in got if n is not None]

    def _check_available(self, pid: int) -> None:
        """A send pinned to a partition fails while it is out of service or full [P7]."""
        broker = self.partitions[pid]
        if not broker.healthy:
            raise ServerBusy(
                f"Partition {pid} of '{self.name}' is unavailable "
                f"({broker.unhealthy_reason or 'offline'}); the send can be retried."
            )
        if not broker.accepting:
            if broker.store.room_low:
                raise broker.disk_full_error()
            if all(not p.accepting for p in self.partitions):
                raise QuotaExceeded(
                    f"Every partition of '{self.name}' is full (MaxSizeInMegabytes reached)."
                )
            raise ServerBusy(
                f"Partition {pid} of '{self.name}' is full; the send can be retried."
            )

    def routes_for(self, msg: IncomingMessage, now_ms: int) -> list[Route]:
        """Where one message sent here goes (the queue, or the matching subscriptions)."""
        return self._targets([msg], now_ms)[0]

    def _targets(self, messages: list[IncomingMessage], now_ms: int) -> list[list[Route]]:
        """Where each message goes: the queue, or the matching subscriptions of a topic (a
        topic's scheduled message waits in its scheduled sub-queue until it fires)."""
        subs = self.subscriptions
        if subs is None:
            return [[QUEUE_ROUTE]] * len(messages)
        return [
            [SCHEDULED_ROUTE]
            if msg.scheduled_enqueue_time_ms is not None and msg.scheduled_enqueue_time_ms > now_ms
            else subs.route(msg)
            for msg in messages
        ]

    def _route(self, messages: list[IncomingMessage]) -> dict[int, list[IncomingMessage]]:
        """Group messages by partition; key-less messages of one send share one partition."""
        n = len(self.partitions)
        self._keyless_pid = None
        if n == 1:
            for msg in messages:  # still enforce [P6]'s SessionId/PartitionKey rule
                partition_key_of(msg.session_id, msg.partition_key, None, False)
            return {0: messages}
        dup = self.spec.requires_duplicate_detection
        groups: dict[int, list[IncomingMessage]] = {}
        keys: set[str] = set()
        keyless_pid: int | None = None
        self._keyless_pid = None
        for msg in messages:
            mid = None if msg.message_id_assigned else msg.message_id  # sender's id only
            key = partition_key_of(msg.session_id, msg.partition_key, mid, dup)
            if key is None:
                if keyless_pid is None:
                    keyless_pid = self._keyless_pid = self._keyless_partition()
                pid = keyless_pid
            else:
                keys.add(key)
                pid = partition_for_key(key, n)
            groups.setdefault(pid, []).append(msg)
        if dup and len(keys) > 1:
            raise InvalidOperation(
                "Batching brokered messages with distinct SessionId, PartitionKey, or MessageId "
                "is not supported for an entity with partitioning and duplicate detection enabled."
            )
        return groups

    def _keyless_partition(self) -> int:
        """[P8] Where key-less sends go: the partitions in turn, one commit's worth each.

        Sends that arrive while the partition chosen last is still gathering its next batch
        (its commit has not started: the partition is busy committing, or waits for a commit
        slot of the entity) join that batch; once the batch is handed to the committer the
        next send takes the next partition. One at a time (a sender waiting for each
        acknowledgement) that is plain round-robin; a stream of sends fills one commit per
        partition in turn instead of one small commit per partition per socket read, and
        each commit's acknowledgements are one contiguous run (one disposition frame)."""
        last = self._keyless_batch
        if last is not None:
            pid, number = last
            broker = self.partitions[pid]  # (an entity's partitions never change)
            if broker.batch_number == number and broker.healthy and broker.accepting:
                return pid
        pid = self._next_round_robin()
        self._keyless_batch = (pid, self.partitions[pid].batch_number)
        return pid

    def _next_round_robin(self) -> int:
        """[P8] the next partition in turn that is in service and has room."""
        n = len(self.partitions)
        for _ in range(n):
            pid = self._round_robin % n
            self._round_robin += 1
            if self.partitions[pid].healthy and self.partitions[pid].accepting:
                return pid
        return self._round_robin % n

    # ---------------------------------------------------------------- locks
    def _broker_for(self, token: uuid.UUID) -> PartitionBroker:
        self.touched = True
        self._check_exists()
        pid = partition_of_token(token)
        if pid >= len(self.partitions):
            raise MessageLockLost(
                "The lock supplied is invalid. Either the lock expired, or the message has "
                "already been removed from the queue."
            )
        broker = self.partitions[pid]
        if not broker.healthy:
            raise ServerBusy(f"Partition {pid} of '{self.name}' is unavailable.")
        return broker

    def check_lock(self, token: uuid.UUID, now_ms: int) -> None:
        """Raise the error a settlement would get now (lock lost, partition unavailable)."""
        broker = self._broker_for(token)
        lock = broker.lock_of(token)
        if lock is None or (lock.session is None and lock.until_ms <= now_ms):
            raise MessageLockLost(
                "The lock supplied is invalid. Either the lock expired, or the message has "
                "already been removed from the queue."
            )

    def check_send(self, messages: list[IncomingMessage]) -> None:
        """Raise the error a send of these messages would get now (status, keys, availability)."""
        self.check_sendable()
        for pid in self._route(messages):
            self._check_available(pid)

    def complete(
        self, token: uuid.UUID, now_ms: int, done: Done | None, lazy: bool = False
    ) -> None:
        """Complete a locked message (`lazy`: nobody waits for the outcome, `done` may then
        be None; see PartitionBroker.complete)."""
        self._check_settle(self._broker_for(token), token).complete(token, now_ms, done, lazy)

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
                pid = key & 0xFFFF  # partition_of_token
                group = groups.get(pid)
                if group is None:
                    groups[pid] = [key]
                else:
                    group.append(key)
        free = self._settles_freely()
        for pid, group in groups.items():
            if pid >= len(parts) or not parts[pid].healthy:
                continue
            broker = parts[pid]
            if not free:
                group = [k for k in group if self._may_settle(broker, token_of(k))]
            broker.complete_lazy(group, now_ms)

    def _may_settle(self, broker: PartitionBroker, token: uuid.UUID) -> bool:
        try:
            self._check_settle(broker, token)
        except ServiceBusError:
            return False
        return True

    def abandon(
        self, token: uuid.UUID, now_ms: int, overrides: dict[str, bytes] | None, done: Done
    ) -> None:
        """Abandon a locked message (delivery count + 1)."""
        self._check_settle(self._broker_for(token), token).abandon(token, now_ms, overrides, done)

    def defer(
        self, token: uuid.UUID, now_ms: int, overrides: dict[str, bytes] | None, done: Done
    ) -> None:
        """Defer a locked message."""
        self._check_settle(self._broker_for(token), token).defer(token, now_ms, overrides, done)

    def dead_letter(
        self,
        token: uuid.UUID,
        now_ms: int,
        reason: str | None,
        description: str | None,
        overrides: dict[str, bytes] | None,
        done: Done,
    ) -> None:
        """Dead-letter a locked message."""
        self._check_settle(self._broker_for(token), token).dead_letter(token, now_ms, reason, description, overrides, done)

    def release(self, token: uuid.UUID, now_ms: int) -> None:
        """Unlock without counting a delivery."""
        try:
            broker = self._broker_for(token)
        except MessageLockLost:
            return
        broker.release(token, now_ms)

    def renew(self, token: uuid.UUID, now_ms: int) -> int:
        """Renew a lock; returns the new locked-until (ms)."""
        return self._check_settle(self._broker_for(token), token).renew(token, now_ms)

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
            if broker.healthy:
                ids.update(broker.session_ids(queue, changed_after_ms))
        return sorted(ids)

    def partition_of_sequence(self, seq: int) -> PartitionBroker:
        """The partition that issued a sequence number [P11]."""
        pid = (seq >> SEQUENCE_BITS) if self.partitioned else 0
        if pid >= len(self.partitions):
            raise MessageNotFound(f"No message with sequence number {seq}.")
        return self.partitions[pid]

    def receive_deferred(
        self, queue: str, numbers: list[int], now_ms: int, peek_lock: bool
    ) -> list[tuple[MessageRecord, Lock | None, int | None]]:
        """Fetch deferred messages by sequence number (all must exist)."""
        self.check_receive(queue)
        out = []
        for seq in numbers:
            broker = self.partition_of_sequence(seq)
            rec, lock = broker.take_deferred(queue, seq, now_ms, peek_lock)
            out.append((rec, lock, broker.partition_id if self.partitioned else None))
        return out

    def cancel_scheduled(self, numbers: list[int], now_ms: int, done: Done) -> None:
        """Cancel scheduled messages by sequence number; unknown numbers are an error."""
        brokers = []
        for seq in numbers:
            broker = self.partition_of_sequence(seq)
            if not broker.cancel_scheduled(self.scheduled_queue, seq, now_ms):
                raise MessageNotFound(f"The scheduled message with sequence number {seq} was not found.")
            brokers.append(broker)
        if not brokers:
            done(None)
            return
        one_done = join_completions(len(brokers), done)
        for broker in brokers:
            broker.after_commit(one_done)


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


def _with_scheduled(spec: EntitySpec) -> dict[str, SubQueueSettings]:
    """A topic's sub-queues plus the one holding its scheduled (not yet fanned out) messages."""
    if spec.kind != "topic":
        return spec.subqueues
    # Never delivered from: no delivery limit, no expiry before it fires, no DLQ.
    return {**spec.subqueues, SCHEDULED_QUEUE: SubQueueSettings(60_000, None, None, False, None)}


def _notify_session_lost(lock: SessionLock) -> None:
    """Tell the receiver holding a session that its lock expired (it detaches the link)."""
    callback = getattr(lock.owner, "session_lost", None)
    if callback is not None:
        callback(lock)


class Router:
    """All entities of all namespaces, their partition brokers, and the pending-work sets."""

    def __init__(
        self,
        data_dir: Path,
        wake: Callable[[], None],
        encode_value: Callable[[object], bytes] | None = None,
        encode_symbol: Callable[[object], bytes] | None = None,
        view_of_record: ViewOf | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.view_of_record = view_of_record  # filter view of a stored message (fan-out)
        self._wake = wake
        self._encode_value = encode_value
        self.encode_value = encode_value  # encodes carried properties (forwarding)
        self._encode_symbol = encode_symbol
        self.log_bodies = False  # set before add_entity: bodies in the partition logs
        # set before add_entity: False opens the stores without fsync (sbemu serve --ephemeral)
        self.durable = True
        self.entities: dict[tuple[str, str], Entity] = {}
        self.dirty: set[PartitionBroker] = set()
        self.lazy: set[PartitionBroker] = set()  # only lazy writes pending (flush_lazy)
        self._pending_views: set[EntityView] = set()
        self._deferred_views: set[EntityView] = set()  # served in the next turn
        self._released_ms = 0
        self._release_next = 0  # the store whose pages go next (_release_resident)
        self._release_credit = 0.0  # the fraction of a store carried to the next tick
        # Called with (entity, sub-queue prefix or None) when an entity or subscription is
        # deleted at runtime: the server detaches the links on it (amqp:not-found).
        self.removal_listeners: list[Callable[[Entity, str | None], None]] = []
        self.forwarder = Forwarder(self)
        self.idle: IdleTracker[Entity] = IdleTracker()

    # ---------------------------------------------------------------- set-up
    def add_entity(self, spec: EntitySpec) -> Entity:
        """Open (or create) the partition stores of an entity and load them."""
        base = self.data_dir / quote(spec.namespace.lower(), safe="") / quote(
            spec.name.lower(), safe=""
        )
        self._check_layout(base, spec)
        partitions: list[PartitionBroker] = []
        try:
            self._open_partitions(spec, base, partitions)
        except BaseException:
            for broker in partitions:  # a disk that fails half-way: close what was opened
                with contextlib.suppress(Exception):
                    broker.store.close()
            raise
        subscriptions = None
        if spec.kind == "topic":
            if self._encode_value is None or self._encode_symbol is None:
                raise ValueError("topics need value encoders for rule actions")
            subscriptions = Subscriptions(
                spec.name,
                spec.subscriptions,
                base / "rules.json",
                self._encode_value,
                self._encode_symbol,
            )
        entity = Entity(spec, partitions, subscriptions)
        entity.defer_dispatch = self._defer_dispatch
        for broker in partitions:
            broker.on_ready = self._ready_hook(entity, broker)
            broker.on_session_lost = _notify_session_lost
            if subscriptions is not None:
                broker.fan_out = self._fan_out_hook(subscriptions)
        self.entities[(spec.namespace.lower(), spec.name.lower())] = entity
        return entity

    def _open_partitions(
        self, spec: EntitySpec, base: Path, partitions: list[PartitionBroker]
    ) -> None:
        """Open and load each partition's store, appending the brokers as they open."""
        for pid in range(spec.partition_count):
            store = PartitionStore(
                str(base / f"partition-{pid:02d}"),
                map_size=map_size_for(spec.max_size_mb * MIB),
                durable=self.durable,
            )
            broker = PartitionBroker(
                store,
                namespace=spec.namespace,
                entity=spec.name,
                partition_id=pid,
                partitioned=spec.partitioned,
                queues=_with_scheduled(spec),
                mark_dirty=self._mark_dirty,
                mark_lazy=self._mark_lazy,
            )
            broker.log_bodies = self.log_bodies
            broker.max_bytes = spec.max_size_mb * MIB  # the quota, on stored byte counts
            try:
                broker.load()
                self.forwarder.load_markers(broker)
            except BaseException:
                store.close()
                raise
            partitions.append(broker)

    @staticmethod
    def _check_layout(base: Path, spec: EntitySpec) -> None:
        """[SB partitioning P4] partitioning can never change on an existing entity."""
        manifest = base / "entity.json"
        wanted = {"partition_count": spec.partition_count, "partitioned": spec.partitioned}
        if manifest.exists():
            try:
                have = json.loads(manifest.read_text())
            except ValueError:
                have = Router._torn_manifest(base, spec, wanted)
            if have != wanted:
                raise StorageLayoutError(
                    f"{spec.namespace}/{spec.name}: the data directory holds this entity with "
                    f"{have['partition_count']} partition(s) (partitioned={have['partitioned']}); "
                    f"the configuration asks for {spec.partition_count}. Partitioning cannot be "
                    "changed on an existing entity; use a new data directory or entity name."
                )
            return
        os.makedirs(base, exist_ok=True)
        # atomically and durably: a plain write can leave an empty file behind a crash or a
        # disk error (the create is journaled before the data), and then the entity's data
        # dir would not open again
        atomic_write(manifest, json.dumps(wanted).encode())

    @staticmethod
    def _torn_manifest(base: Path, spec: EntitySpec, wanted: dict[str, Any]) -> dict[str, Any]:
        """An entity.json left empty or torn (by an older sbemu's plain write, cut by a crash
        or a disk error): the partition directories on disk tell the layout. When they match
        the configuration (or there are none yet) the manifest is written again; otherwise the data dir is refused."""
        found = {p.name for p in base.glob("partition-*") if p.is_dir()}
        if not found or found == {f"partition-{pid:02d}" for pid in range(spec.partition_count)}:
            atomic_write(base / "entity.json", json.dumps(wanted).encode())
            return wanted
        raise StorageLayoutError(
            f"{spec.namespace}/{spec.name}: {base / 'entity.json'} is unreadable and the data "
            f"directory holds {len(found)} partition directories where the configuration asks "
            f"for {spec.partition_count}; restore the file or use a new data directory."
        )

    def _fan_out_hook(self, subscriptions: Subscriptions) -> Callable[[MessageRecord], list[Route]]:
        view_of = self.view_of_record

        def fan_out(rec: MessageRecord) -> list[Route]:
            return subscriptions.route(incoming_from_record(rec, view_of))

        return fan_out

    def wake(self) -> None:
        """Ask for a turn (run_pending and commits) soon."""
        self._wake()

    def _ready_hook(self, entity: Entity, broker: PartitionBroker) -> Callable[[str], None]:
        forwarder = self.forwarder

        def on_ready(queue: str) -> None:
            forwarder.notify(entity, broker, queue)
            if forwarder.has_work:
                self._wake()
            view = entity.views.get(queue)
            if view is not None and (view.consumers or view.session_waiters):
                self._pending_views.add(view)
                self._wake()

        return on_ready

    def _mark_dirty(self, broker: PartitionBroker) -> None:
        if broker not in self.dirty:
            self.dirty.add(broker)
            self._wake()

    def _mark_lazy(self, broker: PartitionBroker) -> None:
        """The partition has writes nobody waits for: committed with its next commit, or by
        flush_lazy() at the next timer tick (see PartitionBroker._dirty)."""
        if broker not in self.dirty:
            self.lazy.add(broker)

    def flush_lazy(self) -> None:
        """Make partitions with lazy writes only dirty: they commit in the next turn."""
        if self.lazy:
            self.dirty |= self.lazy
            self.lazy.clear()
            self._wake()

    # ---------------------------------------------------------------- lookup
    def lookup(self, namespace: str, path: str) -> tuple[Entity, EntityView]:
        """The entity and view a normalised path names; raises EntityNotFound."""
        ns = namespace.lower()
        names = [name for (n, name) in self.entities if n == ns]
        entity_name, sub = resolve_view_name(names, path)
        entity = self.entities[(ns, entity_name)]
        entity.touched = True
        view = entity.views.get(sub)
        if view is None:
            raise EntityNotFound(f"The messaging entity '{path}' could not be found.")
        entity.note_access(sub)  # a link attaching (AutoDeleteOnIdle)
        return entity, view

    # ---------------------------------------------------------------- turn work
    def _defer_dispatch(self, view: EntityView) -> None:
        """Serve `view` again in the next turn (a later loop pass), not in this one."""
        self._deferred_views.add(view)
        self._wake()

    def run_pending(self, now_ms: int) -> None:
        """Forward and serve views that got new messages since the last turn (and those a
        dispatch deferred to this turn)."""
        self.forwarder.pump(now_ms)
        if self._deferred_views:
            self._pending_views |= self._deferred_views
            self._deferred_views = set()
        while self._pending_views:
            views, self._pending_views = self._pending_views, set()
            for view in views:
                view.dispatch(now_ms)

    def has_pending(self) -> bool:
        """Whether views wait for a dispatch (run_pending has work)."""
        return bool(self._pending_views or self._deferred_views)

    def take_dirty(self) -> list[PartitionBroker]:
        """Brokers with writes to commit (lazy writes of theirs go along)."""
        dirty, self.dirty = self.dirty, set()
        if self.lazy:
            self.lazy -= dirty
        return list(dirty)

    def on_timer(self, now_ms: int) -> None:
        """Lock expiry, TTL expiry and scheduled activation on every partition."""
        if self.forwarder.on_timer(now_ms):
            self.forwarder.pump(now_ms)
        for entity in self.entities.values():
            for view in entity.views.values():
                if view.session_waiters:
                    view.expire_waiters(now_ms)
            for broker in entity.partitions:
                if not broker.healthy and not (broker.store_fault and broker.recover(now_ms)):
                    continue  # offline: its locks and timers wait until it is back
                if broker.store.room_low:
                    broker.check_room(now_ms)
                deadline = broker.next_deadline()
                if deadline is not None and deadline <= now_ms:
                    broker.on_timer(now_ms)
        self._release_resident(now_ms)

    def _release_resident(self, now_ms: int) -> None:
        """Let go of the store pages the partitions touched, each store about every
        RELEASE_RESIDENT_MS (the backlog stays on disk and in the page cache, not in the
        server's resident set).

        Spread over the timer ticks, a few stores at a time in turn: releasing every store at
        once held the event loop for ~10 ms every 2 s with 18 stores (a latency spike for
        every message in flight then)."""
        elapsed = now_ms - self._released_ms
        if elapsed <= 0:
            return
        self._released_ms = now_ms
        stores = [b.store for e in self.entities.values() for b in e.partitions]
        if not stores:
            return
        # this tick's share of a full round per RELEASE_RESIDENT_MS (at least one store)
        due = self._release_credit + len(stores) * min(elapsed, RELEASE_RESIDENT_MS) / RELEASE_RESIDENT_MS
        count = min(len(stores), int(due))
        self._release_credit = due - count
        start = self._release_next % len(stores)
        for i in range(count):
            stores[(start + i) % len(stores)].release_resident()
        self._release_next = start + count

    def set_partition_online(self, namespace: str, entity: str, pid: int, online: bool) -> dict:
        """Operator command: take one partition out of service or bring it back."""
        found = self.entities.get((namespace.lower(), entity.lower()))
        if found is None:
            raise EntityNotFound(f"The messaging entity '{namespace}/{entity}' could not be found.")
        if not 0 <= pid < len(found.partitions):
            raise EntityNotFound(
                f"'{namespace}/{entity}' has partitions 0..{len(found.partitions) - 1}, not {pid}."
            )
        found.partitions[pid].set_online(online)
        return self.partition_status(found)

    def apply_settings(self, namespace: str, name: str, settings: EntitySettings) -> Entity:
        """(Re)apply an entity's runtime settings (Status, forwarding, idle deletion): they take
        effect at once, for open links too. Receivers that may no longer receive are detached
        with entity-disabled; receivers of a re-enabled entity are served again."""
        entity = self.entities.get((namespace.lower(), name.lower()))
        if entity is None:
            raise EntityNotFound(f"The messaging entity '{namespace}/{name}' could not be found.")
        entity.settings = settings
        self.forwarder.rescan(entity)
        for view in entity.views.values():
            if not view.receivable:
                continue
            try:
                entity.check_receive(view.queue)
            except ServiceBusError as exc:
                for consumer in list(view.consumers):
                    refuse = getattr(consumer, "refuse", None)
                    if refuse is not None:
                        refuse(exc)
                continue
            if view.consumers or view.session_waiters:
                self._pending_views.add(view)
        self._wake()
        return entity

    def idle_entities(self, now_ms: int) -> list[tuple[Entity, str | None]]:
        """Queues and topics (sub-queue None) and subscriptions (their sub-queue name) idle for
        their AutoDeleteOnIdle window: the server deletes them."""
        return self.idle.due(list(self.entities.values()), now_ms)

    @staticmethod
    def partition_status(entity: Entity) -> dict:
        """Health of an entity and each partition [P18: Limited when any is unhealthy]."""
        parts = [
            {
                "partition": b.partition_id,
                "online": b.healthy,
                "accepting": b.accepting,
                "reason": b.unhealthy_reason or ("disk almost full" if b.store.room_low else None),
            }
            for b in entity.partitions
        ]
        healthy = all(b.healthy and b.accepting for b in entity.partitions)
        return {
            "namespace": entity.spec.namespace,
            "entity": entity.name,
            "status": "Available" if healthy else "Limited",
            "partitions": parts,
            "transfer": transfer_counts(entity),
        }

    def close(self) -> None:
        """Close every store (after the final commit)."""
        for entity in self.entities.values():
            for broker in entity.partitions:
                broker.store.close()

    # ---------------------------------------------------------------- management (admin API)
    def entity_dir(self, namespace: str, name: str) -> Path:
        """Where an entity's partitions, manifest and rules live."""
        return self.data_dir / quote(namespace.lower(), safe="") / quote(name.lower(), safe="")

    def get_entity(self, namespace: str, name: str) -> Entity | None:
        """An entity by namespace and name (any case), or None."""
        return self.entities.get((namespace.lower(), name.lower()))

    def _require(self, namespace: str, name: str) -> Entity:
        entity = self.get_entity(namespace, name)
        if entity is None:
            raise EntityNotFound(f"The messaging entity '{namespace}:{name}' could not be found.")
        return entity

    def _healthy_topic(self, namespace: str, topic: str) -> tuple[Entity, Subscriptions]:
        """A topic and its subscriptions for a subscription change; not-found, or 503 while
        a partition is down."""
        entity = self._require(namespace, topic)
        if entity.subscriptions is None:
            raise EntityNotFound(f"The messaging entity '{namespace}:{topic}' is not a topic.")
        self.check_healthy(entity)
        return entity, entity.subscriptions

    @staticmethod
    def check_healthy(entity: Entity) -> None:
        """[P17] management operations fail while a partition of the entity is unhealthy."""
        bad = [b.partition_id for b in entity.partitions if not b.healthy]
        if bad:
            raise ServerBusy(
                f"The operation on '{entity.name}' cannot be performed now: partition(s) "
                f"{', '.join(map(str, bad))} are unavailable. Retry once they are back."
            )

    def create_entity(self, spec: EntitySpec) -> Entity:
        """A queue or topic created at runtime; raises a 409 error when the name is taken."""
        if self.get_entity(spec.namespace, spec.name) is not None:
            raise EntityAlreadyExists(
                f"The messaging entity '{spec.namespace}:{spec.name}' already exists."
            )
        return self.add_entity(spec)

    def update_entity(self, spec: EntitySpec) -> Entity:
        """New settings for an existing entity; partitioning can never change [P4].

        Lock duration, delivery count, TTL and dead-lettering apply from the next lock or
        delivery; the spec's subscriptions must be the entity's current ones.
        """
        entity = self._require(spec.namespace, spec.name)
        self.check_healthy(entity)
        old = entity.spec
        if spec.partitioned != old.partitioned or spec.partition_count != old.partition_count:
            raise InvalidOperation(
                f"Partitioning cannot be changed for '{spec.name}': it was created with "
                f"EnablePartitioning={str(old.partitioned).lower()} and that can never change "
                "on an existing entity."
            )
        for broker in entity.partitions:
            broker.max_bytes = spec.max_size_mb * MIB  # a new MaxSizeInMegabytes applies at once
            for name, settings in spec.subqueues.items():
                if name in broker.queues:
                    broker.update_queue_settings(name, settings)
        entity.spec = spec
        return entity

    def remove_entity(self, namespace: str, name: str) -> Entity:
        """Take an entity out of service (no new links, current ones detached with not-found).

        The caller waits for in-flight commits, then calls drop_entity_data().
        """
        entity = self._require(namespace, name)
        self.check_healthy(entity)
        del self.entities[(namespace.lower(), name.lower())]
        entity.deleted = True  # links still holding it get not-found
        self._retire_views(entity, None)
        self.forwarder.forget(entity)
        self.idle.forget(entity)
        return entity

    def _retire_views(self, entity: Entity, prefix: str | None) -> None:
        for listener in list(self.removal_listeners):
            listener(entity, prefix)
        for queue, view in list(entity.views.items()):
            if prefix is not None and not (queue == prefix or queue.startswith(prefix + "/")):
                continue
            waiters, view.session_waiters = view.session_waiters, []
            for waiter in waiters:
                waiter.callback(None)
            view.consumers.clear()
            self._pending_views.discard(view)
            self._deferred_views.discard(view)
            if prefix is not None:
                del entity.views[queue]

    def drop_entity_data(self, entity: Entity) -> None:
        """Close a removed entity's stores and delete its directory (after its last commit)."""
        for broker in entity.partitions:
            self.dirty.discard(broker)
            broker.store.close()
        shutil.rmtree(self.entity_dir(entity.spec.namespace, entity.name), ignore_errors=True)

    def add_subscription(
        self,
        namespace: str,
        topic: str,
        spec: SubscriptionSpec,
        subqueues: dict[str, SubQueueSettings],
    ) -> Entity:
        """A subscription created at runtime: its sub-queues on every partition, its rules."""
        entity, subs = self._healthy_topic(namespace, topic)
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
        return entity

    def update_subscription(
        self,
        namespace: str,
        topic: str,
        spec: SubscriptionSpec,
        subqueues: dict[str, SubQueueSettings],
    ) -> Entity:
        """New delivery settings of a subscription (from the next lock or delivery)."""
        entity, subs = self._healthy_topic(namespace, topic)
        sub = subs.subscription(spec.name)
        sub.dead_letter_on_filter_exceptions = spec.dead_letter_on_filter_exceptions
        for broker in entity.partitions:
            for name, settings in subqueues.items():
                broker.update_queue_settings(name, settings)
        entity.spec = dataclasses.replace(
            entity.spec,
            subqueues={**entity.spec.subqueues, **subqueues},
            subscriptions=tuple(
                spec if s.name.lower() == spec.name.lower() else s
                for s in entity.spec.subscriptions
            ),
        )
        return entity

    def remove_subscription(
        self, namespace: str, topic: str, name: str, now_ms: int, done: Done
    ) -> None:
        """Delete a subscription: detach its links, delete its messages and rules."""
        entity, subs = self._healthy_topic(namespace, topic)
        subs.subscription(name)  # raises EntityNotFound
        prefix = subscription_queue(name)
        self._retire_views(entity, prefix)
        self.idle.forget(entity, prefix)
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
            subscriptions=tuple(
                s for s in entity.spec.subscriptions if s.name.lower() != name.lower()
            ),
        )

    def purge(
        self, namespace: str, entity_name: str | None, now_ms: int, done: Done
    ) -> dict[str, int]:
        """Delete every message (active, locked, deferred, scheduled, dead-lettered) of one
        entity, or of every entity of a namespace when ``entity_name`` is None. Each message is
        logged as purged; `done` runs after the commits. Returns messages purged per entity."""
        if entity_name is None:
            ns = namespace.lower()
            entities = [e for (n, _), e in self.entities.items() if n == ns]
            if not entities and ns not in {n for n, _ in self.entities}:
                raise EntityNotFound(f"The namespace '{namespace}' has no entities.")
        else:
            entities = [self._require(namespace, entity_name)]
        for entity in entities:
            self.check_healthy(entity)
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
