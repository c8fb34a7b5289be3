"""Regression (found by the soak in hardening/): timers of consumed messages stayed until their
TTL passed, so memory grew with throughput rather than with the backlog. On the index layout
[issue 10] a message's timer is deleted with it (and a message with the default TTL stores none):
neither memory nor the deadlines database grows with the messages sent and completed."""

from broker_harness import commit as commit_broker
from broker_harness import msg, open_broker

from sbemu.partitions import COMPLETE
from sbemu.partitions.broker import Route, SubQueueSettings
from sbemu.partitions.records import IncomingMessage

MAIN = "main"
SETTINGS = {MAIN: SubQueueSettings(60_000, 10, 3_600_000, False, None)}


def _msg(i: int) -> IncomingMessage:
    return msg(i)


def test_timers_of_consumed_messages_do_not_accumulate(tmp_path):
    broker = open_broker(tmp_path / "p0", SETTINGS, map_size=256 << 20)
    store = broker.store

    def commit() -> None:
        commit_broker(broker)

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
            broker.settle(taken[1].key, COMPLETE, now, lambda e: None)
        commit()
        now += 10
        assert store.first_deadline(b"") is None  # no timers were left behind
    sq = broker.queues[MAIN]
    assert not broker.staging.overlay and not sq.buffer and not sq.back and not broker.locks
    assert broker.counts(MAIN)["active"] == 0 and sq.bytes == 0
    store.close()
