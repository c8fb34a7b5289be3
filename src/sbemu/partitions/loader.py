"""Loading one partition's state from its store: at start, and again after a store fault.

The broker keeps nothing in memory that the store does not hold or that may not be lost
(locks live in memory only: a restart releases them, as the service does). So one path
serves a start and every recovery: load() reads the counters and session states (never the
backlog) and returns them as a value, LoadedPartition (as Kafka's LogLoader.load() returns
LoadedLogOffsets); start() hands each room its part, and each room sets its own state from
it. After a failed commit or a store fault the partition forgets every uncommitted change,
lock and read-ahead and loads again (reload()), as a restart of this partition would.

Health (health.py) decides when: a failed commit is recorded there (store_failed), and
recover() reopens the store after its back-off; the operator's holds (set_online) wait for it.
The broker (broker.py) is the front that the router and the committer call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import ServerBusy, ServiceBusError
from .completions import Done
from .deadlines import Deadlines
from .health import Health
from .locks import LockTable
from .migrate import LAYOUT, migrate
from .reader import SubQueueReader
from .staging import Staging
from .store import PartitionStore
from .subqueue import SessionLock, SubQueue
from .transitions import Transitions


def stored_counts(meta: Mapping[str, int], queue: str) -> tuple[list[int], int]:
    """A sub-queue's persisted counts by state (active, deferred, scheduled) and its stored
    bytes, from the store's counters."""
    return [meta.get(f"n:{queue}:{k}", 0) for k in "ads"], meta.get(f"n:{queue}:b", 0)


@dataclass(frozen=True, slots=True)
class LoadedPartition:
    """What PartitionLoader.load() read from a partition's store."""

    next_sequence: int  # the next sequence number, without the partition's base
    next_offset: int  # the partition log's next offset
    counts: dict[str, tuple[list[int], int]]  # per sub-queue: counts by state, stored bytes
    session_states: dict[str, dict[str, bytes]]  # per sub-queue: state by session id

    @property
    def stored_bytes(self) -> int:
        """Bytes of the messages the partition holds (what its quota counts)."""
        return sum(max(nbytes, 0) for _counts, nbytes in self.counts.values())


class PartitionLoader:
    """Loads one partition's rooms from its store, and loads them again after a fault."""

    __slots__ = (
        "store", "queues", "staging", "reader", "lock_table", "deadlines", "health",
        "transitions", "name", "session_lost",
    )  # fmt: skip

    def __init__(
        self,
        store: PartitionStore,
        queues: dict[str, SubQueue],
        staging: Staging,
        reader: SubQueueReader,
        lock_table: LockTable,
        deadlines: Deadlines,
        health: Health,
        transitions: Transitions,
        name: str,
        session_lost: Callable[[SessionLock], None],
    ) -> None:
        self.store = store
        self.queues = queues
        self.staging = staging
        self.reader = reader
        self.lock_table = lock_table
        self.deadlines = deadlines
        self.health = health
        self.transitions = transitions
        self.name = name  # "Partition <id> of '<entity>'", for the errors it answers with
        self.session_lost = session_lost  # told of each session lock a reload ends

    def load(self) -> LoadedPartition:
        """Open the store without reading the backlog: the counters and the session states
        (a store of an older layout is brought up to date first: migrate.py)."""
        store = self.store
        store.ensure_queues(list(self.queues))
        meta = store.load_meta()
        layout = meta.get("layout", 1)
        if layout < LAYOUT:
            migrate(store, self.queues, layout, self.reader.each_record)
            meta = store.load_meta()
        return LoadedPartition(
            meta.get("next_sequence", 1),
            meta.get("next_log_offset", 0),
            {name: stored_counts(meta, name) for name in self.queues},
            store.load_session_states(),
        )

    def start(self, loaded: LoadedPartition) -> None:
        """Hand each room its part of what load() read: the staging its counters, each
        sub-queue its counts and session states, health the stored bytes; session-enabled
        sub-queues rebuild their ready lines by a scan, and the timers find their first due
        time. Every lock starts released."""
        staging, queues = self.staging, self.queues
        staging.resume(loaded.next_sequence, loaded.next_offset)
        for name, sq in queues.items():
            sq.set_counts(*loaded.counts[name])
        self.health.reloaded(loaded.stored_bytes)
        for sq in queues.values():
            if sq.settings.requires_session:
                self.reader.start_session_scan(sq, staging.next_sequence)
        for name, states in loaded.session_states.items():
            target = queues.get(name)
            if target is not None:
                target.set_session_states(states)
        self.deadlines.load(self.transitions.expire)

    def commit_failed(self, callbacks: list[Done], error: BaseException) -> None:
        """A commit failed: answer its completions and those of the writes gathered meanwhile.

        A failed commit leaves the store as it was before the batch, so the partition forgets
        every change not yet committed (the failed batch and the one gathered meanwhile, both
        answered with the error) and reads its state back from the store: held locks end
        (settling them fails with lock-lost; the messages are delivered again), nothing
        acknowledged is touched. A full LMDB map is grown at once (the partition stays in
        service; the completions get server-busy, which the SDKs retry); an I/O fault takes
        the partition out of service until recover() reopens the store.
        """
        pending = self.staging.forget_pending()
        failure = self.store_failed(error)
        for cb in callbacks + pending:
            cb(failure)

    def store_failed(self, error: BaseException) -> ServiceBusError:
        """Record a store fault on this partition (no commit may be in flight); returns the
        error to report (see Health.store_failed)."""
        return self.health.store_failed(error, self.staging.committing(), self.reload)

    def recover(self, now_ms: int) -> bool:
        """After a store fault: reopen the store and reload the partition once the retry time
        has come (see Health.recover); the router's timer calls it for partitions out of
        service. True: back in service."""
        if not self.health.recover(now_ms, self.staging.committing(), self.reload):
            return False
        self.set_online(True)
        return True

    def reload(self) -> None:
        """Forget every uncommitted change, lock and read-ahead and load the partition's
        state from the store again (as a restart of this partition would); the held session
        locks are reported lost. Raises StoreError if the store cannot be read."""
        lost = [
            sess.lock for sq in self.queues.values() for sess in sq.sessions.values()
            if sess.lock is not None
        ]  # fmt: skip
        # (the sends answered here leave the counts to the store; none are left to answer
        # when a failed commit led here)
        for cb in self.staging.reset():
            cb(ServerBusy(f"{self.name} was reloaded."))
        self.lock_table.clear()
        for sq in self.queues.values():
            sq.clear()
        self.deadlines.reset()
        self.start(self.load())
        for lock in lost:
            self.session_lost(lock)
        self.announce_ready()

    def announce_ready(self) -> None:
        """Tell the broker's on_ready hook of every sub-queue with messages in line."""
        for name, sq in self.queues.items():
            if sq.has_ready_any():
                self.transitions.on_ready(name)

    def set_online(self, online: bool, reason: str | None = None) -> None:
        """Take the partition out of service (operator command) or bring it back. After a
        store fault the store is reopened first; if it still fails the partition stays out."""
        health = self.health
        health.hold(online, reason)
        if online and health.faulted:
            self.recover(0)  # (hold() made the retry due at once)
            return
        if online:
            self.announce_ready()
