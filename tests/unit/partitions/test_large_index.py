"""The store's index of large records (largeindex.py): a read on the loop learns that a record
is large from the index, without reading its value, and the index follows the records through
deletes and restarts. Real LMDB; "large" is made 2 KB here (the records stay small enough that
the read-ahead would decode them whole if the index did not stop it)."""

from __future__ import annotations

import msgspec
import pytest
from test_backlog_index import SessionHarness, smsg
from test_store_broker import DLQ, MAIN, Harness, msg

from sbemu.partitions import COMPLETE, largeread, records, writebatch
from sbemu.partitions.records import decode_message
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.writebatch import LargeRecord, WriteBatch

LARGE = 2048


@pytest.fixture
def big(monkeypatch) -> bytes:
    """An amqp-value body whose record is large (staged as a LargeRecord and noted)."""
    monkeypatch.setattr(records, "LARGE_TAIL", LARGE // 2)
    monkeypatch.setattr(writebatch, "LARGE_RECORD", LARGE)
    return b"\x00Sw\xb0" + LARGE.to_bytes(4, "big") + b"x" * LARGE


def _no_value_read(monkeypatch) -> list[object]:
    """The values the read-ahead hands to largeread.ahead (a large record it read to find it
    large): none when the index answered."""
    seen: list[object] = []
    real = largeread.ahead

    def ahead(value):
        seen.append(value)
        return real(value)

    monkeypatch.setattr(largeread, "ahead", ahead)
    return seen


def test_the_read_ahead_stops_at_a_noted_record_without_reading_it(tmp_path, big, monkeypatch):
    h = Harness(tmp_path / "p")
    seen = _no_value_read(monkeypatch)
    h.send(msg(0), msg(1, tail=big, size=len(big)), msg(2))
    assert [r.message_id for r, _ in h.broker.take_batch(MAIN, 2000, 10)] == ["m0"]
    assert h.broker.take_batch(MAIN, 2000, 10) == []  # m1 is being read, m2 waits behind it
    h.commit()  # reads m1
    taken = h.broker.take_batch(MAIN, 2000, 10)
    assert [r.message_id for r, _ in taken] == ["m1", "m2"] and taken[0][0].tail == big
    assert seen == []


def test_notes_survive_a_restart_and_go_with_their_records(tmp_path, big):
    h = Harness(tmp_path / "p")
    [seq] = h.send(msg(0, tail=big, size=len(big)))
    assert h.store._large.of(MAIN) == {seq: None}
    h.reopen()
    assert h.store._large.of(MAIN) == {seq: None}
    assert h.broker.take_batch(MAIN, 2000, 10) == []
    h.commit()
    [(rec, lock)] = h.broker.take_batch(MAIN, 2000, 10)
    assert rec.tail == big
    h.broker.settle(lock.key, COMPLETE, 2000, lambda e: None)
    h.commit()
    assert h.store._large.of(MAIN) is None
    h.reopen()
    assert h.store._large.of(MAIN) is None


def test_a_get_or_a_peek_answers_a_noted_record_with_its_session(tmp_path, big):
    h = SessionHarness(tmp_path / "s")
    large = msgspec.structs.replace(smsg(1, "a"), tail=big, size=len(big))
    seqs = h.send(smsg(0, "a"), large, smsg(2, "b"))
    h.reopen()
    got = h.store.get(MAIN, seqs[1], decode_message, largeread.Ahead)
    assert type(got) is largeread.Ahead
    assert (got.sequence_number, got.session_id) == (seqs[1], "a")
    assert h.store.get(MAIN, seqs[0], decode_message, largeread.Ahead).message_id == "m0"
    rows = h.store.scan(MAIN, 0, 10, decode_message, largeread.Ahead)
    assert [seq for seq, _ in rows] == seqs
    assert [type(r).__name__ for _, r in rows] == ["MessageRecord", "Ahead", "MessageRecord"]
    # without ahead_of, a read reads the record as before
    assert h.store.get(MAIN, seqs[1], decode_message).tail == big
    peeked = h.broker.reader.peek(h.broker.queues[MAIN], 0, 3, None, large_later=True)
    assert type(peeked[1]) is largeread.Ahead and peeked[2].message_id == "m2"


def test_a_record_put_and_deleted_in_one_commit_leaves_no_note(tmp_path, monkeypatch):
    monkeypatch.setattr(writebatch, "LARGE_RECORD", LARGE)
    store = PartitionStore(str(tmp_path / "p"), map_size=1 << 26)
    store.ensure_queues([MAIN])
    value = b"v" * 100  # (the store does not read what it writes)
    batch = WriteBatch()
    batch.put(MAIN, 5, LargeRecord((value, b"y" * LARGE), "s1"))
    batch.put(MAIN, 6, LargeRecord((value, b"y" * LARGE), None))
    batch.put(MAIN, 7, LargeRecord((value,), None))  # under LARGE: not noted
    batch.delete(MAIN, 6)
    store.commit(batch)
    assert store._large.of(MAIN) == {5: "s1"}
    store.close()
    again = PartitionStore(str(tmp_path / "p"), map_size=1 << 26)
    assert again._large.of(MAIN) == {5: "s1"}
    again.close()


def test_a_large_message_s_timer_fires_once_the_next_commit_read_it(tmp_path, big):
    """A due timer (TTL expiry here) of a large record only the store has: the record is read
    by the next commit, off the loop, then the timer fires for it as it is."""
    from sbemu.partitions.records import decode_log

    h = Harness(tmp_path / "p")
    h.send(msg(0, ttl=500), msg(1, ttl=500, tail=big, size=len(big)))
    h.reopen()  # (nothing of them in memory)
    h.broker.on_timer(1600)
    assert h.broker.counts(MAIN)["active"] == 1  # m0 expired; m1 is being read
    h.commit()  # reads m1; its expiry is staged
    assert h.broker.counts(MAIN)["active"] == 0
    h.commit()
    events = [
        (decode_log(v)["event"], decode_log(v)["message_id"]) for _, v in h.store.read_log(0, 100)
    ]
    assert events[2:] == [
        ("deadlettered", "m0"),
        ("deadlettered", "m1"),
    ]  # (dead-lettered on expiry)
    h.reopen()
    assert h.broker.peek(MAIN, 0, 10) == [] and h.store._large.of(MAIN) is None
    moved = h.broker.peek(DLQ, 0, 10)
    assert [r.message_id for r in moved] == ["m0", "m1"] and moved[1].tail == big
    assert list(h.store._large.of(DLQ).values()) == [None]  # noted where it went


def test_a_stepped_purge_has_a_large_message_read_off_the_loop(tmp_path, big):
    from sbemu.partitions.purging import PurgeJob
    from sbemu.partitions.records import decode_log

    h = Harness(tmp_path / "p")
    h.send(msg(0), msg(1, tail=big, size=len(big)), msg(2))
    h.reopen()

    class One:  # an entity of this one partition, as PurgeJob sees it
        name = "q"
        partitions = [h.broker]

    job = PurgeJob([One()])  # type: ignore[list-item]
    assert not job.step(2000) and job.waiting  # m0 purged; m1 asked of the next commit
    assert job.counts == {"q": 1}
    assert not job.step(2000) and job.counts == {"q": 1}  # still being read: asked once
    h.commit()  # reads m1
    assert not job.waiting
    while not job.step(2000):
        pass
    assert job.counts == {"q": 3}
    h.commit()
    purged = [decode_log(v)["message_id"] for _, v in h.store.read_log(0, 100)][3:]
    assert purged == ["m0", "m1", "m2"] and h.store._large.of(MAIN) is None
