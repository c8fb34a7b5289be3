"""The group-commit turn: one durable LMDB transaction per dirty partition per turn.

What a turn does, in order (the server runs it once per event-loop pass that has work, tests run
it inline):
  1. the router's pending dispatch (views that got messages, forwarding);
  2. every partition with pending writes hands them over as one WriteBatch (take_commit), and
     each batch becomes one CommitJob, started at once: no timer, no waiting for other work;
  3. when a job's transaction is durable, its completions run (commit_done), in order, on the
     turn's thread: acknowledgements go out only after the commit [guide: no accepted message
     is ever lost].

At most one commit is in flight per partition: a partition that gets new writes while its
commit runs is committed again as soon as that one finishes, with everything it gathered
meanwhile (so the batches grow with the load). Different partitions commit concurrently:
CommitThreads runs each job on a worker thread and py-lmdb releases the GIL while LMDB
writes and syncs, so the fsyncs of a 16-partition entity overlap instead of queueing. The
commits in flight across partitions are bounded (max_inflight); a partition beyond the bound
waits for a slot and takes its batch only when it gets one, so under load it commits more
per transaction rather than more transactions (each costs page copies, two syncs and
thread hand-offs whatever its size).

Finished jobs go back to the turn's thread in groups: one hand-back per burst of finished
commits rather than one per partition, so a turn that committed 16 partitions wakes the event
loop once or twice, not 16 times, and each connection flushes its acknowledgements once.

This module is socket- and clock-free: the caller passes `now_ms` and, for threads, a `post`
callable that runs a function on the turn's thread (the server's loop.call_soon_threadsafe).
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .writebatch import WriteBatch

if TYPE_CHECKING:
    from .broker import PartitionBroker
    from .completions import Done


class DirtyPartitions:
    """Which partitions have writes to commit: the turn's to-do list, which GroupCommit takes.

    A partition is marked as it stages a write (staging.py asks through `mark`); a partition
    whose only writes are lazy (nobody waits for them) waits in `lazy` until its next commit
    takes them along, or the server's timer tick (tick_lazy) finds it there a second time,
    or flush_lazy() (a stop) makes it dirty. `wake` asks the server for a turn.
    """

    __slots__ = ("dirty", "lazy", "aged", "_wake")

    def __init__(self, wake: Callable[[], None]) -> None:
        self.dirty: set[PartitionBroker] = set()
        self.lazy: set[PartitionBroker] = set()  # only lazy writes pending (flush_lazy)
        self.aged: set[PartitionBroker] = set()  # of `lazy`, there at the last tick already
        self._wake = wake

    def mark(self, broker: PartitionBroker) -> None:
        """The partition has writes to commit in the next turn."""
        if broker not in self.dirty:
            self.dirty.add(broker)
            self._wake()

    def mark_lazy(self, broker: PartitionBroker) -> None:
        """The partition has writes nobody waits for: committed with its next commit, or by
        flush_lazy() at the next timer tick."""
        if broker not in self.dirty:
            self.lazy.add(broker)

    def flush_lazy(self) -> None:
        """Make partitions with lazy writes only dirty: they commit in the next turn."""
        self.aged.clear()
        if self.lazy:
            self.dirty |= self.lazy
            self.lazy.clear()
            self._wake()

    def tick_lazy(self) -> None:
        """The timer tick: commit the lazy writes that waited a whole tick without a commit
        to ride with; the younger wait for the next tick (so a lazy write waits two ticks at
        most). A busy partition commits every few milliseconds and takes its lazy writes
        along: flushing them all at every tick made a 16-partition entity's tick 16 commits
        at once (two in flight per entity), and a send arriving meanwhile waited behind them."""
        due = self.aged
        if due:
            self.lazy -= due
            self.dirty |= due
            self._wake()
        self.aged = set(self.lazy)

    def take(self) -> list[PartitionBroker]:
        """The partitions with writes to commit (lazy writes of theirs go along)."""
        dirty, self.dirty = self.dirty, set()
        if self.lazy:
            self.lazy -= dirty
            if self.aged:
                self.aged -= dirty
        return list(dirty)

    def forget(self, broker: PartitionBroker) -> None:
        """A removed partition: nothing of it is committed any more."""
        self.dirty.discard(broker)
        self.lazy.discard(broker)
        self.aged.discard(broker)


class TurnRouter(Protocol):
    """What the turn uses of the router (router.Router, which imports this module)."""

    @property
    def to_commit(self) -> DirtyPartitions: ...

    def run_pending(self, now_ms: int) -> None: ...

    def has_pending(self) -> bool: ...


# Commits in flight per entity in the server. Every commit's worker thread takes and drops the
# GIL around each LMDB put (py-lmdb releases it per put, putmulti included), so the more
# workers commit at once, the more the GIL bounces between them and the event loop: on the
# 16-partition bench (rhea, 20k x 1 KB, quiet machine) 8 commits in flight cost 2.3-2.9
# context switches and 118-125 us of server CPU per message, 2 cost 0.9-1.0 and 88-89 us,
# and the rate went from 8.2-8.6k/s to 10.0-10.3k/s. A busy partitioned entity so makes fewer,
# bigger commits, as a plain queue does; other entities have slots of their own.
COMMITS_PER_ENTITY = 2


@dataclass(slots=True)
class CommitJob:
    """One partition's batch on its way to the store, and what runs after it."""

    broker: PartitionBroker
    batch: WriteBatch
    callbacks: list[Done]
    error: Exception | None = None

    def run(self) -> None:
        """Commit the batch (any thread); a store fault is kept for the completions."""
        try:
            self.broker.commit_batch(self.batch)
        except Exception as exc:  # StoreError, or anything lmdb raised: the partition is marked
            self.error = exc


class CommitRunner(Protocol):
    """Where jobs run: start() returns at once; finished jobs reach GroupCommit.finished on
    the turn's thread."""

    def start(self, jobs: list[CommitJob]) -> None: ...


class GroupCommit:
    """The commit turn over one router (see the module comment).

    Without a runner the jobs run inline, inside turn(): what tests and tools use.
    `max_inflight` bounds the commits in flight across partitions (None: no bound). A dirty
    partition beyond it waits for a free slot and hands its batch over only when it gets
    one, so what it gathered meanwhile goes in the same commit: when the disk (or the CPU)
    is the limit, batches grow instead of commits queueing up behind each other.
    """

    def __init__(
        self,
        router: TurnRouter,
        runner: CommitRunner | None = None,
        max_inflight: int | None = None,
        max_inflight_per_entity: int | None = None,
    ) -> None:
        self.router = router
        self.runner = runner
        self.max_inflight = max_inflight
        # Commits in flight of the partitions of one entity (None: no bound of its own); see
        # COMMITS_PER_ENTITY.
        self.max_inflight_per_entity = max_inflight_per_entity
        self._entity_inflight: dict[tuple[str, str], int] = {}
        self.inflight: set[PartitionBroker] = set()
        # dirty partitions waiting for their own commit to finish or for a free slot, in order
        self._queued: dict[PartitionBroker, None] = {}
        # Hooks: a commit failed (the server logs it), and nothing is in flight any more.
        self.on_error: Callable[[PartitionBroker, Exception], None] = lambda broker, exc: None
        self.on_idle: Callable[[], None] = lambda: None

    # ---------------------------------------------------------------- the turn
    def turn(self, now_ms: int) -> None:
        """Dispatch pending work, then start one commit per dirty partition."""
        self.router.run_pending(now_ms)
        self.commit_dirty()

    def commit_dirty(self) -> None:
        """Start one commit per dirty partition (the second half of a turn)."""
        queued = self._queued
        for broker in self.router.to_commit.take():
            queued[broker] = None
        jobs = self._jobs()
        if jobs:
            self._start(jobs)

    def _jobs(self) -> list[CommitJob]:
        """Take the batches of queued partitions that may commit now, in queue order."""
        jobs: list[CommitJob] = []
        inflight, queued, limit = self.inflight, self._queued, self.max_inflight
        per_entity, entity_inflight = self.max_inflight_per_entity, self._entity_inflight
        for broker in list(queued):
            if limit is not None and len(inflight) >= limit:
                break
            if broker in inflight:
                continue  # its next commit starts when this one is done
            entity = (broker.namespace, broker.entity)
            if per_entity is not None and entity_inflight.get(entity, 0) >= per_entity:
                continue  # waits for a slot of its entity, gathering meanwhile
            del queued[broker]
            taken = broker.take_commit()
            if taken is None:
                continue
            batch, callbacks = taken
            if not batch:  # completions waiting on nothing new: they may run now
                broker.commit_done(callbacks, None)
                continue
            inflight.add(broker)
            if per_entity is not None:
                entity_inflight[entity] = entity_inflight.get(entity, 0) + 1
            jobs.append(CommitJob(broker, batch, callbacks))
        return jobs

    def _start(self, jobs: list[CommitJob]) -> None:
        if self.runner is not None:
            self.runner.start(jobs)
            return
        for job in jobs:
            job.run()
        self.finished(jobs)

    def finished(self, jobs: list[CommitJob]) -> None:
        """Finished jobs (on the turn's thread): run their completions in order, then start
        the queued partitions that may commit now (with everything they gathered)."""
        entity_inflight = self._entity_inflight
        for job in jobs:
            self.inflight.discard(job.broker)
            if self.max_inflight_per_entity is not None:
                entity = (job.broker.namespace, job.broker.entity)
                left = entity_inflight.get(entity, 0) - 1
                if left > 0:
                    entity_inflight[entity] = left
                else:
                    entity_inflight.pop(entity, None)
            if job.error is not None:
                self.on_error(job.broker, job.error)
            job.broker.commit_done(job.callbacks, job.error)
        if self._queued:
            more = self._jobs()
            if more:
                self._start(more)
        if not self.inflight:
            self.on_idle()

    # ---------------------------------------------------------------- state
    def busy(self, brokers: set[PartitionBroker] | None = None) -> bool:
        """Whether writes are pending or in flight (of these partitions, or of any)."""
        pending = self.inflight | self.router.to_commit.dirty | set(self._queued)
        return bool(pending if brokers is None else pending & brokers)

    def run_until_idle(self, now_ms: int) -> None:
        """Inline only: turn until nothing is dirty (a fail-over or a forward re-dirties)."""
        assert self.runner is None, "run_until_idle() is for an inline GroupCommit"
        while True:
            self.turn(now_ms)
            if not self.router.to_commit.dirty and not self.router.has_pending():
                return


class CommitThreads:
    """Worker threads for GroupCommit: each job commits on whichever worker is free.

    GroupCommit never has two jobs of one partition in flight, so with as many workers as
    partitions every partition's fsync overlaps the others'. Finished jobs gather in a deque;
    the first one of a burst posts one hand-back to the turn's thread, which takes them all.
    """

    def __init__(
        self,
        workers: int,
        post: Callable[[Callable[[], None]], object],
        deliver: Callable[[list[CommitJob]], None],
        name: str = "sbemu-commit",
    ) -> None:
        self._post = post
        self._deliver = deliver
        self._queue: queue.SimpleQueue[CommitJob | None] = queue.SimpleQueue()
        self._done: collections.deque[CommitJob] = collections.deque()
        self._posted = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def start(self, jobs: list[CommitJob]) -> None:
        """Queue jobs for the workers (returns at once)."""
        put = self._queue.put
        for job in jobs:
            put(job)

    def _work(self) -> None:
        get, done = self._queue.get, self._done
        while True:
            job = get()
            if job is None:
                return
            job.run()
            done.append(job)
            # Drop this frame's reference: blocked in get() until the next job, it would keep
            # the batch (a 100 MB message's record) and its completions alive while idle.
            job = None
            # One hand-back per burst: a worker that finds one already posted leaves its job
            # to it (the hand-back clears the flag before it empties the deque, so a job
            # appended after that posts again).
            if not self._posted:
                self._posted = True
                self._post(self._hand_back)

    def _hand_back(self) -> None:
        self._posted = False
        done = self._done
        jobs = []
        while done:
            jobs.append(done.popleft())
        if jobs:
            self._deliver(jobs)

    def shutdown(self) -> None:
        """Stop the workers after the queued jobs (their results still need a hand-back)."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
