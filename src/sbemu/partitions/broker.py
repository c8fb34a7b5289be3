"""One partition's message broker: sequence numbers, sending, delivery, settlement, sessions.

A partition [SB partitioning P1] holds one or more sub-queues: a queue and its dead-letter
queue, or (for a topic partition) each subscription and its dead-letter queue. Messages live
in the store (LMDB) only. This class is the front; each thing it keeps has a room of its own:

- subqueue.py: the index of each sub-queue (read-ahead, ready lines, sessions, counts) and
  the reads through the overlay;
- staging.py: the writes staged for the next commit, the overlay that shows them, the
  counters persisted with them (the server commits once per event-loop turn, group commit);
- deadlines.py: TTL and schedule timers (a sorted database in the store) and derived expiry;
- locks.py: message and session locks and the heaps that expire them;
- health.py: whether the partition serves (quota, disk room, store faults, operator holds);
- loader.py: loading the partition from its store, at start and again after a store fault;
- transitions.py: what happens to a stored message (every move between states and sub-queues);
- receiving.py: taking messages for receivers and settling their locks.

Rules:
- A new message becomes visible (peekable, deliverable) only after the commit that stores it,
  and the sender is acknowledged only then: an accepted message is never lost.
- Settlements change memory at once and are confirmed to the client after their commit.
- Locks live in memory only: they are released on restart, as the service does.
- No clocks: every operation takes `now_ms` (Unix milliseconds).

Sequence numbers are per partition, starting at 1; on a partitioned entity the partition id
sits in the top 16 bits [SB partitioning P11, contract 9].
"""

from __future__ import annotations

from collections.abc import Callable

from .completions import Done
from .deadlines import Deadlines
from .health import Health
from .loader import PartitionLoader, stored_counts
from .locks import LockTable
from .outcomes import Outcome
from .reader import SubQueueReader
from .receiving import Receiving
from .records import (
    IncomingMessage,
    LogEvent,
    MessageRecord,
    MessageState,
)
from .staging import Staging
from .stats import PartitionStats
from .store import PartitionStore
from .subqueue import (
    Lock,
    SessionLock,
    SessionOwner,
    SubQueue,
    SubQueueSettings,
)
from .transitions import Route, Transitions
from .writebatch import WriteBatch

DLQ_SUFFIX = "/$deadletterqueue"
SEQUENCE_BITS = 48


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
        mark_lazy: Callable[[PartitionBroker], None] | None = None,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.entity = entity
        self.partition_id = partition_id
        self.partitioned = partitioned
        self.queues = {name: SubQueue(name, s) for name, s in queues.items()}
        self.stats = PartitionStats()  # counters for the dashboard and /metrics
        # Writes nobody waits for (lazy) ride with the partition's next commit (staging.py).
        self.staging = Staging(
            self, namespace=namespace, entity=entity, partition_id=partition_id,
            sequence_base=(partition_id << SEQUENCE_BITS) if partitioned else 0,
            stats=self.stats, mark_dirty=mark_dirty, mark_lazy=mark_lazy,
        )  # fmt: skip
        self.reader = SubQueueReader(
            store,
            self.queues,
            self.staging.overlay,
            lambda queue: self.transitions.on_ready(queue),
            self.staging.read_later,
        )
        self.lock_table = LockTable()
        self.locks = self.lock_table.by_key  # live locks by their token's int
        self.deadlines = Deadlines(store, self.queues, self.staging, self.reader)
        self.health = Health(store, entity, partition_id, partitioned)
        self.transitions = Transitions(
            self.queues, self.staging, self.deadlines, self.health, self.stats
        )
        self.on_session_lost: Callable[[SessionLock], None] = lambda lock: None
        self.loader = PartitionLoader(
            store, self.queues, self.staging, self.reader, self.lock_table, self.deadlines,
            self.health, self.transitions, f"Partition {partition_id} of '{entity}'",
            lambda lock: self.on_session_lost(lock),
        )  # fmt: skip
        self.receiving = Receiving(
            self.queues, self.reader, self.lock_table, self.staging, self.transitions,
            partition_id,
        )  # fmt: skip

    @property
    def on_ready(self) -> Callable[[str], None]:
        """Told (with the sub-queue's name) when messages of a sub-queue are in line."""
        return self.transitions.on_ready

    @on_ready.setter
    def on_ready(self, hook: Callable[[str], None]) -> None:
        self.transitions.on_ready = hook

    @property
    def fan_out(self) -> Callable[[MessageRecord], list[Route]] | None:
        """A topic partition: where a due scheduled message goes (the subscriptions' routes)."""
        return self.transitions.fan_out

    @fan_out.setter
    def fan_out(self, hook: Callable[[MessageRecord], list[Route]] | None) -> None:
        self.transitions.fan_out = hook

    @property
    def forwards(self) -> Callable[[str], bool]:
        """Whether a sub-queue forwards (see Transitions.forwards)."""
        return self.transitions.forwards

    @forwards.setter
    def forwards(self, hook: Callable[[str], bool]) -> None:
        self.transitions.forwards = hook

    # ---------------------------------------------------------------- load
    def load(self) -> None:
        """Open the store without reading the backlog (see PartitionLoader.load, start)."""
        self.loader.start(self.loader.load())

    # ---------------------------------------------------------------- the store
    def close(self) -> None:
        """Close the store (after the partition's last commit)."""
        self.store.close()

    def release_resident(self) -> None:
        """Let go of the store pages this partition touched (they stay in the page cache)."""
        self.store.release_resident()

    def forward_markers(self) -> list[bytes]:
        """The auto-forwarding markers stored (see forwarding.py)."""
        return self.store.forward_markers()

    def dedup_seen(self, ids: list[bytes], since: int) -> set[bytes]:
        """Which MessageIds the duplicate history holds from `since` (Unix ms) on."""
        return self.store.dedup_seen(ids, since)

    def commit_batch(self, batch: WriteBatch) -> None:
        """Write a batch take_commit handed over, in one durable transaction (any thread;
        raises StoreError, or what lmdb raised)."""
        self.store.commit(batch)

    # ---------------------------------------------------------------- the partition log
    @property
    def log_dir(self) -> str:
        """The partition's directory, where readers of its log register (logs/retention.py)."""
        return self.store.path

    def log_bounds(self) -> tuple[int, int]:
        """(first offset still stored, next offset) of the partition log (any thread)."""
        return self.store.log_bounds()

    def trim_log(self, below: int) -> int:
        """Delete up to TRIM_LIMIT log records below offset `below` in one transaction (any
        thread); returns how many were deleted."""
        return self.store.trim_log(below)

    # ---------------------------------------------------------------- writes
    def remember_ids(self, ids: list[bytes], now_ms: int, sweep_before: int, done: Done) -> None:
        """Store duplicate-detection history in the next commit (with the messages it admits)
        and sweep history older than `sweep_before` in the same transaction; `done` after."""
        batch = self.staging.batch
        batch.dedup.extend((mid, now_ms) for mid in ids)
        batch.dedup_sweep_before = sweep_before
        self.after_commit(done)

    def put_forward_markers(self, keys: list[bytes], present: bool) -> None:
        """Write (or delete) auto-forwarding markers in the next commit (see forwarding.py)."""
        self.staging.batch.markers.extend((k, present) for k in keys)
        self.staging.dirty()

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
        rec = self.reader.get(sq, seq)
        if rec is not None:
            self.transitions.forward_out(sq, rec, now_ms, to_queue, reason, description)

    def after_commit(self, done: Done) -> None:
        """Run `done` once the writes queued so far are committed."""
        self.staging.after_commit(done)

    @property
    def batch_number(self) -> int:
        """Which batch the writes staged now go into (see Staging.batch_number)."""
        return self.staging.batch_number

    def take_commit(self) -> tuple[WriteBatch, list[Done]] | None:
        """Hand the pending writes and their completions to the committer (None: nothing)."""
        taken = self.staging.take_commit()
        if taken is not None:
            self.deadlines.batch_taken()
        return taken

    def commit_done(self, callbacks: list[Done], error: BaseException | None) -> None:
        """Run the completions of a committed (or failed: see PartitionLoader.commit_failed)
        batch, in order."""
        touched = self.staging.landed()
        if error is not None:
            self.loader.commit_failed(callbacks, error)
            return
        # The sub-queues the batch wrote may have ready messages past their scan.
        for name in touched or ():
            sq = self.queues.get(name)
            if sq is not None and not sq.settings.requires_session:
                sq.more_in_store = True
        self.health.commit_landed()
        # No read of the timers here: the next timer time stays a lower bound. Timers added
        # lowered it as they were staged, and one removed (a completed message's expiry)
        # only makes the tick that reaches it look early; the tick then finds nothing due
        # and reads the true first timer. (Reading it here would cost a read transaction per
        # commit on the loop thread.)
        for cb in callbacks:
            cb(None)

    def recover(self, now_ms: int) -> bool:
        """After a store fault: reopen and reload (see PartitionLoader.recover)."""
        return self.loader.recover(now_ms)

    def set_online(self, online: bool, reason: str | None = None) -> None:
        """Take the partition out of service or bring it back (see PartitionLoader)."""
        self.loader.set_online(online, reason)

    # ---------------------------------------------------------------- sending
    def enqueue(
        self,
        messages: list[IncomingMessage],
        routes: list[list[Route]],
        now_ms: int,
        done: Done,
    ) -> list[int | None]:
        """Store each message in the sub-queues its routes name; acknowledged after the commit,
        all or nothing (one transaction); delivered as soon as it is in line (see
        Transitions.enqueue: when the read-ahead has caught up, before the commit lands).

        Returns each message's sequence number (None for a message routed nowhere). Copies of a
        message share its sequence number [Azure: topic sequence numbers], except a second copy
        in the same sub-queue (several rule actions matched), which gets a number of its own.
        """
        quota = self.health.refuse_over_quota(
            sum(msg.size * len(targets) for msg, targets in zip(messages, routes, strict=True))
        )
        if quota is not None:  # refused before anything is staged: answered after this turn
            self.after_commit(lambda _error: done(quota))
            return [None] * len(messages)
        return self.transitions.enqueue(messages, routes, now_ms, done)

    # ---------------------------------------------------------------- delivery
    def has_ready(self, queue: str) -> bool:
        """Whether a sub-queue has a message waiting (outside sessions)."""
        return self.queues[queue].has_ready()

    def take_next(
        self, queue: str, now_ms: int, peek_lock: bool, session: SessionLock | None = None
    ) -> tuple[MessageRecord, Lock | None] | None:
        """The next deliverable message, peek-locked or removed (see Receiving.take_next)."""
        return self.receiving.take_next(queue, now_ms, peek_lock, session)

    def take_batch(
        self, queue: str, now_ms: int, limit: int
    ) -> list[tuple[MessageRecord, Lock | None]]:
        """Up to `limit` messages peek-locked at once (see Receiving.take_batch)."""
        return self.receiving.take_batch(queue, now_ms, limit)

    def take_deferred(
        self,
        queue: str,
        seq: int,
        now_ms: int,
        peek_lock: bool,
        read: MessageRecord | None = None,
    ) -> tuple[MessageRecord, Lock | None]:
        """A deferred message by sequence number (see Receiving.take_deferred)."""
        return self.receiving.take_deferred(queue, seq, now_ms, peek_lock, read)

    # ---------------------------------------------------------------- settlement
    def settle(self, key: int, outcome: Outcome, now_ms: int, done: Done) -> None:
        """Settle a locked message as `outcome` says (see Receiving.settle)."""
        self.receiving.settle(key, outcome, now_ms, done)

    def complete_lazy(self, keys: list[int], now_ms: int) -> None:
        """Complete a run of locks nobody waits for (see Receiving.complete_lazy)."""
        self.receiving.complete_lazy(keys, now_ms)

    def release(self, key: int, now_ms: int) -> None:
        """Unlock without counting a delivery attempt (see Receiving.release)."""
        self.receiving.release(key, now_ms)

    def renew(self, key: int, now_ms: int) -> int:
        """Extend a lock; returns the new locked-until (see Receiving.renew)."""
        return self.receiving.renew(key, now_ms)

    def lock_of(self, key: int) -> Lock | None:
        """The live lock for a lock key, if any (no expiry check)."""
        return self.locks.get(key)

    # ---------------------------------------------------------------- browsing
    def peek(
        self,
        queue: str,
        from_seq: int,
        count: int,
        session_id: str | None = None,
        large_later: bool = False,
    ) -> list[MessageRecord]:
        """Up to `count` messages with sequence number >= from_seq, oldest first (locks
        ignored; `large_later`: see SubQueueReader.peek)."""
        return self.reader.peek(self.queues[queue], from_seq, count, session_id, large_later)

    def locked_until(self, queue: str, seq: int) -> int | None:
        """When a receiver's lock on message `seq` expires (Unix ms); None when it is unlocked."""
        sq = self.queues.get(queue)
        lock = sq.locks.get(seq) if sq is not None else None
        return lock.until_ms if lock is not None else None

    def remove(self, queue: str, seq: int, now_ms: int) -> MessageRecord | None:
        """Operator removal of one unlocked message (dashboard purge / resubmit), logged as
        completed; None when it is gone or locked. Durable with the next commit."""
        sq = self.queues[queue]
        if seq in sq.locks:
            return None
        rec = self.reader.get(sq, seq)
        if rec is None:
            return None
        sq.unready(rec)
        self.transitions.remove(sq, rec)
        self.transitions.log(sq, LogEvent.COMPLETED, rec, now_ms)
        return rec

    def contains(self, queue: str, seq: int) -> bool:
        """Whether a sub-queue holds the message now (uncommitted changes included)."""
        sq = self.queues.get(queue)
        return sq is not None and self.reader.get(sq, seq) is not None

    def make_ready(self, queue: str, rec: MessageRecord) -> None:
        """Put a message taken out of line (take_ready) back in line, if it is still stored."""
        sq = self.queues.get(queue)
        if sq is not None and self.reader.get(sq, rec.sequence_number) is not None:
            sq.make_ready(rec)

    def take_ready(self, queue: str, limit: int) -> list[MessageRecord]:
        """Up to `limit` ready messages of a sub-queue, oldest first, across its sessions
        too, taken out of line without a lock (the forwarder's outbox step); each is put back
        with make_ready or removed with forward_out."""
        return self.reader.take_ready(self.queues[queue], limit)

    def in_line_before_commit(self, queue: str) -> bool:
        """Whether a message of the sub-queue was put in line before its commit (early
        delivery) and that commit has not landed yet: such a message is not stored yet."""
        sq = self.queues.get(queue)
        return sq is not None and not self.staging.has_landed(sq.early_batch)

    def has_ready_any(self, queue: str) -> bool:
        """Whether a sub-queue may have a ready message, in or outside sessions."""
        sq = self.queues.get(queue)
        return sq is not None and sq.has_ready_any()

    def counts(self, queue: str) -> dict[str, int]:
        """Runtime counts of a sub-queue, as Azure reports them."""
        active, deferred, scheduled = self.queues[queue].counts
        return {"active": active, "deferred": deferred, "scheduled": scheduled}

    def has_queue(self, queue: str) -> bool:
        """Whether this partition holds a sub-queue of that name."""
        return queue in self.queues

    def subqueue_settings(self) -> dict[str, SubQueueSettings]:
        """Each sub-queue's delivery rules, by name (in the order the partition keeps them)."""
        return {name: sq.settings for name, sq in self.queues.items()}

    def stored_bytes(self, queue: str) -> int:
        """Bytes of the messages a sub-queue holds (its SizeInBytes), 0 for one this partition
        does not have; kept per sub-queue as messages come and go, so no message is read."""
        sq = self.queues.get(queue)
        return max(sq.bytes, 0) if sq is not None else 0

    # ---------------------------------------------------------------- time
    def on_timer(self, now_ms: int) -> None:
        """Expire locks and messages, activate scheduled messages that are due."""
        table = self.lock_table
        for lock in table.expired(now_ms):
            rec = table.unlock(lock)
            self.transitions.redeliver(lock.queue, rec, now_ms, None, LogEvent.LOCK_EXPIRED)
        for until, name, session_id in table.expired_sessions(now_ms):
            sess = self.queues[name].sessions.get(session_id)
            if sess is None or sess.lock is None or sess.lock.until_ms != until:
                if sess is not None and sess.lock is not None:
                    table.rearm_session(sess.lock, until)
                continue  # released, or renewed
            lost = sess.lock
            self._end_session(lost, now_ms, count_delivery=True)
            self.on_session_lost(lost)
        self.deadlines.on_timer(now_ms, self.transitions.expire, self.transitions.activate)
        for sq in list(self.reader.session_scans()):
            self.reader.scan_chunk(sq)

    def next_deadline(self) -> int | None:
        """The earliest time (ms) on_timer has work, or None."""
        times = [
            t for t in (self.lock_table.next_deadline(), self.deadlines.next_due()) if t is not None
        ]
        if self.reader.scanning and self.reader.session_scans():
            times.append(0)  # a restart's session scan goes on at every tick
        return min(times) if times else None

    def cancel_scheduled(
        self, queue: str, seq: int, now_ms: int, read: MessageRecord | None = None
    ) -> bool:
        """Drop a scheduled message by its sequence number; False if there is none (`read`:
        its record as read_stored read it)."""
        sq = self.queues.get(queue)
        if sq is None:
            return False
        rec = self.reader.get(sq, seq, read)
        if rec is None or rec.state != MessageState.SCHEDULED:
            return False
        self.transitions.remove(sq, rec)
        self.transitions.log(sq, LogEvent.CANCELLED, rec, now_ms)
        return True

    # ---------------------------------------------------------------- sessions
    def accept_session(
        self, queue: str, session_id: str | None, owner: SessionOwner, now_ms: int
    ) -> SessionLock | None:
        """Lock a named session, or the next available one (None if there is none)."""
        sq = self.queues[queue]
        if (
            session_id is None
            and sq.session_scan is not None
            and sq.available_session(now_ms) is None
        ):
            # one chunk now (bounded); the timer ticks read the rest and wake waiters
            self.reader.scan_chunk(sq)
        return self.lock_table.accept_session(sq, session_id, owner, now_ms)

    def renew_session(self, queue: str, session_id: str, owner: object | None, now_ms: int) -> int:
        """Extend a session lock (and its message locks); returns the new locked-until (ms)."""
        return self.lock_table.renew_session(self.queues[queue], session_id, owner, now_ms)

    def touch_session(self, lock: SessionLock, now_ms: int) -> None:
        """Receive activity on a held session keeps its lock (see LockTable.touch_session)."""
        self.lock_table.touch_session(lock, now_ms)

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
        for _msg_lock, rec in self.lock_table.end_session(lock):
            if count_delivery:
                self.transitions.redeliver(sq, rec, now_ms, None, LogEvent.LOCK_EXPIRED)
            else:
                if rec.state == MessageState.ACTIVE:
                    sq.make_ready(rec)
                self.transitions.log(sq, LogEvent.RELEASED, rec, now_ms)
        if sq.sessions[lock.session_id].ready_set:
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
        self.staging.batch.put_session_state(queue, session_id, state)
        self.after_commit(done)

    def session_ids(self, queue: str, changed_after_ms: int | None = None) -> list[str]:
        """Sessions with messages or state (or, with changed_after_ms, whose state changed since)."""
        sq = self.queues[queue]
        self.reader.scan_sessions(sq)  # a restart's scan not yet through: finish it (once)
        return sq.session_ids(changed_after_ms)

    def session_summaries(self, queue: str, now_ms: int) -> list[tuple[str, int, int | None, int]]:
        """(session id, stored messages, locked until ms or None, state bytes) of each session
        with messages or state in this partition (the dashboard's session list)."""
        sq = self.queues[queue]
        self.reader.scan_sessions(sq)
        return [
            (
                sid,
                sess.messages,
                sess.lock.until_ms if sess.lock is not None and sess.locked(now_ms) else None,
                len(sess.state) if sess.state is not None else 0,
            )
            for sid, sess in sq.sessions.items()
            if sess.messages > 0 or sess.state is not None
        ]

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
        count = 0
        for rec in self.reader.current_records(sq):  # streamed from the store in chunks
            self.transitions.remove(sq, rec)
            self.transitions.log(sq, LogEvent.PURGED, rec, now_ms)
            count += 1
        self.lock_table.forget_queue(sq)
        sq.clear_ready()
        return count

    def drop_unnamed_queues(self, settings: SubQueueSettings, now_ms: int) -> dict[str, int]:
        """Purge (logged) and forget the sub-queues stored here that this partition does not
        serve: a subscription removed from the configuration while sbemu was stopped, so a
        subscription of that name made later starts empty. Returns {name: messages purged}."""
        gone = {}
        for name in self.store.queue_names():
            if name not in self.queues:
                self.add_queue(name, settings)
                # the counts the purge undoes
                self.queues[name].set_counts(*stored_counts(self.store.load_meta(), name))
                gone[name] = self.drop_queue(name, now_ms)
        return gone

    def drop_queue(self, name: str, now_ms: int) -> int:
        """Purge a sub-queue and forget it (a deleted subscription); returns the purged count."""
        if name not in self.queues:
            return 0
        count = self.purge_queue(name, now_ms)
        for session_id, sess in self.queues[name].sessions.items():
            if sess.state is not None:
                self.staging.batch.put_session_state(name, session_id, None)
        del self.queues[name]
        self.lock_table.forget_sessions(name)
        return count
