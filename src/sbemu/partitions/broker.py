"""One partition's message broker: sequence numbers, sub-queues, locks, settlement, expiry.

A partition [SB partitioning P1] holds one or more sub-queues: a queue and its dead-letter
queue, or (for a topic partition) each subscription and its dead-letter queue. Everything here
is in memory and authoritative; the store is the durable copy, written through a WriteBatch
that the server commits once per event-loop turn (group commit). Rules:

- A new message becomes visible (peekable, deliverable) only after the commit that stores it,
  and the sender is acknowledged only then: an accepted message is never lost.
- Settlements change memory at once and are confirmed to the client after their commit.
- Locks live in memory only: they are released on restart [issue 2, durability].
- No clocks: every operation takes `now_ms` (Unix milliseconds).

Sequence numbers are per partition, starting at 1; on a partitioned entity the partition id
sits in the top 16 bits [SB partitioning P11, contract 9].
"""

from __future__ import annotations

import heapq
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ..completions import Done
from ..errors import (
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    QuotaExceeded,
    ServerBusy,
    ServiceBusError,
    SessionCannotBeLocked,
    SessionLockLost,
)
from .records import (
    IncomingMessage,
    LogEvent,
    MessageRecord,
    MessageState,
    decode_message,
    encode_log,
    encode_message,
)
from .stats import PartitionStats
from .store import PartitionStore, StoreFull, WriteBatch

DLQ_SUFFIX = "/$deadletterqueue"
MAX_DELIVERY_COUNT_REASON = "MaxDeliveryCountExceeded"
TTL_EXPIRED_REASON = "TTLExpiredException"
SEQUENCE_BITS = 48
# A topic partition keeps scheduled messages here, not yet copied to any subscription: they
# are fanned out through the subscriptions' rules only when they fire [Azure: scheduling].
SCHEDULED_QUEUE = "$scheduled"

# expiry-heap entries tolerated beyond twice the live records before a rebuild
EXPIRY_HEAP_SLACK = 4096


@dataclass(frozen=True, slots=True)
class SubQueueSettings:
    """Delivery rules of one sub-queue (a queue, a subscription, or a dead-letter queue)."""

    lock_duration_ms: int
    max_delivery_count: int | None  # None: never dead-letter on delivery count (DLQs)
    default_ttl_ms: int | None  # None: messages never expire here (DLQs)
    dead_letter_on_expiration: bool
    dead_letter_queue: str | None  # name of the sub-queue that takes dead letters
    requires_session: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    """Where one copy of an incoming message goes (a topic sends one per matching rule)."""

    queue: str
    overrides: dict[str, bytes] | None = None  # encoded application-property changes
    dead_letter_reason: str | None = None  # set when the copy goes straight to a DLQ
    dead_letter_description: str | None = None


@dataclass(slots=True)
class Lock:
    """A peek-lock held on one message."""

    token: uuid.UUID
    queue: SubQueue
    seq: int
    until_ms: int
    session: SessionLock | None = None  # message locks of a session live as long as it does


@dataclass(slots=True, eq=False)
class SessionLock:
    """One receiver's exclusive hold on a session [contract 4.4]."""

    queue: SubQueue
    session_id: str
    owner: object
    until_ms: int


class SessionState:
    """One session of a session-enabled sub-queue: its ready line, lock and state."""

    __slots__ = ("session_id", "ready", "ready_set", "lock", "state", "state_changed_ms")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.ready: list[int] = []
        self.ready_set: set[int] = set()
        self.lock: SessionLock | None = None
        self.state: bytes | None = None
        self.state_changed_ms = 0

    def locked(self, now_ms: int) -> bool:
        """Whether a live lock holds this session."""
        return self.lock is not None and self.lock.until_ms > now_ms


def _merge_overrides(rec: MessageRecord, overrides: dict[str, bytes] | None) -> None:
    """Apply property changes (abandon/defer/dead-letter) on top of earlier ones."""
    if overrides:
        merged = dict(rec.property_overrides or {})
        merged.update(overrides)
        rec.property_overrides = merged


def make_lock_token(partition_id: int) -> uuid.UUID:
    """A random version-4 GUID whose last two bytes carry the partition id (for O(1) lookup)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    raw[14:16] = partition_id.to_bytes(2, "big")
    return uuid.UUID(bytes=bytes(raw))


def partition_of_token(token: uuid.UUID) -> int:
    """The partition id a lock token was issued by."""
    return token.int & 0xFFFF


class SubQueue:
    """The messages of one sub-queue in one partition, and which of them are ready.

    A session-enabled sub-queue keeps one ready line per session (FIFO inside a session);
    the others keep a single line in sequence order.
    """

    def __init__(self, name: str, settings: SubQueueSettings) -> None:
        self.name = name
        self.settings = settings
        self.records: dict[int, MessageRecord] = {}
        self._ready: list[int] = []
        self._ready_set: set[int] = set()
        self.locks: dict[int, Lock] = {}
        self.sessions: dict[str, SessionState] = {}

    def session(self, session_id: str) -> SessionState:
        """The session's state, created on first use."""
        sess = self.sessions.get(session_id)
        if sess is None:
            sess = self.sessions[session_id] = SessionState(session_id)
        return sess

    def make_ready(self, rec: MessageRecord) -> None:
        """Put a stored message (back) in line for delivery, in sequence order."""
        seq = rec.sequence_number
        if self.settings.requires_session:
            sess = self.session(rec.session_id or "")
            if seq not in sess.ready_set:
                sess.ready_set.add(seq)
                heapq.heappush(sess.ready, seq)
            return
        if seq not in self._ready_set:
            self._ready_set.add(seq)
            heapq.heappush(self._ready, seq)

    def unready(self, rec: MessageRecord) -> None:
        """Take a message out of line (lazy: the heap entry is skipped later)."""
        if self.settings.requires_session:
            sess = self.sessions.get(rec.session_id or "")
            if sess is not None:
                sess.ready_set.discard(rec.sequence_number)
            return
        self._ready_set.discard(rec.sequence_number)

    def pop_ready(self, session_id: str | None = None) -> MessageRecord | None:
        """The ready message with the lowest sequence number (of one session), taken out of line."""
        if session_id is not None:
            sess = self.sessions.get(session_id)
            if sess is None:
                return None
            heap, ready = sess.ready, sess.ready_set
        else:
            heap, ready = self._ready, self._ready_set
        while heap:
            seq = heapq.heappop(heap)
            if seq in ready:
                ready.discard(seq)
                rec = self.records.get(seq)
                if rec is not None:
                    return rec
        return None

    @property
    def ready_count(self) -> int:
        """How many messages wait for delivery (outside sessions)."""
        return len(self._ready_set)

    def available_session(self, now_ms: int) -> SessionState | None:
        """An unlocked session with a ready message (the one whose next message is oldest)."""
        best: SessionState | None = None
        for sess in self.sessions.values():
            if sess.ready_set and not sess.locked(now_ms):
                if best is None or min(sess.ready_set) < min(best.ready_set):
                    best = sess
        return best

    def active_count(self) -> int:
        """Messages that are active (ready or locked), as Azure's ActiveMessageCount."""
        return sum(1 for r in self.records.values() if r.state == MessageState.ACTIVE)


class PartitionBroker:
    """One partition of one entity: its sub-queues, counters, locks and pending writes."""

    def __init__(
        self,
        store: PartitionStore,
        *,
        namespace: str,
        entity: str,
        partition_id: int,
        partitioned: bool,
        queues: dict[str, SubQueueSettings],
        mark_dirty: Callable[[PartitionBroker], None],
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.entity = entity
        self.partition_id = partition_id
        self.partitioned = partitioned
        self.queues = {name: SubQueue(name, s) for name, s in queues.items()}
        self.locks: dict[uuid.UUID, Lock] = {}
        self._lock_heap: list[tuple[int, int, uuid.UUID]] = []
        self._expiry_heap: list[tuple[int, str, int]] = []
        self._scheduled_heap: list[tuple[int, str, int]] = []
        self._session_heap: list[tuple[int, str, str]] = []
        self._mark_dirty = mark_dirty
        self._batch = WriteBatch()
        self._callbacks: list[Done] = []
        self._next_seq = 1
        self._next_offset = 0
        self.log_bodies = False  # put message bodies in the partition log (serve --log-bodies)
        self.stats = PartitionStats()  # counters for the dashboard and /metrics
        self.on_ready: Callable[[str], None] = lambda queue: None
        self.on_session_lost: Callable[[SessionLock], None] = lambda lock: None
        # A topic partition: where a due scheduled message goes (the subscriptions' routes).
        self.fan_out: Callable[[MessageRecord], list[Route]] | None = None
        # healthy: False while taken offline or after a store I/O fault (no sends, no receives:
        # its messages wait, neither lost nor delivered). accepting: False once the store is
        # full (no new messages; receivers still drain it) until a commit frees space.
        self.healthy = True
        self.accepting = True
        self.unhealthy_reason: str | None = None

    # ---------------------------------------------------------------- load
    def load(self) -> None:
        """Read the store back: counters and messages; every lock starts released."""
        state = self.store.load()
        self._next_seq = state.meta.get("next_sequence", 1)
        self._next_offset = state.meta.get("next_log_offset", 0)
        for name, values in state.queues.items():
            sq = self.queues.get(name)
            if sq is None:  # a sub-queue no longer configured: keep its data, serve nothing
                continue
            for value in values:
                rec = decode_message(value)
                sq.records[rec.sequence_number] = rec
                self._track(sq, rec)
        for name, states in state.session_states.items():
            sq = self.queues.get(name)
            if sq is None:
                continue
            for session_id, data in states.items():
                sq.session(session_id).state = data

    def _compact_expiry_heap(self) -> None:
        """Drop expiry entries of messages already gone (found by the soak: entries of
        completed or deleted messages stayed until their TTL passed, so memory grew with
        throughput, ~100 bytes per consumed message for DefaultMessageTimeToLive). Rebuilt
        when it holds twice the live records: amortised O(1) per message."""
        live = sum(len(sq.records) for sq in self.queues.values())
        if len(self._expiry_heap) <= 2 * live + EXPIRY_HEAP_SLACK:
            return
        self._expiry_heap = [
            entry
            for entry in self._expiry_heap
            if (rec := self.queues[entry[1]].records.get(entry[2])) is not None
            and rec.state == MessageState.ACTIVE
        ]
        heapq.heapify(self._expiry_heap)

    def _track(self, sq: SubQueue, rec: MessageRecord) -> None:
        """Put a visible record in the structures that serve it, by its state."""
        if rec.state == MessageState.ACTIVE:
            sq.make_ready(rec)
            if rec.expires_at_ms is not None and sq.settings.default_ttl_ms is not None:
                heapq.heappush(self._expiry_heap, (rec.expires_at_ms, sq.name, rec.sequence_number))
                if len(self._expiry_heap) > EXPIRY_HEAP_SLACK:
                    self._compact_expiry_heap()
        elif rec.state == MessageState.SCHEDULED and rec.scheduled_enqueue_time_ms is not None:
            heapq.heappush(
                self._scheduled_heap, (rec.scheduled_enqueue_time_ms, sq.name, rec.sequence_number)
            )

    # ---------------------------------------------------------------- writes
    def _put(self, sq: SubQueue, rec: MessageRecord) -> None:
        self._batch.put(sq.name, rec.sequence_number, encode_message(rec))
        self._dirty()

    def _delete(self, sq: SubQueue, seq: int) -> None:
        self._batch.delete(sq.name, seq)
        self._dirty()

    def _log(
        self, sq: SubQueue, event: LogEvent, rec: MessageRecord, now_ms: int, reason: str | None = None
    ) -> None:
        self.stats.count(event)
        offset = self._next_offset
        self._next_offset += 1
        self._batch.log.append(
            (
                offset,
                encode_log(
                    namespace=self.namespace,
                    entity=self.entity,
                    queue=sq.name,
                    partition=self.partition_id,
                    offset=offset,
                    event=event,
                    record=rec,
                    event_ms=now_ms,
                    reason=reason,
                    with_body=self.log_bodies,
                ),
            )
        )
        self._batch.meta["next_log_offset"] = self._next_offset
        self._dirty()

    def remember_ids(self, ids: list[bytes], now_ms: int, sweep_before: int, done: Done) -> None:
        """Store duplicate-detection history in the next commit (with the messages it admits)
        and sweep history older than `sweep_before` in the same transaction; `done` after."""
        self._batch.dedup.extend((mid, now_ms) for mid in ids)
        self._batch.dedup_sweep_before = sweep_before
        self.after_commit(done)

    def put_forward_markers(self, keys: list[bytes], present: bool) -> None:
        """Write (or delete) auto-forwarding markers in the next commit (see forwarding.py)."""
        self._batch.markers.extend((k, present) for k in keys)
        self._dirty()

    def forward_out(
        self,
        queue: str,
        seq: int,
        now_ms: int,
        to_queue: str | None = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> None:
        """A message left a forwarding sub-queue: removed (forwarded), or moved to `to_queue`
        (the transfer dead-letter queue) with a dead-letter reason."""
        sq = self.queues[queue]
        rec = sq.records.get(seq)
        if rec is None:
            return
        sq.unready(rec)
        del sq.records[seq]
        self._delete(sq, seq)
        if to_queue is None:
            self._log(sq, LogEvent.COMPLETED, rec, now_ms, reason)
            return
        target = self.queues[to_queue]
        moved = rec.copy()
        moved.state = MessageState.ACTIVE
        moved.dead_letter_reason = reason
        moved.dead_letter_description = description
        target.records[seq] = moved
        target.make_ready(moved)
        self._put(target, moved)
        self._log(sq, LogEvent.DEADLETTERED, rec, now_ms, reason)
        self.on_ready(to_queue)

    def after_commit(self, done: Done) -> None:
        """Run `done` once the writes queued so far are committed."""
        self._callbacks.append(done)
        self._dirty()

    def _dirty(self) -> None:
        self._mark_dirty(self)

    def take_commit(self) -> tuple[WriteBatch, list[Done]] | None:
        """Hand the pending writes and their completions to the committer (None: nothing)."""
        if not self._batch and not self._callbacks:
            return None
        batch, callbacks = self._batch, self._callbacks
        self._batch, self._callbacks = WriteBatch(), []
        return batch, callbacks

    def commit_done(
        self, callbacks: list[Done], error: BaseException | None, batch: WriteBatch | None = None
    ) -> None:
        """Run the completions of a committed (or failed) batch, in order.

        A store fault marks the partition: full stops new messages, an I/O fault takes it out
        of service; completions see the error the SDKs map (quota, or server-busy: retried).
        """
        failure: Exception | None = None
        if error is not None:
            failure = self.store_failed(error)
        elif not self.accepting and batch is not None and any(op[0] == 1 for op in batch.ops):
            self.accepting = True  # messages were removed: there is room again
        for cb in callbacks:
            cb(failure)

    def store_failed(self, error: BaseException) -> ServiceBusError:
        """Record a store fault on this partition; returns the error to report."""
        where = f"partition {self.partition_id} of '{self.entity}'"
        if isinstance(error, StoreFull):
            self.accepting = False
            return QuotaExceeded(
                f"The store of {where} is full (MaxSizeInMegabytes reached); the message was "
                "not stored."
            )
        self.healthy = False
        self.unhealthy_reason = f"store fault: {error}"
        return ServerBusy(f"The store of {where} is unavailable: {error}")

    def set_online(self, online: bool, reason: str | None = None) -> None:
        """Take the partition out of service (operator command) or bring it back."""
        self.healthy = online
        self.unhealthy_reason = None if online else (reason or "taken offline")
        if online:
            self.accepting = True
            for name, sq in self.queues.items():
                if sq.ready_count or any(s.ready_set for s in sq.sessions.values()):
                    self.on_ready(name)

    # ---------------------------------------------------------------- sending
    def sequence_base(self) -> int:
        """The partition id shifted into the top 16 bits (0 on non-partitioned entities)."""
        return (self.partition_id << SEQUENCE_BITS) if self.partitioned else 0

    def enqueue(
        self,
        messages: list[IncomingMessage],
        routes: list[list[Route]],
        now_ms: int,
        done: Done,
    ) -> list[int | None]:
        """Store each message in the sub-queues its routes name; visible and acknowledged after
        the commit, all or nothing (one transaction).

        Returns each message's sequence number (None for a message routed nowhere). Copies of a
        message share its sequence number [Azure: topic sequence numbers], except a second copy
        in the same sub-queue (several rule actions matched), which gets a number of its own.
        """
        staged: list[tuple[SubQueue, MessageRecord]] = []
        numbers: list[int | None] = []
        base = self.sequence_base()
        for msg, targets in zip(messages, routes, strict=True):
            if not targets:
                numbers.append(None)
                continue
            seq = base | self._next_seq
            self._next_seq += 1
            numbers.append(seq)
            used: set[str] = set()
            for route in targets:
                sq = self.queues[route.queue]
                copy_seq = seq
                if route.queue in used:
                    copy_seq = base | self._next_seq
                    self._next_seq += 1
                used.add(route.queue)
                rec = self._new_record(sq, msg, copy_seq, now_ms)
                if route.overrides:
                    rec.property_overrides = dict(route.overrides)
                if route.dead_letter_reason is not None:
                    rec.dead_letter_reason = route.dead_letter_reason
                    rec.dead_letter_description = route.dead_letter_description
                self._put(sq, rec)
                event = LogEvent.SCHEDULED if rec.state == MessageState.SCHEDULED else LogEvent.ENQUEUED
                self._log(sq, event, rec, now_ms)
                if route.dead_letter_reason is not None:
                    self._log(sq, LogEvent.DEADLETTERED, rec, now_ms, route.dead_letter_reason)
                staged.append((sq, rec))
        self._batch.meta["next_sequence"] = self._next_seq

        def on_commit(error: Exception | None) -> None:
            if error is None:
                self.stats.incoming += len(messages)
                touched: set[str] = set()
                for sq, rec in staged:
                    sq.records[rec.sequence_number] = rec
                    self._track(sq, rec)
                    touched.add(sq.name)
                for name in touched:
                    self.on_ready(name)
            done(error)

        self.after_commit(on_commit)
        return numbers

    @staticmethod
    def _new_record(
        sq: SubQueue, msg: IncomingMessage, seq: int, now_ms: int
    ) -> MessageRecord:
        # The effective TTL is the smaller of the message's and the entity's default.
        ttl = msg.ttl_ms
        default = sq.settings.default_ttl_ms
        if default is not None and (ttl is None or ttl == 0 or ttl > default):
            ttl = default
        scheduled = msg.scheduled_enqueue_time_ms
        state = MessageState.ACTIVE
        if scheduled is not None and scheduled > now_ms:
            state = MessageState.SCHEDULED
        else:
            scheduled = None
        start = scheduled if scheduled is not None else now_ms
        return MessageRecord(
            sequence_number=seq,
            enqueued_time_ms=now_ms,
            state=state,
            delivery_count=0,
            message_id=msg.message_id,
            session_id=msg.session_id,
            partition_key=msg.partition_key,
            ttl_ms=ttl,
            expires_at_ms=(start + ttl) if ttl is not None else None,
            durable=msg.durable,
            priority=msg.priority,
            annotation_count=msg.annotation_count,
            annotations=msg.annotations,
            tail=msg.tail,
            size=msg.size,
            scheduled_enqueue_time_ms=scheduled,
            properties_span=msg.properties_span,
            body_span=msg.body_span,
            original_sequence_number=msg.original_sequence_number,
            transfer_hops=msg.transfer_hops,
        )

    # ---------------------------------------------------------------- delivery
    def has_ready(self, queue: str) -> bool:
        """Whether a sub-queue has a message waiting (outside sessions)."""
        return self.queues[queue].ready_count > 0

    def take_next(
        self,
        queue: str,
        now_ms: int,
        peek_lock: bool,
        session: SessionLock | None = None,
    ) -> tuple[MessageRecord, Lock | None] | None:
        """Take the next deliverable message: locked (peek-lock) or removed (receive-and-delete).

        With `session`, only that session's messages, and only while its lock is live.
        """
        sq = self.queues[queue]
        if session is not None:
            sess = sq.sessions.get(session.session_id)
            if sess is None or sess.lock is not session or session.until_ms <= now_ms:
                return None
        while True:
            rec = sq.pop_ready(session.session_id if session is not None else None)
            if rec is None:
                return None
            if rec.expires_at_ms is not None and rec.expires_at_ms <= now_ms and sq.settings.default_ttl_ms is not None:
                self._expire(sq, rec, now_ms)
                continue
            if peek_lock:
                return rec, self._lock(sq, rec, now_ms, session)
            # Receive-and-delete: consumed when put on the wire [contract 4.2].
            del sq.records[rec.sequence_number]
            self._delete(sq, rec.sequence_number)
            self._log(sq, LogEvent.DELIVERED, rec, now_ms)
            self._log(sq, LogEvent.COMPLETED, rec, now_ms)
            return rec, None

    def take_deferred(
        self, queue: str, seq: int, now_ms: int, peek_lock: bool
    ) -> tuple[MessageRecord, Lock | None]:
        """Fetch a deferred message by sequence number: locked, or removed (receive-and-delete)."""
        sq = self.queues[queue]
        rec = sq.records.get(seq)
        if rec is None or rec.state != MessageState.DEFERRED or seq in sq.locks:
            raise MessageNotFound(
                f"Failed to lock one or more specified messages. Either the message is already "
                f"locked or it does not exist. The sequence number {seq} is not a deferred "
                "message that can be received."
            )
        if peek_lock:
            return rec, self._lock(sq, rec, now_ms)
        del sq.records[seq]
        self._delete(sq, seq)
        self._log(sq, LogEvent.DELIVERED, rec, now_ms)
        self._log(sq, LogEvent.COMPLETED, rec, now_ms)
        return rec, None

    def _lock(
        self, sq: SubQueue, rec: MessageRecord, now_ms: int, session: SessionLock | None = None
    ) -> Lock:
        until = session.until_ms if session is not None else now_ms + sq.settings.lock_duration_ms
        lock = Lock(make_lock_token(self.partition_id), sq, rec.sequence_number, until, session)
        sq.locks[rec.sequence_number] = lock
        self.locks[lock.token] = lock
        if session is None:  # a session's message locks end with the session lock
            heapq.heappush(self._lock_heap, (lock.until_ms, rec.sequence_number, lock.token))
        self._log(sq, LogEvent.DELIVERED, rec, now_ms)
        return lock

    def _expire(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """A message outlived its TTL: dead-letter it or drop it."""
        sq.unready(rec)
        if sq.settings.dead_letter_on_expiration and sq.settings.dead_letter_queue:
            self._move_to_dlq(
                sq, rec, now_ms, TTL_EXPIRED_REASON, "The message expired and was dead lettered."
            )
        else:
            del sq.records[rec.sequence_number]
            self._delete(sq, rec.sequence_number)
            self._log(sq, LogEvent.EXPIRED, rec, now_ms)

    def _move_to_dlq(
        self,
        sq: SubQueue,
        rec: MessageRecord,
        now_ms: int,
        reason: str | None,
        description: str | None,
        overrides: dict[str, bytes] | None = None,
    ) -> None:
        assert sq.settings.dead_letter_queue is not None
        dlq = self.queues[sq.settings.dead_letter_queue]
        sq.unready(rec)
        del sq.records[rec.sequence_number]
        self._delete(sq, rec.sequence_number)
        moved = rec.copy()
        moved.state = MessageState.ACTIVE
        moved.dead_letter_reason = reason
        moved.dead_letter_description = description
        moved.dead_letter_source = None
        _merge_overrides(moved, overrides)
        dlq.records[moved.sequence_number] = moved
        dlq.make_ready(moved)
        self._put(dlq, moved)
        self._log(sq, LogEvent.DEADLETTERED, rec, now_ms, reason)
        self.on_ready(dlq.name)

    # ---------------------------------------------------------------- settlement
    def _live_lock(self, token: uuid.UUID, now_ms: int) -> Lock:
        lock = self.locks.get(token)
        if lock is not None and lock.session is not None:
            session = lock.session
            current = lock.queue.sessions.get(session.session_id)
            if current is None or current.lock is not session or session.until_ms <= now_ms:
                raise SessionLockLost(
                    f"The session lock for session '{session.session_id}' was lost. "
                    "Accept the session again."
                )
            return lock
        if lock is None or lock.until_ms <= now_ms:
            raise MessageLockLost(
                "The lock supplied is invalid. Either the lock expired, or the message has "
                "already been removed from the queue."
            )
        return lock

    def _unlock(self, lock: Lock) -> MessageRecord:
        del self.locks[lock.token]
        del lock.queue.locks[lock.seq]
        return lock.queue.records[lock.seq]

    def complete(self, token: uuid.UUID, now_ms: int, done: Done) -> None:
        """Delete a locked message; `done` runs after the commit."""
        lock = self._live_lock(token, now_ms)
        rec = self._unlock(lock)
        sq = lock.queue
        del sq.records[rec.sequence_number]
        self._delete(sq, rec.sequence_number)
        self._log(sq, LogEvent.COMPLETED, rec, now_ms)
        self.after_commit(done)

    def abandon(
        self, token: uuid.UUID, now_ms: int, overrides: dict[str, bytes] | None, done: Done
    ) -> None:
        """Unlock with delivery count + 1; dead-letter when MaxDeliveryCount is reached."""
        lock = self._live_lock(token, now_ms)
        rec = self._unlock(lock)
        self._redeliver(lock.queue, rec, now_ms, overrides, LogEvent.ABANDONED)
        self.after_commit(done)

    def release(self, token: uuid.UUID, now_ms: int) -> None:
        """Unlock without counting a delivery attempt [contract 4.7]."""
        lock = self.locks.get(token)
        if lock is None:
            return
        rec = self._unlock(lock)
        if rec.state == MessageState.ACTIVE:
            lock.queue.make_ready(rec)
        self._log(lock.queue, LogEvent.RELEASED, rec, now_ms)
        self.on_ready(lock.queue.name)

    def _redeliver(
        self,
        sq: SubQueue,
        rec: MessageRecord,
        now_ms: int,
        overrides: dict[str, bytes] | None,
        event: LogEvent,
    ) -> None:
        rec.delivery_count += 1
        _merge_overrides(rec, overrides)
        limit = sq.settings.max_delivery_count
        if rec.state == MessageState.DEFERRED:
            # A deferred message stays deferred when its lock ends [Azure: deferral].
            self._put(sq, rec)
            self._log(sq, event, rec, now_ms)
            return
        if limit is not None and rec.delivery_count >= limit and sq.settings.dead_letter_queue:
            self._log(sq, event, rec, now_ms)
            self._move_to_dlq(
                sq,
                rec,
                now_ms,
                MAX_DELIVERY_COUNT_REASON,
                f"Message could not be consumed after {limit} delivery attempts.",
            )
            return
        self._put(sq, rec)
        self._log(sq, event, rec, now_ms)
        sq.make_ready(rec)
        self.on_ready(sq.name)

    def defer(
        self, token: uuid.UUID, now_ms: int, overrides: dict[str, bytes] | None, done: Done
    ) -> None:
        """Set a locked message aside; it is fetched later by sequence number."""
        lock = self._live_lock(token, now_ms)
        rec = self._unlock(lock)
        rec.state = MessageState.DEFERRED
        _merge_overrides(rec, overrides)
        self._put(lock.queue, rec)
        self._log(lock.queue, LogEvent.DEFERRED, rec, now_ms)
        self.after_commit(done)

    def dead_letter(
        self,
        token: uuid.UUID,
        now_ms: int,
        reason: str | None,
        description: str | None,
        overrides: dict[str, bytes] | None,
        done: Done,
    ) -> None:
        """Move a locked message to the dead-letter queue with reason and description."""
        lock = self._live_lock(token, now_ms)
        rec = self._unlock(lock)
        sq = lock.queue
        if sq.settings.dead_letter_queue is None:
            raise ServiceBusError("A message in a dead-letter queue cannot be dead-lettered again.")
        self._move_to_dlq(sq, rec, now_ms, reason, description, overrides)
        self.after_commit(done)

    def renew(self, token: uuid.UUID, now_ms: int) -> int:
        """Extend a lock by the lock duration from now; returns the new locked-until (ms)."""
        lock = self._live_lock(token, now_ms)
        if lock.session is not None:
            raise InvalidOperation(
                "The lock of a message received from a session cannot be renewed; renew the "
                "session lock instead."
            )
        lock.until_ms = now_ms + lock.queue.settings.lock_duration_ms
        heapq.heappush(self._lock_heap, (lock.until_ms, lock.seq, lock.token))
        return lock.until_ms

    def lock_of(self, token: uuid.UUID) -> Lock | None:
        """The live lock for a token, if any (no expiry check)."""
        return self.locks.get(token)

    # ---------------------------------------------------------------- browsing
    def peek(
        self, queue: str, from_seq: int, count: int, session_id: str | None = None
    ) -> list[MessageRecord]:
        """Up to `count` messages with sequence number >= from_seq, oldest first (locks ignored)."""
        sq = self.queues[queue]
        if session_id is not None:
            seqs = sorted(
                s for s, r in sq.records.items() if s >= from_seq and r.session_id == session_id
            )[:count]
        else:
            seqs = sorted(s for s in sq.records if s >= from_seq)[:count]
        return [sq.records[s] for s in seqs]

    def remove(self, queue: str, seq: int, now_ms: int) -> MessageRecord | None:
        """Operator removal of one unlocked message (dashboard purge / resubmit), logged as
        completed; None when it is gone or locked. Durable with the next commit."""
        sq = self.queues[queue]
        rec = sq.records.get(seq)
        if rec is None or seq in sq.locks:
            return None
        sq.unready(rec)
        del sq.records[seq]
        self._delete(sq, seq)
        self._log(sq, LogEvent.COMPLETED, rec, now_ms)
        return rec

    def counts(self, queue: str) -> dict[str, int]:
        """Runtime counts of a sub-queue, as Azure reports them."""
        sq = self.queues[queue]
        active = deferred = scheduled = 0
        for r in sq.records.values():
            if r.state == MessageState.ACTIVE:
                active += 1
            elif r.state == MessageState.DEFERRED:
                deferred += 1
            else:
                scheduled += 1
        return {"active": active, "deferred": deferred, "scheduled": scheduled}

    # ---------------------------------------------------------------- time
    def on_timer(self, now_ms: int) -> None:
        """Expire locks and messages, activate scheduled messages that are due."""
        rec: MessageRecord | None  # the loops below also look records up (may be gone)
        heap = self._lock_heap
        while heap and heap[0][0] <= now_ms:
            until, _seq, token = heapq.heappop(heap)
            lock = self.locks.get(token)
            if lock is None or lock.until_ms != until:
                continue  # settled, or renewed (a newer heap entry exists)
            rec = self._unlock(lock)
            self._redeliver(lock.queue, rec, now_ms, None, LogEvent.LOCK_EXPIRED)
        exp = self._expiry_heap
        while exp and exp[0][0] <= now_ms:
            _at, name, seq = heapq.heappop(exp)
            sq = self.queues[name]
            rec = sq.records.get(seq)
            if rec is None or seq in sq.locks or rec.state != MessageState.ACTIVE:
                continue  # gone, or locked: checked again when it comes back
            self._expire(sq, rec, now_ms)
        sessions = self._session_heap
        while sessions and sessions[0][0] <= now_ms:
            until, name, session_id = heapq.heappop(sessions)
            sess = self.queues[name].sessions.get(session_id)
            if sess is None or sess.lock is None or sess.lock.until_ms != until:
                continue  # released, or renewed
            lost = sess.lock
            self._end_session(lost, now_ms, count_delivery=True)
            self.on_session_lost(lost)
        sched = self._scheduled_heap
        while sched and sched[0][0] <= now_ms:
            _at, name, seq = heapq.heappop(sched)
            sq = self.queues[name]
            rec = sq.records.get(seq)
            if rec is None or rec.state != MessageState.SCHEDULED:
                continue  # cancelled
            self._activate(sq, rec, now_ms)

    def _activate(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """A scheduled message is due: it is enqueued anew with a new sequence number [D3]."""
        if sq.name == SCHEDULED_QUEUE and self.fan_out is not None:
            self._fan_out(sq, rec, now_ms)
            return
        del sq.records[rec.sequence_number]
        self._delete(sq, rec.sequence_number)
        new = rec.copy()
        new.sequence_number = self.sequence_base() | self._next_seq
        self._next_seq += 1
        self._batch.meta["next_sequence"] = self._next_seq
        new.state = MessageState.ACTIVE
        new.enqueued_time_ms = now_ms
        new.scheduled_enqueue_time_ms = rec.scheduled_enqueue_time_ms
        sq.records[new.sequence_number] = new
        self._put(sq, new)
        self._log(sq, LogEvent.ACTIVATED, new, now_ms)
        self._track(sq, new)
        self.on_ready(sq.name)

    def _fan_out(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """A topic's scheduled message is due: copy it to the subscriptions whose rules match
        now, each copy enqueued anew (one new sequence number shared by the copies), in the
        same transaction that removes it from the scheduled sub-queue."""
        assert self.fan_out is not None
        del sq.records[rec.sequence_number]
        self._delete(sq, rec.sequence_number)
        self._log(sq, LogEvent.ACTIVATED, rec, now_ms)
        routes = self.fan_out(rec)
        if not routes:
            return
        base = self.sequence_base()
        seq = base | self._next_seq
        self._next_seq += 1
        used: set[str] = set()
        for route in routes:
            target = self.queues.get(route.queue)
            if target is None:
                continue
            copy_seq = seq
            if route.queue in used:
                copy_seq = base | self._next_seq
                self._next_seq += 1
            used.add(route.queue)
            new = self.restamp(target, rec, copy_seq, now_ms)
            new.scheduled_enqueue_time_ms = rec.scheduled_enqueue_time_ms
            if route.overrides:
                _merge_overrides(new, route.overrides)
            if route.dead_letter_reason is not None:
                new.dead_letter_reason = route.dead_letter_reason
                new.dead_letter_description = route.dead_letter_description
            target.records[new.sequence_number] = new
            self._put(target, new)
            self._log(target, LogEvent.ENQUEUED, new, now_ms)
            self._track(target, new)
            self.on_ready(target.name)
        self._batch.meta["next_sequence"] = self._next_seq

    @staticmethod
    def restamp(sq: SubQueue, rec: MessageRecord, seq: int, now_ms: int) -> MessageRecord:
        """A copy of a stored message enqueued anew in `sq`: new sequence number, active,
        delivery count 0, TTL capped by the sub-queue's default and counted from now."""
        new = rec.copy()
        new.sequence_number = seq
        new.enqueued_time_ms = now_ms
        new.state = MessageState.ACTIVE
        new.delivery_count = 0
        new.scheduled_enqueue_time_ms = None
        new.dead_letter_reason = new.dead_letter_description = new.dead_letter_source = None
        ttl = rec.ttl_ms
        default = sq.settings.default_ttl_ms
        if default is not None and (ttl is None or ttl == 0 or ttl > default):
            ttl = default
        new.ttl_ms = ttl
        new.expires_at_ms = (now_ms + ttl) if ttl is not None else None
        return new

    def cancel_scheduled(self, queue: str, seq: int, now_ms: int) -> bool:
        """Drop a scheduled message by its sequence number; False if there is none."""
        sq = self.queues.get(queue)
        if sq is None:
            return False
        rec = sq.records.get(seq)
        if rec is None or rec.state != MessageState.SCHEDULED:
            return False
        del sq.records[seq]
        self._delete(sq, seq)
        self._log(sq, LogEvent.CANCELLED, rec, now_ms)
        return True

    # ---------------------------------------------------------------- sessions
    def accept_session(
        self, queue: str, session_id: str | None, owner: object, now_ms: int
    ) -> SessionLock | None:
        """Lock a named session, or the next available one (None if there is none)."""
        sq = self.queues[queue]
        if session_id is None:
            sess = sq.available_session(now_ms)
            if sess is None:
                return None
        else:
            sess = sq.session(session_id)
            if sess.locked(now_ms) and sess.lock is not None and sess.lock.owner is not owner:
                raise SessionCannotBeLocked(
                    f"The requested session '{session_id}' cannot be accepted. It may be locked "
                    "by another receiver."
                )
        lock = SessionLock(sq, sess.session_id, owner, now_ms + sq.settings.lock_duration_ms)
        sess.lock = lock
        heapq.heappush(self._session_heap, (lock.until_ms, sq.name, sess.session_id))
        return lock

    def _session_lock(
        self, queue: str, session_id: str, owner: object | None, now_ms: int
    ) -> SessionLock:
        sess = self.queues[queue].sessions.get(session_id)
        lock = sess.lock if sess is not None else None
        if lock is None or lock.until_ms <= now_ms or (owner is not None and lock.owner is not owner):
            raise SessionLockLost(
                f"The session lock for session '{session_id}' has expired or is not held by "
                "this receiver."
            )
        return lock

    def renew_session(self, queue: str, session_id: str, owner: object | None, now_ms: int) -> int:
        """Extend a session lock (and its message locks); returns the new locked-until (ms)."""
        lock = self._session_lock(queue, session_id, owner, now_ms)
        lock.until_ms = now_ms + lock.queue.settings.lock_duration_ms
        for msg_lock in lock.queue.locks.values():
            if msg_lock.session is lock:
                msg_lock.until_ms = lock.until_ms
        heapq.heappush(self._session_heap, (lock.until_ms, queue, session_id))
        return lock.until_ms

    def session_owner(self, queue: str, session_id: str, now_ms: int) -> object | None:
        """Who holds a live lock on the session, if anyone."""
        sess = self.queues[queue].sessions.get(session_id)
        return sess.lock.owner if sess is not None and sess.locked(now_ms) and sess.lock else None

    def release_session(self, lock: SessionLock, now_ms: int) -> None:
        """The receiver closed: end its session lock; its unsettled messages become ready."""
        sess = lock.queue.sessions.get(lock.session_id)
        if sess is not None and sess.lock is lock:
            self._end_session(lock, now_ms, count_delivery=False)

    def _end_session(self, lock: SessionLock, now_ms: int, count_delivery: bool) -> None:
        sq = lock.queue
        sess = sq.sessions[lock.session_id]
        sess.lock = None
        for msg_lock in [m for m in sq.locks.values() if m.session is lock]:
            rec = self._unlock(msg_lock)
            if count_delivery:
                self._redeliver(sq, rec, now_ms, None, LogEvent.LOCK_EXPIRED)
            else:
                if rec.state == MessageState.ACTIVE:
                    sq.make_ready(rec)
                self._log(sq, LogEvent.RELEASED, rec, now_ms)
        if sess.ready_set:
            self.on_ready(sq.name)

    def get_session_state(self, queue: str, session_id: str) -> bytes | None:
        """A session's stored state (None if it has none)."""
        sess = self.queues[queue].sessions.get(session_id)
        return sess.state if sess is not None else None

    def set_session_state(
        self, queue: str, session_id: str, state: bytes | None, now_ms: int, done: Done
    ) -> None:
        """Store (or clear) a session's state durably; `done` runs after the commit."""
        sess = self.queues[queue].session(session_id)
        sess.state = state
        sess.state_changed_ms = now_ms
        self._batch.put_session_state(queue, session_id, state)
        self._dirty()
        self.after_commit(done)

    def session_ids(self, queue: str, changed_after_ms: int | None = None) -> list[str]:
        """Sessions with messages or state (or, with changed_after_ms, whose state changed since)."""
        sq = self.queues[queue]
        if changed_after_ms is not None:
            return sorted(
                sid for sid, sess in sq.sessions.items() if sess.state_changed_ms > changed_after_ms
            )
        with_messages = {r.session_id or "" for r in sq.records.values()}
        with_state = {sid for sid, sess in sq.sessions.items() if sess.state is not None}
        return sorted(with_messages | with_state)

    def next_deadline(self) -> int | None:
        """The earliest time (ms) on_timer has work, or None."""
        heaps = (self._lock_heap, self._expiry_heap, self._scheduled_heap, self._session_heap)
        times = [h[0][0] for h in heaps if h]
        return min(times) if times else None

    # ---------------------------------------------------------------- management (admin API)
    def add_queue(self, name: str, settings: SubQueueSettings) -> None:
        """A sub-queue created at runtime (a new subscription, its DLQs)."""
        if name not in self.queues:
            self.queues[name] = SubQueue(name, settings)

    def update_queue_settings(self, name: str, settings: SubQueueSettings) -> None:
        """New delivery rules for a sub-queue; they apply from the next lock, expiry or delivery."""
        self.queues[name].settings = settings

    def purge_queue(self, name: str, now_ms: int) -> int:
        """Delete every message of a sub-queue (active, locked, deferred, scheduled), each logged
        as purged; held locks end (settling them fails with lock-lost). Returns the count."""
        sq = self.queues[name]
        for token in [t for t, lock in self.locks.items() if lock.queue is sq]:
            del self.locks[token]
        count = 0
        for seq in sorted(sq.records):
            rec = sq.records[seq]
            self._delete(sq, seq)
            self._log(sq, LogEvent.PURGED, rec, now_ms)
            count += 1
        sq.records.clear()
        sq.locks.clear()
        sq._ready.clear()
        sq._ready_set.clear()
        for sess in sq.sessions.values():
            sess.ready.clear()
            sess.ready_set.clear()
        return count

    def drop_queue(self, name: str, now_ms: int) -> int:
        """Purge a sub-queue and forget it (a deleted subscription); returns the purged count."""
        if name not in self.queues:
            return 0
        count = self.purge_queue(name, now_ms)
        for session_id, sess in self.queues[name].sessions.items():
            if sess.state is not None:
                self._batch.put_session_state(name, session_id, None)
        del self.queues[name]
        for attr in ("_expiry_heap", "_scheduled_heap", "_session_heap"):
            kept = [item for item in getattr(self, attr) if item[1] != name]
            heapq.heapify(kept)
            setattr(self, attr, kept)
        return count
