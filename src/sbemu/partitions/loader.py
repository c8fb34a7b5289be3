"""Loading one partition's state from its store: at start, and again after a store fault.

The broker keeps nothing in memory that the store does not hold or that may not be lost
(locks live in memory only: a restart releases them, as the service does). So one path
serves a start and every recovery: load()
reads the counters, session states and each session's ready line (never the backlog); after a
failed commit or a store fault the partition forgets every uncommitted change, lock and
read-ahead and loads again (reload()), as a restart of this partition would.

Health (health.py) decides when: a failed commit is recorded there (store_failed), and
recover() reopens the store after its back-off; the operator's holds (set_online) wait for it.
The broker (broker.py) is the front that the router and the committer call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import ServerBusy, ServiceBusError
from .completions import Done
from .deadlines import Deadlines
from .health import Health
from .locks import LockTable
from .migrate import LAYOUT, migrate
from .staging import Staging
from .store import PartitionStore
from .subqueue import SessionLock, SubQueue, SubQueueReader
from .transitions import Transitions


def load_counts(sq: SubQueue, meta: Mapping[str, int]) -> None:
    """A sub-queue's persisted counts by state and stored bytes, from the store's counters."""
    sq.counts = [meta.get(f"n:{sq.name}:{k}", 0) for k in "ads"]
    sq.bytes = meta.get(f"n:{sq.name}:b", 0)


class PartitionLoader:
    """Loads one partition's rooms from its store, and loads them again after a fault."""

    __slots__ = (
        "store", "queues", "staging", "reader", "lock_table", "deadlines", "health", "moves",
        "name", "session_lost",
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
        moves: Transitions,
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
        self.moves = moves
        self.name = name  # "Partition <id> of '<entity>'", for the errors it answers with
        self.session_lost = session_lost  # told of each session lock a reload ends

    def load(self) -> None:
        """Open the store without reading the backlog: counters, session states, and (for
        session-enabled sub-queues only) each session's ready line; every lock starts released.
        """
        store, staging = self.store, self.staging
        store.ensure_queues(list(self.queues))
        meta = store.load_meta()
        staging.next_seq = meta.get("next_sequence", 1)
        staging.next_offset = meta.get("next_log_offset", 0)
        if meta.get("layout", 1) < LAYOUT:
            migrate(store, self.queues, meta.get("layout", 1), self.reader.each_record)
            meta = store.load_meta()
        for sq in self.queues.values():
            load_counts(sq, meta)
        self.health.reloaded(sum(max(sq.bytes, 0) for sq in self.queues.values()))
        for sq in self.queues.values():
            if sq.settings.requires_session:
                self.reader.start_session_scan(sq, self.moves.sequence_base | staging.next_seq)
        for name, states in store.load_session_states().items():
            target = self.queues.get(name)
            if target is None:
                continue
            for session_id, data in states.items():
                target.session(session_id).state = data
        self.deadlines.load(self.moves.expire)

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
        return self.health.store_failed(error, bool(self.staging.taken_gens), self.reload)

    def recover(self, now_ms: int) -> bool:
        """After a store fault: reopen the store and reload the partition once the retry time
        has come (see Health.recover); the router's timer calls it for partitions out of
        service. True: back in service."""
        if not self.health.recover(now_ms, bool(self.staging.taken_gens), self.reload):
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
        self.staging.epoch += 1  # (the sends answered below leave the counts to the store)
        for cb in self.staging.forget_pending():  # (none when a failed commit led here)
            cb(ServerBusy(f"{self.name} was reloaded."))
        self.staging.clear()
        self.lock_table.clear()
        for sq in self.queues.values():
            sq.clear()
        self.deadlines.reset()
        self.load()
        for lock in lost:
            self.session_lost(lock)
        self.announce_ready()

    def announce_ready(self) -> None:
        """Tell the broker's on_ready hook of every sub-queue with messages in line."""
        for name, sq in self.queues.items():
            if sq.has_ready_any():
                self.moves.on_ready(name)

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
