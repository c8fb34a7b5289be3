"""Main's broker features on the index layout [issue 10 + issues 8, 9, 12]: real LMDB, fake clock.

Size in bytes kept with the counts, purge streamed through the store, operator removal,
scheduled topic messages fanned out from a cold store, forwarding's outbox moves.
"""

import pytest
from broker_harness import DLQ, MAIN, Harness, msg, open_broker
from broker_harness import commit as commit_broker

from sbemu.partitions import COMPLETE, Outcome
from sbemu.partitions.records import LogEvent, MessageState, decode_log
from sbemu.partitions.subqueue import SubQueueSettings
from sbemu.partitions.transitions import SCHEDULED_QUEUE, Route


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path / "p0")


def events(h):
    return [decode_log(v)["event"] for _, v in h.store.read_log(0, 1_000_000)]


def test_size_in_bytes_follows_every_move_and_survives_restart(h):
    h.send(msg(1), msg(2), msg(3))  # 10 bytes each
    assert h.broker.queues[MAIN].bytes == 30
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    h.broker.settle(lock.key, COMPLETE, 1000, lambda e: None)
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    h.broker.settle(lock.key, Outcome.dead_letter("r", "d", None), 1000, lambda e: None)
    h.commit()
    assert (h.broker.queues[MAIN].bytes, h.broker.queues[DLQ].bytes) == (10, 10)
    h.reopen()
    assert (h.broker.queues[MAIN].bytes, h.broker.queues[DLQ].bytes) == (10, 10)
    h.broker.take_next(MAIN, 1000, False)  # receive-and-delete
    h.commit()
    h.reopen()
    assert h.broker.queues[MAIN].bytes == 0


def test_purge_streams_the_whole_backlog_with_pending_and_locked_messages(h):
    h.send(*[msg(i) for i in range(2_500)])  # more than one scan chunk
    h.reopen()  # cold: nothing of the backlog in memory
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    _rec, lock2 = h.broker.take_next(MAIN, 1000, True)
    h.broker.settle(lock2.key, Outcome.abandon(None), 1000, lambda e: None)  # an uncommitted change
    assert h.broker.purge_queue(MAIN, 2000) == 2_500  # each message once
    assert h.broker.counts(MAIN) == {"active": 0, "deferred": 0, "scheduled": 0}
    assert h.broker.queues[MAIN].bytes == 0
    assert not h.broker.locks and h.broker.take_next(MAIN, 2000, True) is None
    h.commit()
    assert events(h).count(LogEvent.PURGED.value) == 2_500
    h.reopen()
    assert h.broker.peek(MAIN, 0, 10) == []
    assert h.broker.counts(MAIN)["active"] == 0 and h.broker.queues[MAIN].bytes == 0


def test_operator_remove_skips_locked_messages(h):
    h.send(msg(1), msg(2))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    assert h.broker.remove(MAIN, lock.seq, 1000) is None  # locked: stays with its receiver
    removed = h.broker.remove(MAIN, 2, 1000)
    assert removed is not None and removed.sequence_number == 2
    assert h.broker.remove(MAIN, 2, 1000) is None  # gone (before the commit too)
    h.commit()
    h.reopen()
    assert [r.sequence_number for r in h.broker.peek(MAIN, 0, 10)] == [1]
    assert h.broker.counts(MAIN)["active"] == 1 and h.broker.queues[MAIN].bytes == 10


def test_forward_out_moves_to_the_transfer_dlq_with_counts(h):
    h.send(msg(1), msg(2))
    taken = h.broker.take_ready(MAIN, 10)
    assert [r.sequence_number for r in taken] == [1, 2]
    h.broker.forward_out(MAIN, 1, 1000)  # forwarded
    h.broker.forward_out(MAIN, 2, 1000, DLQ, "MessagingEntityNotFound", "gone")
    h.commit()
    h.reopen()
    assert h.broker.peek(MAIN, 0, 10) == []
    moved = h.broker.peek(DLQ, 0, 10)
    assert [(r.sequence_number, r.dead_letter_reason) for r in moved] == [
        (2, "MessagingEntityNotFound")
    ]
    assert h.broker.counts(DLQ)["active"] == 1 and h.broker.queues[MAIN].bytes == 0


SUB_A, SUB_B = "subscriptions/a", "subscriptions/b"
TOPIC_QUEUES = {
    SUB_A: SubQueueSettings(5_000, 3, None, False, None),
    SUB_B: SubQueueSettings(5_000, 3, None, False, None),
    SCHEDULED_QUEUE: SubQueueSettings(60_000, None, None, False, None),
}


def open_topic(path):
    broker = open_broker(path, TOPIC_QUEUES, entity="t")
    broker.fan_out = lambda rec: [Route(SUB_A), Route(SUB_B)]
    return broker.store, broker


def commit(store, broker):
    commit_broker(broker)


def test_scheduled_topic_message_fans_out_from_a_cold_store(tmp_path):
    store, broker = open_topic(tmp_path / "t0")
    done = []
    broker.enqueue(
        [msg(1, scheduled_enqueue_time_ms=5_000)], [[Route(SCHEDULED_QUEUE)]], 1000, done.append
    )
    commit(store, broker)
    assert done == [None]
    assert broker.counts(SCHEDULED_QUEUE)["scheduled"] == 1
    store.close()
    store, broker = open_topic(tmp_path / "t0")  # restart: the timer is on disk
    assert broker.next_deadline() == 5_000
    broker.on_timer(5_000)
    commit(store, broker)
    for sub in (SUB_A, SUB_B):
        got = broker.take_next(sub, 5_000, False)
        assert got is not None
        rec = got[0]
        assert rec.state == MessageState.ACTIVE and rec.message_id == "m1"
        assert rec.sequence_number == 2  # enqueued anew, one number shared by the copies
        assert broker.counts(sub)["active"] == 0  # received-and-deleted
    assert broker.counts(SCHEDULED_QUEUE)["scheduled"] == 0
    assert broker.peek(SCHEDULED_QUEUE, 0, 10) == []
    commit(store, broker)
    store.close()
