"""locked_deliveries and delivery_bytes (the receive hot path's encoder, for a run and for one
message) give exactly encode_delivery's bytes."""

from __future__ import annotations

import itertools

from builders import message_record
from sbemu.partitions.records import MessageRecord
from sbemu.protocol import codec
from sbemu.protocol.messages import encode_delivery, lock_token_stamp
from sbemu.protocol.outgoing import delivery_bytes

TAIL = b"\x00\x53\x75\xa0\x03abc"
KEY = 0x0123456789ABCDEF_FEDCBA9876543210  # a lock token's int (Lock.key)


def record(**changes: object) -> MessageRecord:
    rec = message_record(
        sequence_number=1_000,
        enqueued_time_ms=1_700_000_000_000,
        message_id="m",
        tail=TAIL,
        size=len(TAIL),
    )
    for name, value in changes.items():
        setattr(rec, name, value)
    return rec


def test_the_common_cases_match_encode_delivery():
    one = codec.enc_symbol("x-opt-custom") + codec.enc_string("v")
    many = b"".join(codec.enc_symbol(f"k{i}") + codec.enc_long(i) for i in range(130))
    for seq, count, ttl, priority, durable, ann, pid in itertools.product(
        (128, 1 << 47, (7 << 48) | 5),
        (0, 1, 300, 1 << 31),
        (None, 60_000, 1 << 40),
        (None, 4),
        (True, False),
        ((b"", 0), (one, 1), (many, 130)),
        (None, 0, 15),
    ):
        rec = record(
            sequence_number=seq,
            delivery_count=count,
            ttl_ms=ttl,
            priority=priority,
            durable=durable,
            annotations=ann[0],
            annotation_count=ann[1],
        )
        until = 1_700_000_060_000
        assert delivery_bytes(rec, pid, until, KEY) == encode_delivery(
            rec, pid, until, delivery_stamps=lock_token_stamp(KEY)
        )


def test_records_with_more_to_stamp_or_rewrite_match_too():
    until = 1_700_000_060_000
    for rec in (
        record(sequence_number=1),
        record(sequence_number=127),
        record(dead_letter_reason="r", dead_letter_description="d"),
        record(dead_letter_reason="r"),
        record(dead_letter_description="d"),
        record(dead_letter_source="q"),
        record(scheduled_enqueue_time_ms=1_700_000_100_000),
        record(original_sequence_number=55),
        record(
            tail=b"\x00\x53\x74\xc1\x06\x02\xa1\x01i\x54\x05" + TAIL,
            property_overrides={"i": codec.enc_int(6)},
        ),
        record(tail=b"\x00\x53\x71\xc1\x06\x02\xa1\x01d\x54\x05" + TAIL),  # sender's
    ):
        assert delivery_bytes(rec, 3, until, KEY) == encode_delivery(
            rec, 3, until, delivery_stamps=lock_token_stamp(KEY)
        )


def test_a_run_of_locked_deliveries_gives_each_tag_and_bytes():
    """locked_deliveries: per message the lock token in .NET byte order as its delivery tag
    [contract 4.6], encode_delivery's bytes and the lock key, plain and rewritten messages
    alike."""
    import uuid

    from sbemu.partitions.subqueue import Lock
    from sbemu.protocol.outgoing import locked_deliveries

    recs = [
        record(sequence_number=1_000 + i, delivery_count=i % 3, ttl_ms=(None, 60_000)[i % 2])
        for i in range(6)
    ]
    one = codec.enc_symbol("x-opt-custom") + codec.enc_string("v")
    many = b"".join(codec.enc_symbol(f"k{i}") + codec.enc_long(i) for i in range(130))
    recs += [  # message annotations of their own: other section heads (map8, map32), mixed
        record(sequence_number=2_000, annotations=one, annotation_count=1),
        record(sequence_number=2_001, annotations=many, annotation_count=130),
        record(sequence_number=2_002),
        record(sequence_number=2_003, annotations=one, annotation_count=1),
    ]
    recs += [
        record(sequence_number=5),
        record(dead_letter_reason="r"),
        record(tail=b"\x00\x53\x71\xc1\x06\x02\xa1\x01d\x54\x05" + TAIL),
    ]
    keys = [KEY ^ (i << 70) for i in range(len(recs))]
    until = 1_700_000_060_000
    taken = [(r, Lock(k, None, r.sequence_number, until + i, None, r))  # type: ignore[arg-type]
             for i, (r, k) in enumerate(zip(recs, keys, strict=True))]  # fmt: skip
    for pid in (None, 0, 15):
        got = locked_deliveries(taken, pid)
        assert [key for _tag, _data, key in got] == keys
        assert [tag for tag, _data, _key in got] == [uuid.UUID(int=k).bytes_le for k in keys]
        assert [data for _tag, data, _key in got] == [
            encode_delivery(r, pid, until + i, delivery_stamps=lock_token_stamp(k))
            for i, (r, k) in enumerate(zip(recs, keys, strict=True))
        ]
