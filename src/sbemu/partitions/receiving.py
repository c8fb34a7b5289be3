"""How one partition's messages are received: taken for a receiver and settled.

A receiver takes a message peek-locked (a Lock, memory only: its log record rides with the
next commit) or, receive-and-delete, removed as it is taken [contract 4.2]; a lock ends with a
settlement: complete (the message is deleted), abandon (back in line, delivery count + 1,
dead-lettered at the limit), release (back in line, no delivery counted), defer (set aside,
fetched later by sequence number) or dead-letter; renew extends it. This room owns that cycle
of a message lock; the lock table (locks.py) keeps the locks and expires them, what the
settlement does to the stored message is a transition (transitions.py), the reads go through
the sub-queue reader (subqueue.py). The broker (broker.py) is the front that calls it.
"""

from __future__ import annotations

from ..errors import InvalidOperation, MessageNotFound, ServiceBusError
from .completions import Done
from .locks import LockTable
from .outcomes import Outcome, OutcomeKind
from .reader import SubQueueReader
from .records import LogEvent, MessageRecord, MessageState
from .staging import Staging
from .store import StoreError
from .subqueue import Lock, SessionLock, SubQueue
from .tokens import make_lock_key, make_lock_keys
from .transitions import Transitions, merge_overrides

_COMPLETE, _ABANDON, _DEFER = OutcomeKind.COMPLETE, OutcomeKind.ABANDON, OutcomeKind.DEFER


class Receiving:
    """Takes one partition's messages for receivers and settles their locks (see the module
    comment)."""

    __slots__ = ("queues", "reader", "lock_table", "staging", "transitions", "partition_id")

    def __init__(
        self,
        queues: dict[str, SubQueue],
        reader: SubQueueReader,
        lock_table: LockTable,
        staging: Staging,
        transitions: Transitions,
        partition_id: int,
    ) -> None:
        self.queues = queues
        self.reader = reader
        self.lock_table = lock_table
        self.staging = staging
        self.transitions = transitions
        self.partition_id = partition_id  # in every lock token it makes (tokens.py)

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
            rec = self.reader.pop_ready(sq, session.session_id if session is not None else None)
            if rec is None:
                return None
            if session is not None:
                self.lock_table.touch_session(session, now_ms)  # a delivery is activity on it
            if (
                rec.expires_at_ms is not None
                and rec.expires_at_ms <= now_ms
                and sq.settings.expires
            ):
                self.transitions.expire(sq, rec, now_ms)
                continue
            if peek_lock:
                return rec, self._lock(sq, rec, now_ms, session)
            self.transitions.consume(sq, rec, now_ms)  # receive-and-delete [contract 4.2]
            return rec, None

    def take_batch(
        self, queue: str, now_ms: int, limit: int
    ) -> list[tuple[MessageRecord, Lock | None]]:
        """Up to `limit` messages peek-locked for a receiver outside sessions: what as many
        take_next calls would give, in one call (the receive hot path: a dispatch takes a
        run of messages from a partition, not one message per call down the stack)."""
        sq = self.queues[queue]
        out: list[tuple[MessageRecord, Lock | None]] = []
        if sq.settings.requires_session:
            return out
        pop_run = self.reader.pop_run
        expires = sq.settings.expires
        until = now_ms + sq.settings.lock_duration_ms
        pid = self.partition_id
        add_run = self.lock_table.add_run
        run: list[Lock] = []  # locks made from the last pop_run, held before the next one
        try:
            while len(out) < limit:
                recs = pop_run(sq, limit - len(out))
                if not recs:
                    break
                for rec, key in zip(recs, make_lock_keys(pid, len(recs)), strict=True):
                    at = rec.expires_at_ms
                    if at is not None and at <= now_ms and expires:
                        self.transitions.expire(sq, rec, now_ms)
                        continue
                    lock = Lock(key, sq, rec.sequence_number, until, None, rec)
                    run.append(lock)
                    out.append((rec, lock))
                add_run(run)
                run = []
        except StoreError:
            if not out:
                raise  # nothing taken: the caller sees the fault as from take_next
            # else: hand over what was locked; the next take meets the fault again
        finally:
            if run:
                add_run(run)
            if out:  # a lock is memory only: its log record may ride with the next commit
                self.staging.log_run(
                    queue, LogEvent.DELIVERED, [rec for rec, _ in out], now_ms, lazy=True
                )
        return out

    def take_deferred(
        self,
        queue: str,
        seq: int,
        now_ms: int,
        peek_lock: bool,
        read: MessageRecord | None = None,
    ) -> tuple[MessageRecord, Lock | None]:
        """Fetch a deferred message by sequence number: locked, or removed (receive-and-delete);
        `read`: the record as read before (SubQueueReader.read_stored), unless staged since."""
        sq = self.queues[queue]
        rec = None if seq in sq.locks else self.reader.get(sq, seq, read)
        if rec is None or rec.state != MessageState.DEFERRED:
            raise MessageNotFound(
                f"Failed to lock one or more specified messages. Either the message is already "
                f"locked or it does not exist. The sequence number {seq} is not a deferred "
                "message that can be received."
            )
        if peek_lock:
            return rec, self._lock(sq, rec, now_ms)
        self.transitions.consume(sq, rec, now_ms)
        return rec, None

    def _lock(
        self, sq: SubQueue, rec: MessageRecord, now_ms: int, session: SessionLock | None = None
    ) -> Lock:
        until = session.until_ms if session is not None else now_ms + sq.settings.lock_duration_ms
        lock = Lock(make_lock_key(self.partition_id), sq, rec.sequence_number, until, session, rec)
        self.lock_table.add(lock)
        # A lock is memory only; its log record may ride with the next commit (staging.py).
        self.transitions.log(sq, LogEvent.DELIVERED, rec, now_ms, lazy=True)
        return lock

    # ---------------------------------------------------------------- settlement
    def settle(self, key: int, outcome: Outcome, now_ms: int, done: Done) -> None:
        """Settle a locked message as `outcome` says; `done` runs after the commit. A
        completion deletes the message (here, the common case); the others: _abandon, _defer,
        _dead_letter."""
        kind = outcome.kind
        if kind is _COMPLETE:
            lock = self.lock_table.live(key, now_ms)
            rec = self.lock_table.unlock(lock)
            sq = lock.queue
            self.transitions.remove(sq, rec, False)
            self.transitions.log(sq, LogEvent.COMPLETED, rec, now_ms)
            self.staging.after_commit(done)
        elif kind is _ABANDON:
            self._abandon(key, now_ms, outcome.overrides, done)
        elif kind is _DEFER:
            self._defer(key, now_ms, outcome.overrides, done)
        else:
            self._dead_letter(key, now_ms, outcome, done)

    def complete_lazy(self, keys: list[int], now_ms: int) -> None:
        """Complete each lock token's message (by its int), in order, a lost lock skipped:
        nobody waits for these outcomes (pre-settled accepts), so the deletions are lazy (they
        may wait for the partition's next commit or the next timer tick, and an unconfirmed
        completion may come back after a crash: at least once), and a message whose lock was
        lost comes back as if its lock had expired, unannounced."""
        table = self.lock_table
        locks = table.by_key
        log_run, remove_run = self.staging.log_run, self.transitions.remove_run
        run: list[MessageRecord] = []  # completed messages of `sq`, removed and logged together
        sq: SubQueue | None = None
        try:
            for key in keys:
                lock = locks.get(key)
                if lock is None:
                    continue
                if lock.session is None:
                    if lock.until_ms <= now_ms:
                        continue
                else:
                    try:
                        table.live(key, now_ms)  # the session's lock must be held
                    except ServiceBusError:
                        continue
                if lock.queue is not sq:
                    if run and sq is not None:
                        done, run = run, []
                        remove_run(sq, done, True)
                        log_run(sq.name, LogEvent.COMPLETED, done, now_ms, lazy=True)
                    sq = lock.queue
                # LockTable.unlock(), the lock heap trimmed once for the whole run
                del locks[key]
                del sq.locks[lock.seq]
                rec = lock.record
                assert rec is not None  # every lock carries its message
                run.append(rec)
        finally:
            if run and sq is not None:  # what was unlocked is removed, whatever happened
                remove_run(sq, run, True)
                log_run(sq.name, LogEvent.COMPLETED, run, now_ms, lazy=True)
            table.trim()

    def _abandon(
        self, key: int, now_ms: int, overrides: dict[str, bytes] | None, done: Done
    ) -> None:
        """Unlock with delivery count + 1; dead-letter when MaxDeliveryCount is reached."""
        lock = self.lock_table.live(key, now_ms)
        rec = self.lock_table.unlock(lock)
        self.transitions.redeliver(lock.queue, rec, now_ms, overrides, LogEvent.ABANDONED)
        self.staging.after_commit(done)

    def release(self, key: int, now_ms: int) -> None:
        """Unlock without counting a delivery attempt [contract 4.7]."""
        lock = self.lock_table.by_key.get(key)
        if lock is None:
            return
        rec = self.lock_table.unlock(lock)
        if rec.state == MessageState.ACTIVE:
            lock.queue.make_ready(rec)
        self.transitions.log(lock.queue, LogEvent.RELEASED, rec, now_ms)
        self.transitions.on_ready(lock.queue.name)

    def _defer(self, key: int, now_ms: int, overrides: dict[str, bytes] | None, done: Done) -> None:
        """Set a locked message aside; it is fetched later by sequence number."""
        lock = self.lock_table.live(key, now_ms)
        rec = self.lock_table.unlock(lock)
        if lock.queue.settings.dead_letter_queue is not None:
            # The delivery that ended in the deferral counts: received again by sequence
            # number, the message says delivery-count 1 (Microsoft's deferredMessage.spec
            # asserts 0, then 1 after a deferral, 2 after a second); a dead-letter queue counts
            # no deliveries (its abandon leaves 0 there too).
            rec.delivery_count += 1
        self.transitions.count(lock.queue, rec.state, -1)
        rec.state = MessageState.DEFERRED
        self.transitions.count(lock.queue, rec.state, 1)
        merge_overrides(rec, overrides)
        self.staging.put(lock.queue, rec)
        self.transitions.log(lock.queue, LogEvent.DEFERRED, rec, now_ms)
        self.staging.after_commit(done)

    def _dead_letter(self, key: int, now_ms: int, outcome: Outcome, done: Done) -> None:
        """Move a locked message to the dead-letter queue with the outcome's reason and
        description."""
        lock = self.lock_table.live(key, now_ms)
        sq = lock.queue
        if sq.settings.dead_letter_queue is None:
            # Azure refuses once with a non-retryable error (amqp:not-allowed: the JS SDK's
            # InvalidOperationError, code GeneralError) and the message is free again with its
            # delivery count unchanged (batchReceiver.spec "Throws error when dead lettering a
            # dead lettered message" receives it at once with deliveryCount 0).
            self.release(key, now_ms)
            raise InvalidOperation(
                "A message in a dead-letter queue cannot be dead-lettered again."
            )
        rec = self.lock_table.unlock(lock)
        self.transitions.move_to_dlq(
            sq, rec, now_ms, outcome.reason, outcome.description, outcome.overrides
        )
        self.staging.after_commit(done)

    def renew(self, key: int, now_ms: int) -> int:
        """Extend a lock by the lock duration from now; returns the new locked-until (ms)."""
        lock = self.lock_table.live(key, now_ms)
        if lock.session is not None:
            raise InvalidOperation(
                "The lock of a message received from a session cannot be renewed; renew the "
                "session lock instead."
            )
        lock.until_ms = now_ms + lock.queue.settings.lock_duration_ms
        self.lock_table.renewed(lock)
        return lock.until_ms
