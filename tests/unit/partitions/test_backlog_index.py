"""The partition keeps an index, not messages [issue 10]: real LMDB in a temp dir, fake clock.

Restart reads counters, not the backlog; records are read from the store when delivered, peeked
or received by sequence number; timers (TTL, scheduled) live in the store's deadlines database.
"""

import os

import msgspec
import pytest
from broker_harness import DLQ, MAIN, Harness, msg, open_broker

from builders import message_record
from sbemu.partitions import COMPLETE, Outcome
from sbemu.partitions import deadlines as deadlines_module
from sbemu.partitions import locks as locks_module
from sbemu.partitions import reader as reader_module
from sbemu.partitions import subqueue as subqueue_module
from sbemu.partitions.migrate import LAYOUT
from sbemu.partitions.records import MessageState, encode_message
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.subqueue import SubQueueSettings
from sbemu.partitions.transitions import Route
from sbemu.partitions.writebatch import WriteBatch


class Counting:
    """Counts the store's record reads (the real store underneath)."""

    def __init__(self, store):
        self.store = store
        self.reads = 0
        for name in ("scan", "read_ahead", "get"):
            real = getattr(store, name)

            def wrapped(*args, _real=real, **kw):
                self.reads += 1
                return _real(*args, **kw)

            setattr(store, name, wrapped)


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path / "p0")


def test_restart_reads_counters_not_the_backlog(h):
    h.send(*[msg(i) for i in range(500)])
    h.store.close()
    h.store = PartitionStore(str(h.path), map_size=64 << 20)
    reads = Counting(h.store)
    h.broker = open_broker(h.path, store=h.store)
    # nothing of the backlog was read: one look at its head (when the oldest message expires:
    # default-TTL messages store no timer), LOAD_HEAD_SCAN records at most
    assert reads.reads == 1
    sq = h.broker.queues[MAIN]
    assert not sq.buffer and not sq.back and not sq.locks
    assert h.broker.counts(MAIN) == {"active": 500, "deferred": 0, "scheduled": 0}
    got = [h.broker.take_next(MAIN, 1000, False)[0].sequence_number for _ in range(500)]
    assert got == list(range(1, 501))
    assert h.broker.take_next(MAIN, 1000, False) is None
    assert reads.reads <= 500 // subqueue_module.READ_AHEAD + 3  # read ahead, not one by one
    h.commit()
    assert h.broker.counts(MAIN)["active"] == 0


def test_counts_by_state_survive_restart(h):
    h.send(msg(1), msg(2), msg(3, scheduled_enqueue_time_ms=50_000))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    h.broker.settle(lock.key, Outcome.defer(None), 1000, lambda e: None)
    h.commit()
    assert h.broker.counts(MAIN) == {"active": 1, "deferred": 1, "scheduled": 1}
    h.reopen()
    assert h.broker.counts(MAIN) == {"active": 1, "deferred": 1, "scheduled": 1}
    rec, lock = h.broker.take_deferred(MAIN, 1, 1000, True)
    h.broker.settle(lock.key, COMPLETE, 1000, lambda e: None)
    h.commit()
    h.reopen()
    assert h.broker.counts(MAIN) == {"active": 1, "deferred": 0, "scheduled": 1}


def test_expired_messages_of_a_cold_backlog_are_never_delivered(h):
    h.send(*[msg(i, ttl=1_000) for i in range(10)], now=1000)
    h.send(msg(99), now=1000)  # default TTL (60 s): still live at 2 500
    h.reopen()
    # The first receive after the restart, before any timer ran: expired ones are skipped.
    rec, _lock = h.broker.take_next(MAIN, 2500, True)
    assert rec.message_id == "m99"
    h.commit()
    assert [r.dead_letter_reason for r in h.broker.peek(DLQ, 0, 20)] == ["TTLExpiredException"] * 10


def test_ttl_timers_fire_from_disk_after_restart_in_steps(h, monkeypatch):
    monkeypatch.setattr(deadlines_module, "DEADLINES_PER_TICK", 4)
    h.send(*[msg(i, ttl=1_000 + i) for i in range(10)], now=1000)
    h.reopen()
    assert h.broker.next_deadline() == 2000  # the earliest timer, read from the store
    h.broker.on_timer(5000)
    h.commit()
    assert h.broker.counts(MAIN)["active"] == 6  # four per tick
    assert h.broker.next_deadline() <= 5000
    h.broker.on_timer(5000)
    h.broker.on_timer(5000)
    h.commit()
    assert h.broker.counts(MAIN)["active"] == 0
    assert h.broker.counts(DLQ)["active"] == 10
    assert h.broker.next_deadline() is None
    ids = sorted(r.message_id for r in h.broker.peek(DLQ, 0, 20))
    assert ids == sorted(f"m{i}" for i in range(10))


def test_scheduled_message_fires_after_restart(h):
    h.send(msg(1, scheduled_enqueue_time_ms=7000), now=1000)
    h.reopen()
    assert h.broker.next_deadline() == 7000
    assert h.broker.take_next(MAIN, 6999, True) is None
    h.broker.on_timer(7000)
    rec, _lock = h.broker.take_next(MAIN, 7000, True)
    assert (rec.sequence_number, rec.state, rec.scheduled_enqueue_time_ms) == (2, 0, 7000)
    h.commit()
    h.reopen()
    assert [(r.sequence_number, r.state) for r in h.broker.peek(MAIN, 0, 5)] == [(2, 0)]
    assert h.broker.next_deadline() == 7000 + 60_000  # its TTL timer


def test_completed_and_cancelled_messages_leave_no_timers(h):
    h.send(msg(1), msg(2, scheduled_enqueue_time_ms=9000))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    h.broker.settle(lock.key, COMPLETE, 1000, lambda e: None)
    assert h.broker.cancel_scheduled(MAIN, 2, 1000)
    h.commit()
    h.reopen()
    assert h.broker.next_deadline() is None
    assert h.broker.peek(MAIN, 0, 10) == []


def test_uncommitted_changes_are_seen_before_the_store(h):
    h.send(msg(1), msg(2))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    h.broker.settle(lock.key, Outcome.abandon({"k": b"\xa1\x01v"}), 1000, lambda e: None)
    # Not committed yet: peek and the next delivery see the abandoned copy.
    first = h.broker.peek(MAIN, 0, 10)[0]
    assert (first.delivery_count, first.property_overrides) == (1, {"k": b"\xa1\x01v"})
    rec, lock = h.broker.take_next(MAIN, 1000, True)
    assert (rec.sequence_number, rec.delivery_count) == (1, 1)
    h.broker.settle(lock.key, COMPLETE, 1000, lambda e: None)
    assert [r.sequence_number for r in h.broker.peek(MAIN, 0, 10)] == [2]
    h.commit()
    assert [r.sequence_number for r in h.broker.peek(MAIN, 0, 10)] == [2]
    assert not h.broker.staging.overlay  # committed: the store is the truth again


def test_dead_lettered_behind_the_scan_is_delivered_from_the_dlq(h):
    h.send(*[msg(i) for i in range(5)])
    taken = [h.broker.take_next(MAIN, 1000, True) for _ in range(5)]
    # The DLQ reader scans ahead first (sees nothing), then old messages are dead-lettered.
    assert h.broker.take_next(DLQ, 1000, True) is None
    for _rec, lock in reversed(taken):
        h.broker.settle(lock.key, Outcome.dead_letter("r", None, None), 1000, lambda e: None)
    got = [h.broker.take_next(DLQ, 1000, False)[0].sequence_number for _ in range(5)]
    assert got == [1, 2, 3, 4, 5]
    assert h.broker.take_next(DLQ, 1000, False) is None
    h.commit()
    h.reopen()
    assert h.broker.peek(DLQ, 0, 10) == [] and h.broker.counts(DLQ)["active"] == 0


def test_new_messages_arrive_behind_a_drained_scan(h):
    h.send(msg(1))
    assert h.broker.take_next(MAIN, 1000, False)[0].sequence_number == 1
    assert h.broker.take_next(MAIN, 1000, False) is None
    assert not h.broker.has_ready(MAIN)
    h.send(msg(2))
    assert h.broker.has_ready(MAIN)
    assert h.broker.take_next(MAIN, 1000, False)[0].sequence_number == 2


def test_store_written_before_the_index_layout_is_migrated_once(tmp_path):
    path = tmp_path / "old"
    store = PartitionStore(str(path), map_size=16 << 20)
    batch = WriteBatch()

    for seq, state, expires, sched in (
        (1, 0, 61_000, None),
        (2, 1, None, None),
        (3, 2, None, 9000),
    ):
        rec = message_record(
            sequence_number=seq,
            enqueued_time_ms=1000,
            state=MessageState(state),
            message_id=f"m{seq}",
            expires_at_ms=expires,
            tail=b"\x00Sw\xa1\x02hi",
            size=10,
            scheduled_enqueue_time_ms=sched,
        )
        batch.put(MAIN, seq, encode_message(rec))
    batch.meta["next_sequence"] = 4
    store.commit(batch)  # the old layout: records and next_sequence only
    store.close()
    h = Harness(path)
    assert h.broker.counts(MAIN) == {"active": 1, "deferred": 1, "scheduled": 1}
    assert h.broker.next_deadline() == 9000
    assert h.store.load_meta()["layout"] == LAYOUT
    h.broker.on_timer(61_000)
    h.commit()
    assert h.broker.counts(MAIN) == {"active": 1, "deferred": 1, "scheduled": 0}
    assert h.broker.counts(DLQ)["active"] == 1  # m1 expired; m3 was activated as seq 4
    assert [r.sequence_number for r in h.broker.peek(MAIN, 0, 10)] == [2, 4]


SESSION_SETTINGS = {
    MAIN: SubQueueSettings(5_000, 3, 60_000, True, DLQ, requires_session=True),
    DLQ: SubQueueSettings(5_000, None, None, False, None),
}


def smsg(i, session_id):
    return msgspec.structs.replace(msg(i), session_id=session_id)


class SessionHarness(Harness):
    def __init__(self, path):
        super().__init__(path, queues=SESSION_SETTINGS)


def test_session_lines_are_rebuilt_on_restart(tmp_path):
    h = SessionHarness(tmp_path / "s")
    h.send(smsg(1, "b"), smsg(2, "a"), smsg(3, "b"))
    h.reopen()
    assert h.broker.session_ids(MAIN) == ["a", "b"]
    lock = h.broker.accept_session(MAIN, None, "owner", 1000)
    assert lock.session_id == "b"  # its next message (1) is the oldest
    got = []
    while (taken := h.broker.take_next(MAIN, 1000, False, lock)) is not None:
        got.append(taken[0].sequence_number)
    assert got == [1, 3]
    h.commit()
    h.reopen()
    assert h.broker.session_ids(MAIN) == ["a"]
    assert h.broker.take_next(MAIN, 1000, True) is None  # session receivers only


def _rss_file_kb():
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_release_resident_unmaps_touched_store_pages(tmp_path):
    store = PartitionStore(str(tmp_path / "r"), map_size=256 << 20, durable=False)
    body = b"x" * 4000
    for base in range(0, 8000, 2000):
        batch = WriteBatch()
        for seq in range(base, base + 2000):
            batch.put(MAIN, seq, body)
        store.commit(batch)
    before = _rss_file_kb()
    assert len(store.scan(MAIN, 0, 10_000, bytes)) == 8000  # touches ~32 MB of the map
    touched = _rss_file_kb()
    store.release_resident()
    released = _rss_file_kb()
    assert touched - before > 16_000 and released - before < 4_000, (before, touched, released)
    assert store.get(MAIN, 7999, bytes) == body  # the pages fault back in when read again
    store.close()


def test_new_records_fill_store_pages_in_sequence_order(tmp_path):
    # MDB_APPEND: three 1.1 KB records per 4 KB leaf page, not the two a mid-page split leaves
    store = PartitionStore(str(tmp_path / "a"), map_size=64 << 20, durable=False)
    record = b"r" * 1100
    for base in range(1, 3001, 100):
        batch = WriteBatch()
        for seq in range(base, base + 100):
            batch.put(MAIN, seq, record)
        store.commit(batch)
    assert store.pages(MAIN) <= 3000 // 3 + 10
    batch = WriteBatch()
    batch.put(MAIN, 1500, b"updated")  # below the last key: an ordinary put, not an append
    batch.put(MAIN, 3001, record)
    store.commit(batch)
    assert store.get(MAIN, 1500, bytes) == b"updated"
    assert [seq for seq, _ in store.scan(MAIN, 1499, 3, bytes)] == [1499, 1500, 1501]
    assert store.entries(MAIN) == 3001
    store.close()


def test_settled_locks_leave_no_lock_timers_behind(h, monkeypatch):
    monkeypatch.setattr(locks_module, "LOCK_HEAP_SLACK", 256)
    n = 3 * locks_module.LOCK_HEAP_SLACK
    h.send(*[msg(i) for i in range(n)])
    for _ in range(n - 1):  # a drain: every lock settled long before it would expire
        _rec, lock = h.broker.take_next(MAIN, 1000, True)
        h.broker.settle(lock.key, COMPLETE, 1000, lambda e: None)
    h.commit()
    assert len(h.broker.lock_table.heap) <= locks_module.LOCK_HEAP_SLACK + 1
    rec, lock = h.broker.take_next(MAIN, 1000, True)  # the last one: renewed, then it expires
    for now in range(1001, 1001 + n):
        h.broker.renew(lock.key, now)
    assert len(h.broker.lock_table.heap) <= locks_module.LOCK_HEAP_SLACK + 1
    h.broker.on_timer(1001 + n + 5_000)
    assert h.broker.lock_of(lock.key) is None
    again, _ = h.broker.take_next(MAIN, 1001 + n + 5_000, True)
    assert again.sequence_number == rec.sequence_number and again.delivery_count == 1


@pytest.fixture
def small_scan(monkeypatch):
    monkeypatch.setattr(reader_module, "SESSION_SCAN_CHUNK", 8)


def test_restart_reads_no_session_backlog_and_keeps_fifo_per_session(tmp_path, small_scan):
    h = SessionHarness(tmp_path / "s")
    h.send(*[smsg(i, "abc"[i % 3]) for i in range(60)])  # seqs 1..60: a 1,4,..; b 2,5,..
    h.store.close()
    h.store = PartitionStore(str(h.path), map_size=64 << 20)
    reads = Counting(h.store)
    h.broker = open_broker(h.path, SESSION_SETTINGS, store=h.store)
    assert reads.reads <= 1  # start-up reads no record but a look at the head (TTL expiry)
    assert h.broker.next_deadline() == 0  # the scan runs from the first timer tick on
    h.send(smsg(100, "b"))  # seq 61, sent while the scan has not started
    lock = h.broker.accept_session(MAIN, None, "owner", 1000)
    assert lock.session_id == "a"  # the oldest message (seq 1) is a's
    h.broker.release_session(lock, 1000)
    lock = h.broker.accept_session(MAIN, "b", "owner", 1000)
    got = []
    sq = h.broker.queues[MAIN]
    while (taken := h.broker.take_next(MAIN, 1000, False, lock)) is not None or sq.session_scan:
        if taken is None:
            h.broker.on_timer(1000)  # the scan goes on at the next tick
        else:
            got.append(taken[0].sequence_number)
    assert got == list(range(2, 61, 3)) + [61]  # the old ones first, then the new one
    h.commit()
    assert h.broker.session_ids(MAIN) == ["a", "c"]  # listing finishes the scan
    assert h.broker.queues[MAIN].session_scan is None
    assert h.broker.next_deadline() != 0


def test_timer_ticks_finish_the_session_scan(tmp_path, small_scan):
    h = SessionHarness(tmp_path / "s")
    h.send(*[smsg(i, f"s{i % 5}") for i in range(50)])
    h.reopen()
    sq = h.broker.queues[MAIN]
    ticks = 0
    while sq.session_scan is not None:
        h.broker.on_timer(1000)
        ticks += 1
    assert ticks == 50 // 8 + 1  # a chunk per tick
    assert {sid: len(s.ready_set) for sid, s in sq.sessions.items()} == {
        f"s{k}": 10 for k in range(5)
    }
    assert h.broker.session_ids(MAIN) == [f"s{k}" for k in range(5)]


def test_messages_settled_before_the_scan_reaches_them_are_counted_once(tmp_path, small_scan):
    h = SessionHarness(tmp_path / "s")
    h.send(*[smsg(i, "a" if i < 40 else "z") for i in range(48)])  # z: seqs 41..48
    h.reopen()
    h.broker.on_timer(1000 + 60_001)  # every message expires, the scan not through yet
    h.commit()
    h.reopen()
    assert h.broker.session_ids(MAIN) == []
    assert h.broker.accept_session(MAIN, None, "owner", 1000) is None
    h.send(smsg(1, "z"))
    h.broker.on_timer(1000)
    h.reopen()
    h.broker.on_timer(1000 + 60_001 * 2)
    assert h.broker.session_ids(MAIN) == []


# ------------------------------------------------------------------ derived TTL expiry
def test_default_ttl_messages_store_no_timer_and_expire_oldest_first(h):
    h.send(*[msg(i) for i in range(5)], now=1000)  # the default TTL (60 s): no timers stored
    h.send(msg(5, ttl=10_000), now=2000)  # a TTL of its own: a timer
    h.send(*[msg(i) for i in range(6, 9)], now=3000)
    assert h.store.first_deadline(b"") == 12_000  # only the message with its own TTL
    assert h.broker.next_deadline() == 12_000
    h.broker.on_timer(12_000)
    h.commit()
    assert h.broker.next_deadline() == 61_000  # the oldest default-TTL message
    h.broker.on_timer(61_000)
    h.commit()
    assert h.broker.counts(MAIN)["active"] == 3
    assert h.broker.next_deadline() == 63_000
    h.broker.on_timer(70_000)
    h.commit()
    assert h.broker.counts(MAIN)["active"] == 0 and h.broker.next_deadline() is None
    reasons = [r.dead_letter_reason for r in h.broker.peek(DLQ, 0, 20)]
    assert reasons == ["TTLExpiredException"] * 9
    assert h.store.first_deadline(b"") is None


def test_derived_expiry_passes_locked_and_deferred_messages_and_survives_restart(h):
    h.send(*[msg(i) for i in range(4)], now=1000)
    h.send(msg(9), now=30_000)
    _rec, _lock = h.broker.take_next(MAIN, 57_000, True)  # m0 locked until 62 000
    _rec, lock1 = h.broker.take_next(MAIN, 57_000, True)
    h.broker.settle(lock1.key, Outcome.defer(None), 57_000, lambda e: None)  # m1 deferred
    h.commit()
    h.broker.on_timer(61_000)
    h.commit()
    # m2, m3 expired; m0 is locked (its expiry waits for it to come back), m1 deferred
    assert sorted(r.message_id for r in h.broker.peek(DLQ, 0, 20)) == ["m2", "m3"]
    assert h.broker.next_deadline() <= 90_000
    h.reopen()  # no timer on disk: the due time is found again from the oldest message
    assert h.broker.next_deadline() == 61_000  # m0, no longer locked after the restart
    h.broker.on_timer(61_000)
    h.commit()
    assert sorted(r.message_id for r in h.broker.peek(DLQ, 0, 20)) == ["m0", "m2", "m3"]
    assert h.broker.next_deadline() == 90_000
    h.broker.on_timer(90_000)
    h.commit()
    assert [r.message_id for r in h.broker.peek(MAIN, 0, 20)] == ["m1"]  # deferred stays
    assert h.broker.next_deadline() is None


def test_uncommitted_default_ttl_messages_keep_their_expiry(h):
    h.send(msg(1), now=1000)
    h.broker.enqueue([msg(2)], [[Route(MAIN)]], 2000, lambda e: None)
    h.broker.on_timer(61_000)  # m1 expires; m2 is not stored yet but is remembered
    assert h.broker.next_deadline() == 62_000
    h.commit()
    h.broker.on_timer(62_000)
    h.commit()
    assert sorted(r.message_id for r in h.broker.peek(DLQ, 0, 20)) == ["m1", "m2"]


def test_runs_of_deletes_remove_exactly_their_keys(tmp_path):
    """_write_ops deletes a run of one sub-queue with a cursor (neighbours without a search):
    the same records go as with a delete per key, wherever the keys are, absent ones ignored,
    in order with the puts around them."""
    store = PartitionStore(str(tmp_path / "p"), map_size=64 << 20, durable=False)
    batch = WriteBatch()
    for seq in range(1, 301):
        batch.put(MAIN, seq, b"m%d" % seq)
        batch.put(DLQ, seq, b"d%d" % seq)
    store.commit(batch)
    batch = WriteBatch()
    gone = [*range(10, 60), *range(100, 103), 150, 151, 299, 300, 301, 5, 5]  # 301: absent
    for seq in gone:
        batch.delete(MAIN, seq)
    batch.delete(DLQ, 7)
    batch.put(MAIN, 150, b"again")  # after its delete: stored again
    batch.delete(MAIN, 200)
    store.commit(batch)
    kept = [seq for seq, _ in store.scan(MAIN, 0, 1000, bytes)]
    assert kept == sorted({*range(1, 301)} - set(gone) - {200} | {150})
    assert store.get(MAIN, 150, bytes) == b"again"
    for start, limit in ((0, 1000), (0, 3), (57, 10), (299, 5), (400, 5)):  # and keyless reads
        rows = store.scan(MAIN, start, limit, bytes)
        values = [value for _seq, value in rows]
        assert store.read_ahead(MAIN, start, limit, bytes, bytes) == (values, False)

        def refuse(value):  # a value the read-ahead's decode does not take ends the read
            raise StopIteration

        if values:  # decoded alone (True: more follow)
            more = start < max(kept)
            assert store.read_ahead(MAIN, start, limit, refuse, bytes) == (values[:1], more)
    assert [seq for seq, _ in store.scan(DLQ, 0, 1000, bytes)] == [
        s for s in range(1, 301) if s != 7
    ]
    store.close()
