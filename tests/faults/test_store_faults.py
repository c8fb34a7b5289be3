"""Store faults of one partition over real LMDB, committed the way the server does (take the
batch, commit it, hand the outcome back): a map that really fills grows by itself, an I/O
fault takes the partition out of service and it comes back by itself once the store opens
again. Nothing acknowledged is lost; whatever failed is answered with server-busy."""

from __future__ import annotations

import os
import shutil

from sbemu.errors import ServerBusy
from sbemu.partitions.broker import (
    DLQ_SUFFIX,
    FAULT_RETRY_MS,
    PartitionBroker,
    Route,
    SubQueueSettings,
)
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.store import PartitionStore, StoreFull

MAIN = "main"
SETTINGS = {
    MAIN: SubQueueSettings(60_000, 10, None, False, MAIN + DLQ_SUFFIX),
    MAIN + DLQ_SUFFIX: SubQueueSettings(60_000, None, None, False, None),
}
BODY = b"\x00Sw\xa0\x00\x00\x40\x00" + b"x" * 16_384  # a 16 KiB binary body section


def _msg(i: int) -> IncomingMessage:
    return IncomingMessage(
        message_id=f"m{i}", session_id=None, partition_key=None, ttl_ms=None, durable=True,
        priority=None, annotation_count=0, annotations=b"", tail=BODY, size=len(BODY),
    )


def _open(path: str, map_size: int) -> PartitionBroker:
    broker = PartitionBroker(
        PartitionStore(path, map_size=map_size), namespace="ns", entity="q", partition_id=0,
        partitioned=False, queues=SETTINGS, mark_dirty=lambda b: None,
    )
    broker.load()
    return broker


def _commit(broker: PartitionBroker) -> Exception | None:
    taken = broker.take_commit()
    if taken is None:
        return None
    batch, callbacks = taken
    error: Exception | None = None
    try:
        if batch:
            broker.store.commit(batch)
    except Exception as exc:  # the server's commit thread hands any store error back
        error = exc
    broker.commit_done(callbacks, error)
    return error


def _send(broker: PartitionBroker, i: int, now: int = 1_000) -> Exception | None:
    results: list[Exception | None] = []
    broker.enqueue([_msg(i)], [[Route(MAIN)]], now, results.append)
    _commit(broker)
    assert len(results) == 1
    return results[0]


def _drain(broker: PartitionBroker, now: int) -> list[str]:
    got = []
    while (taken := broker.take_next(MAIN, now, False)) is not None:  # receive-and-delete
        got.append(str(taken[0].message_id))
        assert _commit(broker) is None
    return got


def test_a_map_that_really_fills_grows_and_nothing_acknowledged_is_lost(tmp_path):
    broker = _open(str(tmp_path / "p0"), 1 << 20)  # no quota: only the 1 MiB map can fill
    first_map = broker.store.map_size
    acked, refused = [], []
    for i in range(200):
        error = _send(broker, i)
        if error is None:
            acked.append(f"m{i}")
        else:
            assert isinstance(error, ServerBusy), error  # retried by the SDKs
            assert "has grown" in str(error)
            refused.append(i)
            if len(refused) == 1:
                assert _send(broker, i) is None  # the retry fits in the grown map
                acked.append(f"m{i}")
    assert refused, "the map should have filled at least once"
    assert broker.store.map_size > first_map
    assert broker.healthy and broker.accepting
    assert sorted(_drain(broker, 2_000), key=lambda s: int(s[1:])) == acked
    broker.store.close()
    again = _open(str(tmp_path / "p0"), first_map)  # a restart keeps everything (and nothing)
    assert _drain(again, 3_000) == []
    again.store.close()


def test_a_failed_commit_ends_locks_and_forgets_uncommitted_changes(tmp_path):
    broker = _open(str(tmp_path / "p0"), 64 << 20)
    assert _send(broker, 1) is None and _send(broker, 2) is None
    lock = broker.take_next(MAIN, 1_500, True)
    assert lock is not None
    assert broker.store_failed(StoreFull("map full")).__class__ is ServerBusy  # grows, reloads
    assert broker.locks == {}  # the lock ended: settling it now fails with lock-lost
    assert sorted(_drain(broker, 2_000)) == ["m1", "m2"]  # delivered again, nothing lost
    broker.store.close()


def test_an_io_faulted_partition_reopens_its_store_by_itself_with_backoff(tmp_path):
    path = str(tmp_path / "p0")
    broker = _open(path, 64 << 20)
    assert _send(broker, 1) is None
    # The fault: the store's file is gone from under it (a yanked disk) and cannot be opened.
    data = os.path.join(path, "data.mdb")
    shutil.move(data, str(tmp_path / "saved.mdb"))
    os.mkdir(data)
    broker.store._env.close()  # the open environment dies with the disk
    error = _send(broker, 2)
    assert isinstance(error, ServerBusy) and not broker.healthy and broker.store_fault
    # While the fault lasts the router's timer calls recover(now): it waits, then retries
    # with a growing backoff and stays out of service.
    now = 10_000
    assert broker.recover(now) is False  # schedules the first attempt
    assert broker.fault_retry_at_ms == now + FAULT_RETRY_MS
    assert broker.recover(now + FAULT_RETRY_MS - 1) is False
    assert broker.recover(now + FAULT_RETRY_MS) is False  # attempt fails: still faulty
    assert broker.fault_retry_at_ms == now + 3 * FAULT_RETRY_MS  # waited 1 s, now 2 s
    assert not broker.healthy
    # The fault goes away: the next attempt reopens the store and the partition serves again.
    os.rmdir(data)
    shutil.move(str(tmp_path / "saved.mdb"), data)
    assert broker.recover(now + 3 * FAULT_RETRY_MS) is True
    assert broker.healthy and not broker.store_fault and broker.unhealthy_reason is None
    assert _send(broker, 3) is None
    assert sorted(_drain(broker, 20_000)) == ["m1", "m3"]  # m2 was refused, never stored
    broker.store.close()


def test_an_operator_offline_partition_is_not_brought_back_by_recovery(tmp_path):
    broker = _open(str(tmp_path / "p0"), 64 << 20)
    broker.store_failed(OSError("EIO"))
    broker.set_online(False)
    assert broker.recover(0) is False and broker.recover(10**9) is False
    broker.set_online(True)  # the operator's online reopens at once
    assert broker.healthy and not broker.store_fault
    assert _send(broker, 1) is None
    broker.store.close()
