"""Store (real LMDB in a temp dir) and partition broker semantics, with a fake clock."""

import uuid

import pytest
from broker_harness import DLQ, MAIN, Harness, message_record, msg

from sbemu.errors import MessageLockLost, MessageNotFound
from sbemu.partitions import COMPLETE, Outcome
from sbemu.partitions.records import (
    LogEvent,
    MessageRecord,
    MessageState,
    decode_log,
    decode_message,
    encode_log,
    encode_message,
)
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.tokens import make_lock_key, partition_of_token, token_of
from sbemu.partitions.transitions import Route
from sbemu.partitions.writebatch import WriteBatch


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path / "p0")


def test_store_roundtrip_and_log(tmp_path):
    store = PartitionStore(str(tmp_path / "s"), map_size=16 << 20)
    b = WriteBatch()
    b.put("main", 2, b"two")
    b.put("main", 1, b"one")
    b.delete("main", 2)
    b.meta["next_sequence"] = 3
    b.log.append((0, b"L0"))
    store.commit(b)
    state = store.load()
    assert state.queues["main"] == [b"one"]
    assert state.meta["next_sequence"] == 3
    assert store.read_log(0, 10) == [(0, b"L0")]
    store.close()


def test_message_record_roundtrip():
    rec = message_record(
        sequence_number=7,
        enqueued_time_ms=123,
        state=MessageState.DEFERRED,
        delivery_count=2,
        message_id="id",
        session_id="s",
        partition_key="p",
        ttl_ms=1000,
        expires_at_ms=1123,
        priority=4,
        annotation_count=1,
        annotations=b"ann",
        tail=b"tail",
        size=99,
        scheduled_enqueue_time_ms=None,
        dead_letter_reason="r",
        dead_letter_description="d",
        dead_letter_source=None,
        property_overrides={"k": b"\xa1\x01v"},
        original_sequence_number=None,
    )
    assert decode_message(encode_message(rec)) == rec


def test_sequence_numbers_start_at_one_and_survive_restart(h):
    assert h.send(msg(1), msg(2), msg(3)) == [1, 2, 3]
    h.reopen()
    assert h.send(msg(4)) == [4]


def test_partition_id_in_top_16_bits(tmp_path):
    h = Harness(tmp_path / "p5", partition_id=5, partitioned=True)
    assert h.send(msg(1)) == [(5 << 48) | 1]


def test_not_visible_before_commit(h):
    h.broker.enqueue([msg(1)], [[Route(MAIN)]], 1000, lambda e: None)
    assert h.broker.take_next(MAIN, 1000, True) is None
    assert h.broker.peek(MAIN, 0, 10) == []
    h.commit()
    assert h.broker.peek(MAIN, 0, 10)[0].message_id == "m1"


def test_peek_lock_complete(h):
    h.send(msg(1), msg(2))
    rec, lock = h.broker.take_next(MAIN, 1000, True)
    assert rec.sequence_number == 1 and lock.until_ms == 6000
    done = []
    h.broker.settle(lock.key, COMPLETE, 2000, done.append)
    assert done == []
    h.commit()
    assert done == [None]
    h.reopen()
    assert [r.sequence_number for r in h.broker.peek(MAIN, 0, 10)] == [2]


def test_complete_after_lock_expiry_is_lock_lost(h):
    h.send(msg(1))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    with pytest.raises(MessageLockLost):
        h.broker.settle(lock.key, COMPLETE, 6000, lambda e: None)
    with pytest.raises(MessageLockLost):
        h.broker.settle(uuid.uuid4().int, COMPLETE, 1000, lambda e: None)


def test_lock_expiry_redelivers_with_count_and_renew_extends(h):
    h.send(msg(1))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    assert h.broker.renew(lock.key, 4000) == 9000
    h.broker.on_timer(6000)
    assert h.broker.take_next(MAIN, 6000, True) is None  # renewed: still locked
    h.broker.on_timer(9000)
    rec, _lock = h.broker.take_next(MAIN, 9000, True)
    assert rec.delivery_count == 1


def test_abandon_counts_and_dead_letters_at_max_delivery_count(h):
    h.send(msg(1))
    for attempt in range(3):
        rec, lock = h.broker.take_next(MAIN, 1000, True)
        assert rec.delivery_count == attempt
        h.broker.settle(lock.key, Outcome.abandon(None), 1000, lambda e: None)
    h.commit()
    assert h.broker.take_next(MAIN, 1000, True) is None
    rec, lock = h.broker.take_next(DLQ, 1000, True)
    assert rec.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert rec.delivery_count == 3
    h.reopen()  # survives restart, lock released
    assert h.broker.peek(DLQ, 0, 10)[0].dead_letter_reason == "MaxDeliveryCountExceeded"


def test_release_does_not_count(h):
    h.send(msg(1))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    h.broker.release(lock.key, 1000)
    rec, _ = h.broker.take_next(MAIN, 1000, True)
    assert rec.delivery_count == 0


def test_dead_letter_with_reason(h):
    h.send(msg(1))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    h.broker.settle(lock.key, Outcome.dead_letter("bad", "very bad", None), 1000, lambda e: None)
    h.commit()
    h.reopen()
    rec = h.broker.peek(DLQ, 0, 10)[0]
    assert (rec.dead_letter_reason, rec.dead_letter_description) == ("bad", "very bad")


def test_defer_and_receive_deferred(h):
    h.send(msg(1))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    h.broker.settle(lock.key, Outcome.defer(None), 1000, lambda e: None)
    h.commit()
    assert h.broker.take_next(MAIN, 1000, True) is None
    assert h.broker.peek(MAIN, 0, 10)[0].state == MessageState.DEFERRED
    with pytest.raises(MessageNotFound):
        h.broker.take_deferred(MAIN, 99, 1000, True)
    rec, lock = h.broker.take_deferred(MAIN, 1, 1000, True)
    h.broker.settle(lock.key, COMPLETE, 1000, lambda e: None)
    h.commit()
    assert h.broker.peek(MAIN, 0, 10) == []


def test_receive_and_delete_removes_durably(h):
    h.send(msg(1))
    rec, lock = h.broker.take_next(MAIN, 1000, False)
    assert lock is None and rec.message_id == "m1"
    h.commit()
    h.reopen()
    assert h.broker.peek(MAIN, 0, 10) == []


def test_ttl_expiry_dead_letters_when_configured(h):
    h.send(msg(1, ttl=500), now=1000)
    h.broker.on_timer(1600)
    h.commit()
    rec = h.broker.peek(DLQ, 0, 10)[0]
    assert rec.dead_letter_reason == "TTLExpiredException"


def test_scheduled_message_activates_with_new_sequence_number(h):
    h.send(msg(1, scheduled_enqueue_time_ms=5000), now=1000)
    assert h.broker.take_next(MAIN, 1000, True) is None
    assert h.broker.peek(MAIN, 0, 10)[0].state == MessageState.SCHEDULED
    h.broker.on_timer(5000)
    rec, _ = h.broker.take_next(MAIN, 5000, True)
    assert rec.sequence_number == 2


def test_log_records_every_change_in_the_same_commit(h):
    h.send(msg(1))
    _rec, lock = h.broker.take_next(MAIN, 1000, True)
    h.broker.settle(lock.key, COMPLETE, 1000, lambda e: None)
    h.commit()
    events = [decode_log(v)["event"] for _, v in h.store.read_log(0, 10)]
    assert events == [LogEvent.ENQUEUED.value, LogEvent.DELIVERED.value, LogEvent.COMPLETED.value]


def test_lock_token_carries_partition():
    for pid in (0, 7, 15):
        token = token_of(make_lock_key(pid))
        assert partition_of_token(token) == pid and token.version == 4
        # a UUID like any other (it is built without UUID.__init__'s checks)
        same = uuid.UUID(str(token))
        assert token == same and hash(token) == hash(same) and token.bytes_le == same.bytes_le
        assert token.variant == uuid.RFC_4122 and token.is_safe == same.is_safe
        assert {token: 1}[same] == 1 and uuid.UUID(bytes_le=token.bytes_le) == token


# A tail with body sections at [0, 7) and an application-properties map at [10, 13).
SPANNED_TAIL = b"\x00Sw\xa1\x02hi\x00St\xc1\x01\x00"


def spanned_record(**fields: object) -> MessageRecord:
    """Message 5 with SPANNED_TAIL and its spans; `fields` override the rest."""
    values: dict = {
        "sequence_number": 5,
        "enqueued_time_ms": 1,
        "message_id": "m",
        "tail": SPANNED_TAIL,
        "size": 10,
        "properties_span": (10, 13),
        "body_span": (0, 7),
    }
    values.update(fields)
    return message_record(**values)


def test_message_records_without_spans_still_decode():
    import msgpack

    rec = spanned_record()
    assert decode_message(encode_message(rec)) == rec
    old = msgpack.unpackb(encode_message(rec))[:22]  # as written before the spans existed
    got = decode_message(msgpack.packb(old, use_bin_type=True))
    assert (got.properties_span, got.body_span) == (None, None)
    for with_body, body in ((False, None), (True, b"\x00Sw\xa1\x02hi")):
        log = decode_log(
            encode_log(
                namespace="ns",
                entity="q",
                queue="main",
                partition=0,
                offset=0,
                event=LogEvent.ENQUEUED,
                record=rec,
                event_ms=1,
                with_body=with_body,
            )
        )
        assert log["v"] == 1 and log["properties"] == b"\xc1\x01\x00" and log["body"] == body


def test_log_records_are_the_bytes_of_the_schema_map():
    """encode_log packs a cached prefix plus the variable pairs: the bytes must stay exactly
    those of packing the schema's map in order (sparkjobs and old readers decode them)."""
    import msgpack

    rec = spanned_record(
        sequence_number=(3 << 48) | 7,
        enqueued_time_ms=1_700_000_000_000,
        delivery_count=2,
        message_id="m-ü",
        session_id="s",
        partition_key="pk",
        ttl_ms=60_000,
        expires_at_ms=1_700_000_060_000,
        priority=5,
    )
    for event, reason, with_body, ns in [
        (LogEvent.ENQUEUED, None, False, "ns"),
        (LogEvent.DEADLETTERED, "TTLExpiredException", True, "другой-ns"),
        (LogEvent.COMPLETED, None, True, "n" * 300),
    ]:
        expected = msgpack.packb(
            {
                "v": 1,
                "ns": ns,
                "entity": "Q",
                "queue": "subscriptions/s/$deadletterqueue",
                "partition": 3,
                "offset": 2**40,
                "event": event.value,
                "seq": rec.sequence_number,
                "message_id": "m-ü",
                "session_id": "s",
                "partition_key": "pk",
                "enqueued_ms": rec.enqueued_time_ms,
                "event_ms": 1_700_000_000_005,
                "size": 10,
                "delivery_count": 2,
                "reason": reason,
                "properties": b"\xc1\x01\x00",
                "body": b"\x00Sw\xa1\x02hi" if with_body else None,
            },
            use_bin_type=True,
        )
        got = encode_log(
            namespace=ns,
            entity="Q",
            queue="subscriptions/s/$deadletterqueue",
            partition=3,
            offset=2**40,
            event=event,
            record=rec,
            event_ms=1_700_000_000_005,
            reason=reason,
            with_body=with_body,
        )
        assert got == expected
