"""A session lock lives while the session is active [issue 23 item 6].

Azure expires a session lock once the accepted session "remains idle for the duration of lock,
that is no operations performed on the session" (the SDKs' SessionLockLostException): a
delivery from the session and a receive request keep it. Before, the lock ended one lock
duration after the accept whatever the receiver did, so a receive-and-delete receiver whose
iterator waits max_wait_time = LockDuration after its last message met session-lock-lost
exactly when the first lock period ended (the SDK suite's
test_session_by_queue_client_conn_str_receive_handler_receiveanddelete, intermittently).
Real LMDB, a fake clock."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from broker_harness import commit, msg, open_broker

from sbemu.partitions import COMPLETE
from sbemu.partitions.broker import DLQ_SUFFIX, PartitionBroker
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.subqueue import SessionLock, SubQueueSettings
from sbemu.partitions.transitions import Route

MAIN = "main"
DLQ = MAIN + DLQ_SUFFIX
LOCK_MS = 5_000
T0 = 1_000_000
SETTINGS = {
    MAIN: SubQueueSettings(LOCK_MS, 10, None, False, DLQ, requires_session=True, message_ttl=True),
    DLQ: SubQueueSettings(LOCK_MS, None, None, False, None),
}


def _msg(i: int, session_id: str = "s") -> IncomingMessage:
    return msg(i, session_id=session_id)


@dataclasses.dataclass
class _Partition:
    store: PartitionStore
    broker: PartitionBroker
    lost: list[SessionLock]

    def commit(self) -> None:
        commit(self.broker)


@pytest.fixture
def p(tmp_path: Path):
    broker = open_broker(tmp_path / "p0", SETTINGS, map_size=16 << 20)
    store = broker.store
    part = _Partition(store, broker, [])
    broker.on_session_lost = part.lost.append
    broker.enqueue([_msg(i) for i in range(20)], [[Route(MAIN)]] * 20, T0, lambda e: None)
    part.commit()
    yield part
    store.close()


def test_idle_session_loses_its_lock_one_duration_after_the_accept(p: _Partition) -> None:
    lock = p.broker.accept_session(MAIN, "s", "owner", T0)
    p.broker.on_timer(T0 + LOCK_MS - 1)
    assert p.lost == []
    p.broker.on_timer(T0 + LOCK_MS)
    assert p.lost == [lock]


def test_a_delivery_keeps_the_session_lock(p: _Partition) -> None:
    lock = p.broker.accept_session(MAIN, "s", "owner", T0)
    rec, _ = p.broker.take_next(MAIN, T0 + 4_000, False, lock)  # receive-and-delete
    assert rec.message_id == "m0"
    assert lock.until_ms == T0 + 4_000 + LOCK_MS
    p.broker.on_timer(T0 + LOCK_MS)  # the first lock period ends: still held
    assert p.lost == [] and p.broker.session_owner(MAIN, "s", T0 + LOCK_MS) == "owner"
    assert p.broker.next_deadline() == T0 + 4_000 + LOCK_MS  # re-armed at the new expiry
    p.broker.on_timer(T0 + 4_000 + LOCK_MS)
    assert p.lost == [lock]


def test_a_receive_request_keeps_the_session_lock(p: _Partition) -> None:
    lock = p.broker.accept_session(MAIN, "s", "owner", T0)
    p.broker.touch_session(lock, T0 + 3_000)
    p.broker.on_timer(T0 + LOCK_MS + 1)
    assert p.lost == []
    p.broker.on_timer(T0 + 3_000 + LOCK_MS)
    assert p.lost == [lock]


def test_peek_locked_messages_carry_the_extended_lock(p: _Partition) -> None:
    lock = p.broker.accept_session(MAIN, "s", "owner", T0)
    _, msg_lock = p.broker.take_next(MAIN, T0 + 2_000, True, lock)
    assert msg_lock is not None and msg_lock.until_ms == T0 + 2_000 + LOCK_MS
    p.broker.on_timer(T0 + LOCK_MS)
    p.broker.settle(msg_lock.key, COMPLETE, T0 + LOCK_MS + 1, lambda e: None)  # still held


def test_activity_does_not_bring_a_lost_lock_back(p: _Partition) -> None:
    lock = p.broker.accept_session(MAIN, "s", "owner", T0)
    p.broker.on_timer(T0 + LOCK_MS)
    assert p.lost == [lock]
    p.broker.touch_session(lock, T0 + LOCK_MS + 1)
    assert p.broker.take_next(MAIN, T0 + LOCK_MS + 1, False, lock) is None
    assert p.broker.session_owner(MAIN, "s", T0 + LOCK_MS + 1) is None


def test_the_session_timer_heap_does_not_grow_with_deliveries(p: _Partition) -> None:
    lock = p.broker.accept_session(MAIN, "s", "owner", T0)
    for i in range(20):
        assert p.broker.take_next(MAIN, T0 + i * 100, False, lock) is not None
        p.broker.touch_session(lock, T0 + i * 100)
    assert len(p.broker.lock_table.session_heap) == 1
    renewed = p.broker.renew_session(MAIN, "s", "owner", T0 + 2_500)  # explicit renew too
    p.broker.on_timer(T0 + LOCK_MS)  # the accept's entry: re-armed once, not doubled
    assert p.lost == [] and len(p.broker.lock_table.session_heap) == 1
    p.broker.on_timer(renewed)
    assert p.lost == [lock] and not p.broker.lock_table.session_heap
