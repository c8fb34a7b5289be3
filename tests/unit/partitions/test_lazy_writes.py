"""Lazy writes (PartitionBroker._dirty): the log record of a peek-lock delivery and a completion
the client settled without waiting for an outcome ride with the partition's next commit (or the
next timer tick) instead of each costing a commit; everything anyone waits for still commits
at once. Real LMDB, commits run by the test as the committer would run them."""

from broker_harness import commit, msg, open_broker

from sbemu.partitions import COMPLETE
from sbemu.partitions.broker import DLQ_SUFFIX, PartitionBroker, Route, SubQueueSettings
from sbemu.partitions.records import IncomingMessage, LogEvent, decode_log, expand_log

MAIN = "main"
SETTINGS = {
    MAIN: SubQueueSettings(60_000, 10, None, False, MAIN + DLQ_SUFFIX),
    MAIN + DLQ_SUFFIX: SubQueueSettings(60_000, None, None, False, None),
}


def _msg(i: int) -> IncomingMessage:
    return msg(i)


class Marks:
    """What the broker asked of the committer since the last look."""

    def __init__(self) -> None:
        self.dirty = 0
        self.lazy = 0

    def take(self) -> tuple[int, int]:
        got = (self.dirty, self.lazy)
        self.dirty = self.lazy = 0
        return got


def _open(path, marks: Marks) -> PartitionBroker:
    def dirty(_b: PartitionBroker) -> None:
        marks.dirty += 1

    def lazy(_b: PartitionBroker) -> None:
        marks.lazy += 1

    return open_broker(path, SETTINGS, mark_dirty=dirty, mark_lazy=lazy)


def _commit(broker: PartitionBroker) -> None:
    commit(broker)


def _logged(broker: PartitionBroker) -> list[LogEvent]:
    return [LogEvent(decode_log(v)["event"]) for _k, v in broker.store.read_log(0, 100)]


def test_delivery_and_settled_completion_wait_for_the_next_commit(tmp_path):
    marks = Marks()
    broker = _open(tmp_path / "p", marks)
    acked: list[Exception | None] = []
    broker.enqueue([_msg(1), _msg(2)], [[Route(MAIN)]] * 2, 1_000, acked.append)
    assert marks.take()[0] > 0 and marks.lazy == 0  # a send is committed at once
    _commit(broker)
    assert acked == [None]

    rec, lock = broker.take_next(MAIN, 1_001, peek_lock=True)
    assert marks.take() == (0, 1)  # the delivery's log record is lazy
    broker.complete_lazy([lock.key], 1_002)
    dirty, lazy = marks.take()
    assert dirty == 0 and lazy > 0  # so is a completion nobody waits for
    assert _logged(broker) == [LogEvent.ENQUEUED, LogEvent.ENQUEUED]

    # The next send commits them along with it, in order.
    broker.enqueue([_msg(3)], [[Route(MAIN)]], 1_003, acked.append)
    assert marks.take()[0] > 0
    _commit(broker)
    assert acked == [None, None]
    assert _logged(broker)[2:] == [LogEvent.DELIVERED, LogEvent.COMPLETED, LogEvent.ENQUEUED]
    assert broker.store.get(MAIN, rec.sequence_number, lambda b: b) is None


def test_completion_someone_waits_for_commits_at_once(tmp_path):
    marks = Marks()
    broker = _open(tmp_path / "p", marks)
    broker.enqueue([_msg(1)], [[Route(MAIN)]], 1_000, lambda e: None)
    _commit(broker)
    marks.take()
    _rec, lock = broker.take_next(MAIN, 1_001, peek_lock=True)
    done: list[Exception | None] = []
    broker.settle(lock.key, COMPLETE, 1_002, done.append)
    assert marks.take()[0] > 0  # an unsettled accept is answered after its own commit
    _commit(broker)
    assert done == [None]


def test_lazy_writes_commit_once_enough_pile_up(tmp_path):
    from sbemu.partitions.staging import LAZY_MAX_WRITES

    marks = Marks()
    broker = _open(tmp_path / "p", marks)
    n = LAZY_MAX_WRITES + 2
    broker.enqueue([_msg(i) for i in range(n)], [[Route(MAIN)]] * n, 1_000, lambda e: None)
    _commit(broker)
    marks.take()
    for _ in range(n):
        broker.take_next(MAIN, 1_001, peek_lock=True)
    dirty, _lazy = marks.take()
    assert dirty > 0  # a pile of lazy log records does not wait for a tick


def test_a_run_of_settled_completions_stages_what_one_by_one_would(tmp_path):
    """complete_lazy's run (remove_run: deletions, timers, counts, ready lines at once) stages
    the same writes as completing each message alone: the timers of messages with their own
    TTL deleted, none for those on the sub-queue's default, the counts and bytes, the overlay."""
    settings = {
        MAIN: SubQueueSettings(60_000, 10, 3_600_000, False, MAIN + DLQ_SUFFIX, message_ttl=True),
        MAIN + DLQ_SUFFIX: SubQueueSettings(60_000, None, None, False, None),
    }
    brokers = []
    for name in ("one", "run"):
        broker = open_broker(tmp_path / name, settings, mark_lazy=lambda b: None)
        sends = [msg(i, ttl=(None, 60_000, 3_600_000)[i % 3]) for i in range(9)]
        broker.enqueue(sends, [[Route(MAIN)]] * 9, 1_000, lambda e: None)
        commit(broker)
        taken = broker.take_batch(MAIN, 1_001, 9)
        assert len(taken) == 9
        keys = [lock.key for _rec, lock in taken if lock is not None]
        broker.take_commit()  # the deliveries' log records: out of the way
        if name == "one":
            for key in keys[:6]:
                broker.complete_lazy([key], 1_002)
        else:
            broker.complete_lazy(keys[:6], 1_002)
        brokers.append(broker)
    one, run = brokers
    assert run.staging.batch.ops == one.staging.batch.ops
    assert len(run.staging.batch.ops) == 6
    assert run.staging.batch.deadlines == one.staging.batch.deadlines
    assert len(run.staging.batch.deadlines) == 2  # the two with a 60 s TTL of their own
    assert run.queues[MAIN].counts == one.queues[MAIN].counts == [3, 0, 0]
    assert run.queues[MAIN].bytes == one.queues[MAIN].bytes
    assert run.staging.overlay == one.staging.overlay
    assert [r for _o, v in run.staging.batch.log for r in expand_log(v)] == [
        v for _o, v in one.staging.batch.log
    ]
