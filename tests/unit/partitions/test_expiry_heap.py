"""Regression (found by the soak in hardening/): timers of consumed messages stayed until their
TTL passed, so memory grew with throughput rather than with the backlog. On the index layout
[issue 10] a message's timer is deleted with it (and a message with the default TTL stores none):
neither memory nor the deadlines database grows with the messages sent and completed."""

from sbemu.partitions.broker import PartitionBroker, Route, SubQueueSettings
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.store import PartitionStore

MAIN = "main"
SETTINGS = {MAIN: SubQueueSettings(60_000, 10, 3_600_000, False, None)}


def _msg(i: int) -> IncomingMessage:
    return IncomingMessage(
        message_id=f"m{i}",
        session_id=None,
        partition_key=None,
        ttl_ms=None,
        durable=True,
        priority=None,
        annotation_count=0,
        annotations=b"",
        tail=b"\x00Sw\xa1\x02hi",
        size=10,
    )


def test_timers_of_consumed_messages_do_not_accumulate(tmp_path):
    store = PartitionStore(str(tmp_path / "p0"), map_size=256 << 20)
    broker = PartitionBroker(
        store,
        namespace="ns",
        entity="q",
        partition_id=0,
        partitioned=False,
        queues=SETTINGS,
        mark_dirty=lambda b: None,
    )
    broker.load()

    def commit() -> None:
        taken = broker.take_commit()
        if taken:
            batch, callbacks = taken
            if batch:
                store.commit(batch)
            broker.commit_done(callbacks, None)

    now = 1_000
    for round_no in range(30):  # 30 x 500 messages sent and completed, within their TTL
        broker.enqueue(
            [_msg(round_no * 500 + i) for i in range(500)],
            [[Route(MAIN)]] * 500,
            now,
            lambda e: None,
        )
        commit()
        # default-TTL messages store no timer: their expiry is derived from the oldest one
        assert store.first_deadline(b"") is None
        while (taken := broker.take_next(MAIN, now, True)) is not None:
            broker.complete(taken[1].key, now, lambda e: None)
        commit()
        now += 10
        assert store.first_deadline(b"") is None  # no timers were left behind
    sq = broker.queues[MAIN]
    assert not broker.staging.overlay and not sq.buffer and not sq.back and not broker.locks
    assert broker.counts(MAIN)["active"] == 0 and sq.bytes == 0
    store.close()
