"""A message's own TTL on a sub-queue with no default TTL [issue 23 item 2].

Azure's default DefaultMessageTimeToLive is TimeSpan.MaxValue ("never"): such an entity has no
default TTL, yet each message's own time-to-live still applies, and an expired message is never
handed out (dead-lettered when the entity says so). Dead-letter queues observe no TTL at all.
Real LMDB, a fake clock (now_ms passed in)."""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_harness import commit, msg, open_broker

from sbemu.partitions import COMPLETE
from sbemu.partitions.broker import DLQ_SUFFIX
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.subqueue import SubQueueSettings
from sbemu.partitions.transitions import Route

MAIN = "main"
DLQ = MAIN + DLQ_SUFFIX
T0 = 1_000_000
TTL = 15_000


def _settings(dead_letter_on_expiration: bool) -> dict[str, SubQueueSettings]:
    return {  # as runtime/server.py builds an entity whose default TTL is "never"
        MAIN: SubQueueSettings(5_000, 10, None, dead_letter_on_expiration, DLQ, message_ttl=True),
        DLQ: SubQueueSettings(5_000, None, None, False, None),
    }


def _msg(i: int, ttl: int | None = TTL) -> IncomingMessage:
    return msg(i, ttl)


class _Broker:
    def __init__(self, path: Path, dead_letter_on_expiration: bool = True) -> None:
        self.broker = open_broker(path, _settings(dead_letter_on_expiration), map_size=16 << 20)
        self.store = self.broker.store

    def commit(self) -> None:
        commit(self.broker)

    def send(self, *messages: IncomingMessage, now: int = T0) -> None:
        self.broker.enqueue(list(messages), [[Route(MAIN)]] * len(messages), now, lambda e: None)
        self.commit()

    def ids(self, queue: str) -> list[str]:
        return [r.message_id for r in self.broker.peek(queue, 0, 100)]


@pytest.fixture
def b(tmp_path: Path):
    broker = _Broker(tmp_path / "p0")
    yield broker
    broker.store.close()


def test_not_delivered_one_millisecond_after_expiry(b: _Broker) -> None:
    b.send(_msg(1))
    assert b.broker.take_next(MAIN, T0 + TTL, True) is None  # due at enqueue + TTL
    b.commit()
    assert b.ids(MAIN) == []
    (dead,) = b.broker.peek(DLQ, 0, 10)
    assert (dead.message_id, dead.dead_letter_reason) == ("m1", "TTLExpiredException")


def test_batch_take_skips_expired_messages(b: _Broker) -> None:
    b.send(_msg(1), _msg(2, ttl=None), _msg(3, ttl=60_000))
    taken = b.broker.take_batch(MAIN, T0 + TTL + 1, 5)
    assert [rec.message_id for rec, _ in taken] == ["m2", "m3"]
    b.commit()
    assert b.ids(DLQ) == ["m1"]


def test_the_timer_dead_letters_without_a_receiver(b: _Broker) -> None:
    b.send(_msg(1))
    assert b.broker.next_deadline() == T0 + TTL
    b.broker.on_timer(T0 + TTL - 1)
    b.commit()
    assert b.ids(MAIN) == ["m1"]
    b.broker.on_timer(T0 + TTL)
    b.commit()
    assert b.ids(MAIN) == [] and b.ids(DLQ) == ["m1"]
    assert b.store.first_deadline(b"") is None  # its timer went with it


def test_completed_message_leaves_no_timer(b: _Broker) -> None:
    b.send(_msg(1))
    rec, lock = b.broker.take_next(MAIN, T0 + 1, True)
    assert lock is not None
    b.broker.settle(lock.key, COMPLETE, T0 + 2, lambda e: None)
    b.commit()
    assert b.store.first_deadline(b"") is None


def test_expired_message_is_dropped_without_dead_lettering(tmp_path: Path) -> None:
    b = _Broker(tmp_path / "p1", dead_letter_on_expiration=False)
    b.send(_msg(1), _msg(2, ttl=None))
    rec, _ = b.broker.take_next(MAIN, T0 + TTL, False)
    assert rec.message_id == "m2"
    b.commit()
    assert b.ids(MAIN) == [] and b.ids(DLQ) == []
    b.store.close()


def test_dead_letter_queue_observes_no_ttl(b: _Broker) -> None:
    b.send(_msg(1))
    b.broker.on_timer(T0 + TTL)
    b.commit()
    rec, _ = b.broker.take_next(DLQ, T0 + 10 * TTL, False)  # long past its TTL: still there
    assert rec.message_id == "m1"
