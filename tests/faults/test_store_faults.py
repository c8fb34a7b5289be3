"""Store faults of one partition over real LMDB, committed the way the server does (take the
batch, commit it, hand the outcome back): a map that really fills grows by itself, an I/O
fault takes the partition out of service and it comes back by itself once the store opens
again. Nothing acknowledged is lost; whatever failed is answered with server-busy."""

from __future__ import annotations

import os
import shutil

from builders import incoming_message
from sbemu.errors import ServerBusy
from sbemu.partitions.broker import DLQ_SUFFIX, PartitionBroker
from sbemu.partitions.health import FAULT_RETRY_MS
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.store import PartitionStore, StoreFull
from sbemu.partitions.subqueue import SubQueueSettings
from sbemu.partitions.transitions import Route

MAIN = "main"
SETTINGS = {
    MAIN: SubQueueSettings(60_000, 10, None, False, MAIN + DLQ_SUFFIX),
    MAIN + DLQ_SUFFIX: SubQueueSettings(60_000, None, None, False, None),
}
BODY = b"\x00Sw\xa0\x00\x00\x40\x00" + b"x" * 16_384  # a 16 KiB binary body section


def _msg(i: int) -> IncomingMessage:
    return incoming_message(message_id=f"m{i}", tail=BODY, size=len(BODY))


def _open(path: str, map_size: int) -> PartitionBroker:
    broker = PartitionBroker(
        PartitionStore(path, map_size=map_size),
        namespace="ns",
        entity="q",
        partition_id=0,
        partitioned=False,
        queues=SETTINGS,
        mark_dirty=lambda b: None,
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
    assert broker.health.serving and broker.health.accepting
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
    assert (
        broker.loader.store_failed(StoreFull("map full")).__class__ is ServerBusy
    )  # grows, reloads
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
    assert isinstance(error, ServerBusy) and not broker.health.serving and broker.health.faulted
    # While the fault lasts the router's timer calls recover(now): it waits, then retries
    # with a growing backoff and stays out of service.
    now = 10_000
    assert broker.recover(now) is False  # schedules the first attempt
    assert broker.health.fault_retry_at_ms == now + FAULT_RETRY_MS
    assert broker.recover(now + FAULT_RETRY_MS - 1) is False
    assert broker.recover(now + FAULT_RETRY_MS) is False  # attempt fails: still faulty
    assert broker.health.fault_retry_at_ms == now + 3 * FAULT_RETRY_MS  # waited 1 s, now 2 s
    assert not broker.health.serving
    # The fault goes away: the next attempt reopens the store and the partition serves again.
    os.rmdir(data)
    shutil.move(str(tmp_path / "saved.mdb"), data)
    assert broker.recover(now + 3 * FAULT_RETRY_MS) is True
    assert broker.health.serving and not broker.health.faulted and broker.health.reason is None
    assert _send(broker, 3) is None
    assert sorted(_drain(broker, 20_000)) == ["m1", "m3"]  # m2 was refused, never stored
    broker.store.close()


def test_an_operator_offline_partition_is_not_brought_back_by_recovery(tmp_path):
    broker = _open(str(tmp_path / "p0"), 64 << 20)
    broker.loader.store_failed(OSError("EIO"))
    broker.set_online(False)
    assert broker.recover(0) is False and broker.recover(10**9) is False
    broker.set_online(True)  # the operator's online reopens at once
    assert broker.health.serving and not broker.health.faulted
    assert _send(broker, 1) is None
    broker.store.close()


def test_recovery_does_not_open_a_new_store_where_the_disk_is_not_mounted(tmp_path):
    """Recovery during a repair: the faulty disk was unmounted (the empty mount point shows)
    and is not mounted again yet. Regression: reopen() created a new, empty store in the mount
    point and the partition came back without its messages (and wrote new ones beside the
    disk, hidden once it was mounted again); now it waits until the store is there."""
    path = str(tmp_path / "p0")
    broker = _open(path, 64 << 20)
    assert _send(broker, 1) is None
    broker.store._env.close()  # the disk fails under the open environment
    assert isinstance(_send(broker, 2), ServerBusy) and broker.health.faulted
    os.rename(path, str(tmp_path / "disk"))  # unmounted for e2fsck ...
    os.mkdir(path)  # ... leaving the empty mount point
    now = 10_000
    assert broker.recover(now) is False
    assert broker.recover(now + FAULT_RETRY_MS) is False  # no store there: still out
    assert os.listdir(path) == [], os.listdir(path)  # and nothing was created in its place
    assert "is its disk mounted?" in (broker.health.reason or ""), broker.health.reason
    os.rmdir(path)
    os.rename(str(tmp_path / "disk"), path)  # mounted again
    assert broker.recover(now + 3 * FAULT_RETRY_MS) is True
    assert _send(broker, 3) is None
    assert sorted(_drain(broker, 20_000)) == ["m1", "m3"]
    broker.store.close()


def test_a_reopened_store_that_keeps_failing_is_retried_less_and_less_often(tmp_path):
    """A store that opens again but fails its next commit (a full disk) backs off as a store
    that cannot be opened does (not a reopen every second for good); a commit that lands
    resets the wait."""
    broker = _open(str(tmp_path / "p0"), 64 << 20)
    now = 10_000
    broker.loader.store_failed(OSError("EIO"))
    assert broker.recover(now) is False
    assert broker.recover(now + FAULT_RETRY_MS) is True  # it opens ...
    broker.loader.store_failed(OSError("EIO"))  # ... and its next commit fails again
    now += FAULT_RETRY_MS
    assert broker.recover(now) is False
    assert broker.health.fault_retry_at_ms == now + 2 * FAULT_RETRY_MS  # twice as long this time
    assert broker.recover(now + 2 * FAULT_RETRY_MS) is True
    assert _send(broker, 1) is None  # a commit lands: the next fault starts from 1 s again
    broker.loader.store_failed(OSError("EIO"))
    now += 2 * FAULT_RETRY_MS
    assert broker.recover(now) is False and broker.health.fault_retry_at_ms == now + FAULT_RETRY_MS
    broker.store.close()


def test_the_pages_a_drained_store_freed_count_as_room(tmp_path):
    """LMDB's file never shrinks: room on a disk that is low is its free space plus the pages
    LMDB freed in the file (reused before it grows), so a drained partition takes messages
    again although the disk's free space did not change."""
    broker = _open(str(tmp_path / "p0"), 64 << 20)
    for i in range(40):
        assert _send(broker, i) is None
    before = broker.store._free_pages_bytes()
    assert before < 64 << 10, before
    assert len(_drain(broker, 2_000)) == 40
    freed = broker.store._free_pages_bytes()
    assert freed >= 40 * len(BODY), (freed, 40 * len(BODY))
    broker.store.close()
