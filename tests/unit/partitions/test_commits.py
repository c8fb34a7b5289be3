"""The group-commit turn (sbemu.partitions.commits): one commit per dirty partition per turn,
at most one in flight per partition, a bound across partitions, completions only after the
commit, and the worker threads' hand-back.

Real LMDB in a temp dir (routing_harness). A held runner keeps started jobs until the test
finishes them, to look at the turn while commits are in flight.
"""

from __future__ import annotations

import queue
import threading

import pytest
from routing_harness import NOW, RouterHarness, message, queue_spec

from sbemu.partitions.commits import CommitJob, CommitThreads, GroupCommit
from sbemu.partitions.keys import partition_for_key
from sbemu.partitions.specs import MAIN
from sbemu.partitions.store import StoreUnavailable


class HeldRunner:
    """Keeps started jobs (as worker threads would while they sync) until finish() runs them."""

    def __init__(self) -> None:
        self.started: list[CommitJob] = []
        self.commits: GroupCommit | None = None

    def start(self, jobs: list[CommitJob]) -> None:
        self.started.extend(jobs)

    def finish(self, jobs: list[CommitJob] | None = None) -> None:
        jobs = list(self.started) if jobs is None else jobs
        for job in jobs:
            self.started.remove(job)
            job.run()
        assert self.commits is not None
        self.commits.finished(jobs)


@pytest.fixture
def h(tmp_path):
    return RouterHarness(tmp_path)


def held(
    h: RouterHarness, max_inflight: int | None = None, per_entity: int | None = None
) -> tuple[GroupCommit, HeldRunner]:
    runner = HeldRunner()
    commits = GroupCommit(
        h.router, runner, max_inflight=max_inflight, max_inflight_per_entity=per_entity
    )
    runner.commits = commits
    return commits, runner


def send(entity, *messages, outcome: list) -> None:
    entity.send(list(messages), NOW, outcome.append)


def _key_on(partition: int, count: int) -> str:
    return next(f"k{i}" for i in range(10_000) if partition_for_key(f"k{i}", count) == partition)


def test_keyless_sends_fill_one_commit_per_partition_in_turn(h):
    """[P8] Key-less sends join the batch of the partition chosen last while it still gathers
    (its commit has not started); once the batch is taken the next partition in turn is
    chosen. One send per commit is plain round-robin."""
    q = h.add(queue_spec("q", partitions=4))
    commits, runner = held(h, per_entity=1)
    outcome: list = []
    for i in range(3):  # a stream: all three join partition 0's gathering batch
        send(q, message(f"a{i}"), outcome=outcome)
    commits.turn(NOW)
    assert [(job.broker.partition_id, len(job.batch.ops)) for job in runner.started] == [(0, 3)]
    for i in range(4):  # partition 0 commits; these gather on partition 1, waiting for a slot
        send(q, message(f"b{i}"), outcome=outcome)
        commits.turn(NOW)
    assert len(runner.started) == 1
    runner.finish()  # partition 0's commit lands; partition 1's batch of 4 starts
    assert [(job.broker.partition_id, len(job.batch.ops)) for job in runner.started] == [(1, 4)]
    runner.finish()
    for i in range(4):  # one at a time, each committed before the next: round-robin
        send(q, message(f"c{i}"), outcome=outcome)
        commits.turn(NOW)
        runner.finish()
    where = h.partitions_of(q)
    assert {where[f"a{i}"] for i in range(3)} == {0} and {where[f"b{i}"] for i in range(4)} == {1}
    assert [where[f"c{i}"] for i in range(4)] == [2, 3, 0, 1]
    assert outcome == [None] * 11


def test_a_send_is_acknowledged_only_after_its_commit_and_is_then_stored(h):
    q = h.add(queue_spec("q", partitions=1))
    commits, runner = held(h)
    outcome: list = []
    send(q, message("a"), outcome=outcome)
    commits.turn(NOW)
    assert [job.broker for job in runner.started] == q.partitions
    assert outcome == []  # in flight: not acknowledged yet
    assert q.partitions[0].store.entries(MAIN) == 0
    runner.finish()
    assert outcome == [None]
    assert q.partitions[0].store.entries(MAIN) == 1
    assert not commits.busy()


def test_one_commit_per_dirty_partition_per_turn_all_started_together(h):
    q = h.add(queue_spec("q", partitions=4))
    commits, runner = held(h)
    outcome: list = []
    for i in range(8):  # two sends per partition, each pinned by its key
        send(q, message(f"m{i}", partition_key=_key_on(i % 4, 4)), outcome=outcome)
    commits.turn(NOW)
    assert sorted(job.broker.partition_id for job in runner.started) == [0, 1, 2, 3]
    assert all(len(job.batch.ops) == 2 for job in runner.started)
    runner.finish()
    assert outcome == [None] * 8


def test_a_partition_dirtied_while_its_commit_runs_commits_again_after_it(h):
    q = h.add(queue_spec("q", partitions=1))
    commits, runner = held(h)
    first: list = []
    second: list = []
    send(q, message("a"), outcome=first)
    commits.turn(NOW)
    send(q, message("b"), outcome=second)
    send(q, message("c"), outcome=second)
    commits.turn(NOW)
    assert len(runner.started) == 1  # never two commits of one partition in flight
    assert commits.busy()
    runner.finish()
    assert first == [None] and second == []
    assert len(runner.started) == 1 and len(runner.started[0].batch.ops) == 2
    runner.finish()
    assert second == [None, None]
    assert q.partitions[0].store.entries(MAIN) == 3


def test_beyond_the_bound_a_partition_waits_and_gathers_into_one_batch(h):
    q = h.add(queue_spec("q", partitions=4))
    commits, runner = held(h, max_inflight=2)
    outcome: list = []
    for i in range(4):  # one send pinned to each partition
        send(q, message(f"m{i}", partition_key=_key_on(i % 4, 4)), outcome=outcome)
    commits.turn(NOW)
    assert len(runner.started) == 2
    waiting = {b.partition_id for b in q.partitions} - {
        j.broker.partition_id for j in runner.started
    }
    for i in range(4, 12):  # two more rounds over the four partitions
        send(q, message(f"m{i}", partition_key=_key_on(i % 4, 4)), outcome=outcome)
    commits.turn(NOW)
    assert len(runner.started) == 2  # still bounded
    runner.finish()
    # the slots go to the partitions that waited, each with all it gathered in one batch
    assert {j.broker.partition_id for j in runner.started} == waiting
    assert all(len(j.batch.ops) == 3 for j in runner.started)
    while runner.started:
        runner.finish()
    assert outcome == [None] * 12
    assert sum(b.store.entries(MAIN) for b in q.partitions) == 12
    assert not commits.busy()


def test_an_entity_beyond_its_own_bound_gathers_while_other_entities_commit(h):
    busy = h.add(queue_spec("busy", partitions=4))
    other = h.add(queue_spec("other", partitions=1))
    commits, runner = held(h, max_inflight=8, per_entity=2)
    outcome: list = []
    for i in range(4):  # one send pinned to each partition of the busy entity
        send(busy, message(f"b{i}", partition_key=_key_on(i % 4, 4)), outcome=outcome)
    send(other, message("o"), outcome=outcome)
    commits.turn(NOW)
    started = [j.broker.entity for j in runner.started]
    assert sorted(started) == ["busy", "busy", "other"]  # the other entity has its own slots
    for i in range(4, 12):  # more for every partition of the busy entity while it waits
        send(busy, message(f"b{i}", partition_key=_key_on(i % 4, 4)), outcome=outcome)
    commits.turn(NOW)
    assert len(runner.started) == 3  # still two of the busy entity
    busy_jobs = [j for j in runner.started if j.broker.entity == "busy"]
    waiting = {b.partition_id for b in busy.partitions} - {j.broker.partition_id for j in busy_jobs}
    runner.finish(busy_jobs)
    # the freed slots go to the partitions that waited, each with all it gathered
    now_busy = [j for j in runner.started if j.broker.entity == "busy"]
    assert {j.broker.partition_id for j in now_busy} == waiting
    assert all(len(j.batch.ops) == 3 for j in now_busy)
    while runner.started:
        runner.finish()
    assert outcome == [None] * 13
    assert sum(b.store.entries(MAIN) for b in busy.partitions) == 12
    assert not commits.busy()


def test_a_failed_commit_reaches_the_completions_and_the_turn_goes_on(h):
    q = h.add(queue_spec("q", partitions=2))
    commits, runner = held(h)
    errors: list = []
    commits.on_error = lambda broker, exc: errors.append((broker.partition_id, exc))
    outcome: list = []
    send(q, message("a", partition_key=_key_on(0, 2)), outcome=outcome)
    send(q, message("b", partition_key=_key_on(1, 2)), outcome=outcome)
    commits.turn(NOW)
    broken = runner.started[0].broker

    def failing_commit(batch: object) -> None:  # an I/O fault injected into this one store
        raise StoreUnavailable(f"partition store {broken.store.path} failed: EIO")

    broken.store.commit = failing_commit  # type: ignore[method-assign]
    runner.finish()
    assert [pid for pid, _ in errors] == [broken.partition_id]
    assert sorted(o is None for o in outcome) == [False, True]
    assert not commits.busy()


def test_inline_turn_commits_everything_at_once(h):
    q = h.add(queue_spec("q", partitions=4))
    commits = GroupCommit(h.router)
    outcome: list = []
    for i in range(6):
        send(q, message(f"m{i}"), outcome=outcome)
    commits.run_until_idle(NOW)
    assert outcome == [None] * 6
    assert not commits.busy()


def test_worker_threads_commit_concurrently_and_hand_back_on_the_turn_thread(h):
    q = h.add(queue_spec("q", partitions=16))
    posted: queue.SimpleQueue = queue.SimpleQueue()
    turn_thread = threading.get_ident()
    delivered_on: set[int] = set()
    commits = GroupCommit(h.router, max_inflight=8)

    def deliver(jobs: list[CommitJob]) -> None:
        delivered_on.add(threading.get_ident())
        commits.finished(jobs)

    threads = CommitThreads(8, posted.put, deliver, name="test-commit")
    commits.runner = threads
    try:
        outcome: list = []
        for i in range(64):
            send(q, message(f"m{i}"), outcome=outcome)
        commits.turn(NOW)
        while commits.busy():  # the test thread plays the event loop
            posted.get(timeout=30)()
        assert outcome == [None] * 64
        assert delivered_on == {turn_thread}
        assert sum(b.store.entries(MAIN) for b in q.partitions) == 64
    finally:
        threads.shutdown()


def test_lazy_writes_wait_for_a_commit_to_ride_with_and_at_most_two_ticks():
    """A partition with only lazy writes is committed by the timer tick only once it has
    waited a whole tick with no commit of its own (the busy partitions of a 16-partition
    entity take theirs along and make no commits at the tick); flush_lazy (a stop) commits
    every one at once."""
    from sbemu.partitions.commits import DirtyPartitions

    wakes: list[int] = []
    parts = DirtyPartitions(lambda: wakes.append(1))
    idle, busy, late = object(), object(), object()  # partitions: only identity matters
    parts.mark_lazy(idle)  # type: ignore[arg-type]
    parts.mark_lazy(busy)  # type: ignore[arg-type]
    parts.tick_lazy()  # first tick: both wait
    assert parts.dirty == set() and wakes == []
    parts.mark(busy)  # type: ignore[arg-type]  # a send: its commit takes the lazy writes
    assert set(parts.take()) == {busy}
    parts.mark_lazy(late)  # type: ignore[arg-type]  # after the first tick
    parts.tick_lazy()  # second tick: `idle` waited a whole tick, `late` did not
    assert parts.dirty == {idle} and wakes
    assert set(parts.take()) == {idle}
    parts.mark_lazy(busy)  # type: ignore[arg-type]  # new lazy writes since its commit
    parts.tick_lazy()
    assert parts.dirty == {late}  # busy's are young
    parts.take()
    parts.tick_lazy()
    assert parts.dirty == {busy}
    parts.take()
    parts.mark_lazy(idle)  # type: ignore[arg-type]
    parts.tick_lazy()
    parts.forget(idle)  # type: ignore[arg-type]  # a removed partition
    parts.tick_lazy()
    assert parts.dirty == set()
    parts.mark_lazy(late)  # type: ignore[arg-type]
    parts.flush_lazy()  # a stop: everything now
    assert parts.dirty == {late} and parts.lazy == set() and parts.aged == set()
