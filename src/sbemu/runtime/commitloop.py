"""The group commit on the event loop: when turns run, and waiting for commits to land.

The commit turn itself (sbemu.partitions.commits.GroupCommit) reads no clock and opens no
socket; this is its thin asyncio side, as aioquic's asyncio layer is over its sans-IO
connection. A wake asks for one turn soon (the wakes of one loop pass make one turn); a turn
runs the router's pending dispatch and hands every dirty partition's batch to a commit thread
(CommitThreads, at most COMMIT_THREADS in flight; ephemeral stores, which do not sync, commit
inline instead, inside the turn, but for a large message's: _InlineUnlessLarge); finished commits come back on the loop
(loop.call_soon_threadsafe), in order, and a turn follows at once, so what a send commit landed
reaches waiting receivers in the same callback as the acknowledgements. The output of a turn is
written at its end (Flusher). `settle` and `drain` wait on the idle event GroupCommit sets when
nothing is pending or in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from ..clock import Clock
from ..partitions import (
    COMMITS_PER_ENTITY,
    CommitJob,
    CommitThreads,
    GroupCommit,
    PartitionBroker,
    Router,
)
from ..protocol.listener import Flusher

log = logging.getLogger("sbemu.server")

# Commits in flight at once across partitions (at most one per partition; see
# sbemu.partitions.commits). The threads mostly wait in fsync with the GIL released, and
# concurrent fsyncs share the file system's journal commits. A dirty partition beyond the bound
# waits for a slot and takes its batch only then, so batches grow where commits would queue:
# on the 16-partition bench queue 8 cut server CPU per message by a fifth to a third against
# 16 (fewer, larger commits; half the context switches) at equal or better rates.
COMMIT_THREADS = 8


class CommitLoop:
    """GroupCommit over one router, its commit threads, and the turns the loop runs.

    `inline` (stores that do not sync: ``serve --ephemeral``): each commit runs inside the
    turn, on the loop, with no thread. Without a sync a commit only copies pages into the page
    cache, while the hand-off to a thread and back (and py-lmdb taking and dropping the GIL
    around every put) is what an acknowledgement would wait for: inline, a client that
    completes one message at a time gets its answer in the turn that read the request."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        router: Router,
        clock: Clock,
        flusher: Flusher,
        inline: bool = False,
    ) -> None:
        self._loop = loop
        self._clock = clock
        self._flusher = flusher
        self.commits = GroupCommit(
            router, max_inflight=COMMIT_THREADS, max_inflight_per_entity=COMMITS_PER_ENTITY
        )
        self._threads = CommitThreads(
            COMMIT_THREADS if not inline else 1, loop.call_soon_threadsafe, self._committed
        )
        self.commits.runner = self._threads if not inline else _InlineUnlessLarge(self)
        self.commits.on_error = _commit_failed
        self._idle = asyncio.Event()
        self.commits.on_idle = self._idle.set
        self._scheduled = False
        self.closed = False  # the stores are closed: turns do nothing

    def wake(self) -> None:
        """Ask for a turn soon (once, however often asked before it runs)."""
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.turn)

    def turn(self) -> None:
        """One commit turn now, and what it delivered written out at once (not a pass later)."""
        self._scheduled = False
        if self.closed:
            return
        self.commits.turn(int(self._clock() * 1000))
        self._flusher.run()

    def _committed(self, jobs: list[CommitJob]) -> None:
        """Finished commits, back on the loop: completions and re-commits, then at once a turn
        for what the completions made ready."""
        self.commits.finished(jobs)
        self.turn()

    async def settle(self, brokers: Collection[PartitionBroker]) -> None:
        """Until the given partitions have nothing pending or in flight."""
        wanted = set(brokers)
        while True:
            self.turn()
            if not self.commits.busy(wanted):
                return
            self._idle.clear()
            try:
                await asyncio.wait_for(self._idle.wait(), 0.05)
            except asyncio.TimeoutError:
                pass

    async def drain(self, give_up_s: float) -> None:
        """At a stop: until everything staged is committed, or for `give_up_s` seconds at most
        when a failing store can start no commit (none of what it holds was acknowledged)."""
        commits = self.commits
        self.turn()
        give_up = self._loop.time() + give_up_s
        while commits.busy():
            self._idle.clear()
            if not commits.inflight:
                if self._loop.time() >= give_up:
                    # A partition whose store keeps failing (a disk gone read-only) cannot
                    # commit what it holds; none of it was acknowledged, so stop anyway.
                    log.error(
                        "stopping with writes a failing store could not commit "
                        "(none of them was acknowledged)"
                    )
                    return
                self.turn()
                if commits.busy() and not commits.inflight:  # nothing could start: retry
                    await asyncio.sleep(0.01)
                continue
            await self._idle.wait()

    def busy(self) -> bool:
        """Whether a commit is pending or in flight (tools wait for it to end)."""
        return self.commits.busy()

    def shutdown(self) -> None:
        """Turns do nothing from now on (a turn a last commit scheduled must not dispatch or
        commit into closed stores, which a SIGTERM during commits would otherwise do) and the
        threads end."""
        self.closed = True
        self._threads.shutdown()


class _InlineUnlessLarge:
    """The runner of an inline CommitLoop: each commit inside the turn, but one that carries a
    large message's record (writebatch.LargeRecord), or reads one back (partitions' largeread),
    which goes to the commit thread: there the record is joined and written, or read, with the
    GIL released, where on the loop copying 99 MB into new pages held it for 200 ms and more."""

    def __init__(self, owner: CommitLoop) -> None:
        self._owner = owner

    def start(self, jobs: list[CommitJob]) -> None:
        inline = [job for job in jobs if not job.batch.off_the_loop()]
        if len(inline) < len(jobs):
            self._owner._threads.start([job for job in jobs if job.batch.off_the_loop()])
        if inline:
            for job in inline:
                job.run()
            self._owner.commits.finished(inline)


def _commit_failed(broker: PartitionBroker, error: Exception) -> None:
    log.error("partition %s/%d: commit failed: %s", broker.entity, broker.partition_id, error)
