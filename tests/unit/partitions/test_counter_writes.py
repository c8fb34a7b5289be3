"""A commit writes only the per-sub-queue counters that changed since the batches before it
(PartitionBroker.take_commit): every unchanged counter would cost the commit thread an LMDB put
and a GIL round trip. After a failed commit every counter is written again, and the counts
read back after a restart are the true ones. Real LMDB."""

from broker_harness import msg, open_broker

from sbemu.partitions.broker import DLQ_SUFFIX, PartitionBroker, Route, SubQueueSettings
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.store import StoreFull

MAIN = "main"
SETTINGS = {
    MAIN: SubQueueSettings(60_000, 10, None, False, MAIN + DLQ_SUFFIX),
    MAIN + DLQ_SUFFIX: SubQueueSettings(60_000, None, None, False, None),
}
COUNTERS = {f"n:{MAIN}:{k}" for k in "adsb"}


def _msg(i: int) -> IncomingMessage:
    return msg(i)


def _open(path) -> PartitionBroker:
    return open_broker(path, SETTINGS, mark_lazy=lambda _b: None)


def _counters_written(broker: PartitionBroker, error: Exception | None = None) -> set[str]:
    """Take the pending batch, commit it (or fail it with `error`); the counters it wrote."""
    taken = broker.take_commit()
    assert taken is not None
    batch, callbacks = taken
    if error is None:
        broker.store.commit(batch)
    broker.commit_done(callbacks, error)
    return {k for k in batch.meta if k.startswith("n:")}


def test_only_changed_counters_are_written_and_restart_reads_the_true_counts(tmp_path):
    broker = _open(tmp_path / "p")
    broker.enqueue([_msg(1), _msg(2)], [[Route(MAIN)]] * 2, 1_000, lambda e: None)
    assert _counters_written(broker) == COUNTERS

    broker.enqueue([_msg(3)], [[Route(MAIN)]], 1_001, lambda e: None)
    # active count and bytes changed; deferred and scheduled stayed 0 and are not written again
    assert _counters_written(broker) == {f"n:{MAIN}:a", f"n:{MAIN}:b"}

    rec, _lock = broker.take_next(MAIN, 1_002, peek_lock=False)  # receive-and-delete
    assert rec is not None
    assert _counters_written(broker) == {f"n:{MAIN}:a", f"n:{MAIN}:b"}
    size = broker.queues[MAIN].bytes
    broker.store.close()

    again = _open(tmp_path / "p")
    assert again.queues[MAIN].counts == [2, 0, 0]
    assert again.queues[MAIN].bytes == size


def test_after_a_failed_commit_every_dirty_counter_is_written(tmp_path):
    broker = _open(tmp_path / "p")
    broker.enqueue([_msg(1)], [[Route(MAIN)]], 1_000, lambda e: None)
    _counters_written(broker)
    broker.enqueue([_msg(2)], [[Route(MAIN)]], 1_001, lambda e: None)
    failed: list[Exception | None] = []
    broker.enqueue([_msg(3)], [[Route(MAIN)]], 1_001, failed.append)
    # the map was full: the batch is forgotten, the map grows, the partition reloads
    _counters_written(broker, StoreFull("full"))
    assert len(failed) == 1 and failed[0] is not None
    broker.enqueue([_msg(4)], [[Route(MAIN)]], 1_002, lambda e: None)
    assert _counters_written(broker) == COUNTERS
    broker.store.close()

    again = _open(tmp_path / "p")
    assert again.queues[MAIN].counts == [2, 0, 0]  # m1 and m4; m2 and m3 were refused
