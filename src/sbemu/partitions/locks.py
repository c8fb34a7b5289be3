"""Peek-locks and session locks of one partition, and the heaps that expire them.

A message lock is memory only (a restart releases it, as the service does). Inside partitions/
a lock is its token's int (`Lock.key`, see tokens.py); the Lock and SessionLock records
themselves sit in the sub-queue's index (subqueue.py), this table owns their life.

The lock heap holds (locked-until, sequence number, key) for every message lock outside
sessions, or (locked-until, first sequence number, first key, keys) for a run of locks taken
together (add_run: one entry for a dispatch's run); settled and renewed locks leave their
entry behind (checked when it comes due, and the heap is rebuilt once stale entries outnumber
live locks). Session locks have a heap of
their own; a session's message locks end with the session lock.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from ..errors import MessageLockLost, SessionCannotBeLocked, SessionLockLost
from .records import MessageRecord
from .subqueue import Lock, SessionLock, SessionOwner, SubQueue

LOCK_HEAP_SLACK = 4_096  # stale lock-heap entries tolerated before it is rebuilt


class LockTable:
    """The live message locks of one partition by key, and the heaps that expire them."""

    __slots__ = ("by_key", "heap", "heap_keys", "session_heap")

    def __init__(self) -> None:
        # Live locks by their token's int (a UUID hashes in Python code, its int in C). The
        # broker hands this very dict out as `PartitionBroker.locks`: never rebound.
        self.by_key: dict[int, Lock] = {}
        # (until, seq, lock key), or (until, first seq, first key, every key) for a run
        self.heap: list[tuple[int, int, int] | tuple[int, int, int, tuple[int, ...]]] = []
        self.heap_keys = 0  # the lock keys the heap's entries hold (a run's entry: several)
        self.session_heap: list[tuple[int, str, str]] = []  # (until, sub-queue, session id)

    def add(self, lock: Lock) -> None:
        """Hold a new lock (a session's message locks end with the session lock: no entry)."""
        self.by_key[lock.key] = lock
        lock.queue.locks[lock.seq] = lock
        if lock.session is None:
            heapq.heappush(self.heap, (lock.until_ms, lock.seq, lock.key))
            self.heap_keys += 1

    def add_run(self, locks: list[Lock]) -> None:
        """Hold new locks outside sessions that share their locked-until (a run taken at
        once): each in the indexes, the run as one heap entry."""
        by_key = self.by_key
        keys = []
        for lock in locks:
            key = lock.key
            by_key[key] = lock
            lock.queue.locks[lock.seq] = lock
            keys.append(key)
        if locks:
            first = locks[0]
            heapq.heappush(self.heap, (first.until_ms, first.seq, first.key, tuple(keys)))
            self.heap_keys += len(keys)

    def live(self, key: int, now_ms: int) -> Lock:
        """The lock a settlement names, if it still holds; raises lock-lost (message or
        session) otherwise."""
        lock = self.by_key.get(key)
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

    def unlock(self, lock: Lock) -> MessageRecord:
        """End a lock; returns its message."""
        del self.by_key[lock.key]
        del lock.queue.locks[lock.seq]
        self.trim()
        assert lock.record is not None  # every lock carries its message
        return lock.record

    def trim(self) -> None:
        """Settled and renewed locks leave their heap entry until it is due (a lock duration
        later): draining 5k msg/s under a 1-minute lock would keep 300k of them (~70 MB).
        Once stale entries outnumber live locks, rebuild from the live ones, in place
        (expired() may be popping this very list)."""
        heap = self.heap
        if self.heap_keys > 2 * len(self.by_key) + LOCK_HEAP_SLACK:
            heap[:] = [
                (k.until_ms, k.seq, k.key) for k in self.by_key.values() if k.session is None
            ]
            heapq.heapify(heap)
            self.heap_keys = len(heap)

    def renewed(self, lock: Lock) -> None:
        """A lock outside sessions got a new locked-until: its new heap entry."""
        heapq.heappush(self.heap, (lock.until_ms, lock.seq, lock.key))
        self.heap_keys += 1
        self.trim()

    def expired(self, now_ms: int) -> Iterator[Lock]:
        """The message locks (outside sessions) whose time is up, each unlocked by the caller
        before the next is looked at."""
        heap, by_key = self.heap, self.by_key
        while heap and heap[0][0] <= now_ms:
            entry = heapq.heappop(heap)
            until = entry[0]
            keys = entry[3] if len(entry) == 4 else (entry[2],)
            self.heap_keys -= len(keys)
            for key in keys:
                lock = by_key.get(key)
                if lock is None or lock.until_ms != until:
                    continue  # settled, or renewed (a newer heap entry exists)
                yield lock

    def expired_sessions(self, now_ms: int) -> Iterator[tuple[int, str, str]]:
        """(until, sub-queue, session id) of session locks that may be due (the caller checks
        the session still holds that lock)."""
        sessions = self.session_heap
        while sessions and sessions[0][0] <= now_ms:
            yield heapq.heappop(sessions)

    # ---------------------------------------------------------------- session locks
    def accept_session(
        self, sq: SubQueue, session_id: str | None, owner: SessionOwner, now_ms: int
    ) -> SessionLock | None:
        """Lock a named session, or the next available one (None if there is none)."""
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
        self.session_locked(lock)
        return lock

    @staticmethod
    def session_lock(
        sq: SubQueue, session_id: str, owner: object | None, now_ms: int
    ) -> SessionLock:
        """The live lock `owner` (None: anyone) holds on a session; raises lock-lost."""
        sess = sq.sessions.get(session_id)
        lock = sess.lock if sess is not None else None
        if (
            lock is None
            or lock.until_ms <= now_ms
            or (owner is not None and lock.owner is not owner)
        ):
            raise SessionLockLost(
                f"The session lock for session '{session_id}' has expired or is not held by "
                "this receiver."
            )
        return lock

    def renew_session(
        self, sq: SubQueue, session_id: str, owner: object | None, now_ms: int
    ) -> int:
        """Extend a session lock (and its message locks); returns the new locked-until (ms)."""
        lock = self.session_lock(sq, session_id, owner, now_ms)
        lock.until_ms = now_ms + lock.queue.settings.lock_duration_ms
        for msg_lock in lock.queue.locks.values():
            if msg_lock.session is lock:
                msg_lock.until_ms = lock.until_ms
        self.session_locked(lock)
        return lock.until_ms

    def end_session(self, lock: SessionLock) -> list[tuple[Lock, MessageRecord]]:
        """End a session lock; returns its message locks, each unlocked, with its message."""
        sq = lock.queue
        sq.sessions[lock.session_id].lock = None
        return [(m, self.unlock(m)) for m in [m for m in sq.locks.values() if m.session is lock]]

    def session_locked(self, lock: SessionLock) -> None:
        """A session lock was taken or renewed: its heap entry (the lock is armed there)."""
        lock.armed_ms = lock.until_ms
        heapq.heappush(self.session_heap, (lock.until_ms, lock.queue.name, lock.session_id))

    @staticmethod
    def touch_session(lock: SessionLock, now_ms: int) -> None:
        """Receive activity on a held session (a delivery, a receive request) keeps its lock:
        it expires only once the session stayed idle for the lock duration ("no operations
        performed on the session" [Azure SDK: SessionLockLostException]). A receive-and-delete
        session receiver that keeps receiving never loses its session, and one whose last
        receive waits out its max_wait_time closes before the lock ends."""
        sess = lock.queue.sessions.get(lock.session_id)
        if sess is None or sess.lock is not lock or lock.until_ms <= now_ms:
            return  # lost or released: activity does not bring a lock back
        until = now_ms + lock.queue.settings.lock_duration_ms
        if until > lock.until_ms:
            lock.until_ms = until  # no heap push per delivery: on_timer re-arms (rearm_session)

    def rearm_session(self, lock: SessionLock, popped_ms: int) -> None:
        """The heap entry at `popped_ms` came due but the lock was extended since: one new
        entry at its current expiry (only for the lock's latest entry, so none doubles up)."""
        if popped_ms == lock.armed_ms and lock.until_ms > popped_ms:
            self.session_locked(lock)

    def next_deadline(self) -> int | None:
        """When the first lock (message or session) may expire, or None."""
        times = [h[0][0] for h in (self.heap, self.session_heap) if h]
        return min(times) if times else None

    def forget_queue(self, sq: SubQueue) -> None:
        """Drop the message locks of a purged sub-queue (settling them fails with lock-lost)."""
        by_key = self.by_key
        for key in [k for k, lock in by_key.items() if lock.queue is sq]:
            del by_key[key]
        sq.locks.clear()

    def forget_sessions(self, queue: str) -> None:
        """Drop the session heap entries of a dropped sub-queue."""
        kept = [item for item in self.session_heap if item[1] != queue]
        heapq.heapify(kept)
        self.session_heap = kept

    def clear(self) -> None:
        """Forget every lock (the partition reloads from its store)."""
        self.by_key.clear()
        self.heap.clear()
        self.heap_keys = 0
        self.session_heap.clear()
