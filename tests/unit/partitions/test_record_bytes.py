"""The partition records are written with msgspec's MessagePack encoder (records._ENCODE): the
same bytes msgpack's Packer(use_bin_type=True) wrote, so every reader (decode_message,
decode_log, the Spark jobs' column parser, stores written before) reads them as before."""

from __future__ import annotations

import msgpack
import pytest
from broker_harness import message_record

from sbemu.partitions.records import (
    LOG_FIELDS,
    LogEvent,
    MessageRecord,
    MessageState,
    decode_log,
    decode_message,
    encode_log,
    encode_message,
)
from sbemu.protocol.codec import Symbol, Timestamp

PACKER = msgpack.Packer(use_bin_type=True)
NOW = 1_800_000_000_000

# values across every msgpack form a record's fields take: ints at each width boundary, both
# signs, strings and bytes at each length boundary, non-ASCII text
INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]
INTS += [-1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]
TEXTS = ["", "m", "é-ü", "x" * 31, "x" * 32, "x" * 255, "x" * 256, "x" * 65536]
BLOBS = [b"", b"\x00", b"b" * 255, b"b" * 256, b"b" * 65536]


def _record(**kw: object) -> MessageRecord:
    fields: dict[str, object] = {
        "sequence_number": (3 << 48) | 17,
        "enqueued_time_ms": NOW,
        "message_id": "m-1",
        "tail": b"\x00\x53\x75\xa0\x03abc",
        "size": 40,
        "properties_span": (3, 9),
        "body_span": (0, 8),
    }
    fields.update(kw)
    return message_record(**fields)


def _packer_message(r: MessageRecord) -> bytes:
    return PACKER.pack(
        [
            1, r.sequence_number, r.enqueued_time_ms, int(r.state), r.delivery_count,
            r.message_id, r.session_id, r.partition_key, r.ttl_ms, r.expires_at_ms, r.durable,
            r.priority, r.annotation_count, r.annotations, r.tail, r.size,
            r.scheduled_enqueue_time_ms, r.dead_letter_reason, r.dead_letter_description,
            r.dead_letter_source, r.property_overrides, r.original_sequence_number,
            r.properties_span, r.body_span, r.transfer_hops, r.first_acquirer,
        ]
    )  # fmt: skip


def _variants() -> list[MessageRecord]:
    out = [_record()]
    out += [_record(sequence_number=v, ttl_ms=v, size=v, delivery_count=v) for v in INTS]
    out += [_record(message_id=t, session_id=t, partition_key=t) for t in TEXTS]
    out += [_record(annotations=b, tail=b, properties_span=None, body_span=None) for b in BLOBS]
    out += [
        _record(
            state=MessageState.SCHEDULED,
            scheduled_enqueue_time_ms=NOW + 5,
            dead_letter_reason="r",
            dead_letter_description="d",
            dead_letter_source="q",
            property_overrides={"DeadLetterReason": b"\xa1\x01r", "é": b"\x40"},
            original_sequence_number=9,
            transfer_hops=3,
            durable=False,
            priority=4,
            annotation_count=2,
        ),
        # the header as sent: durable not sent, first-acquirer true (issue 36 C)
        _record(durable=None, first_acquirer=True),
        # subclasses of the base types (the codec's Timestamp and Symbol) as their base type
        _record(ttl_ms=Timestamp(5000), message_id=Symbol("sym"), expires_at_ms=Timestamp(NOW)),
    ]
    return out


@pytest.mark.parametrize("rec", _variants(), ids=lambda r: f"{r.sequence_number}-{r.size}")
def test_message_record_bytes_are_the_packers(rec: MessageRecord) -> None:
    data = encode_message(rec)
    assert data == _packer_message(rec)
    back = decode_message(data)
    assert back.message_id == (None if rec.message_id is None else str(rec.message_id))
    assert back.tail == rec.tail and back.sequence_number == rec.sequence_number


@pytest.mark.parametrize("rec", _variants(), ids=lambda r: f"{r.sequence_number}-{r.size}")
@pytest.mark.parametrize("with_body", [False, True])
def test_log_record_bytes_are_the_packers(rec: MessageRecord, with_body: bool) -> None:
    data = encode_log(
        namespace="ns",
        entity="q",
        queue="q/$deadletterqueue",
        partition=3,
        offset=12345,
        event=LogEvent.DEADLETTERED,
        record=rec,
        event_ms=NOW + 1,
        reason="MaxDeliveryCountExceeded",
        with_body=with_body,
    )
    ps, bs = rec.properties_span, rec.body_span
    expected = {
        "v": 1, "ns": "ns", "entity": "q", "queue": "q/$deadletterqueue", "partition": 3,
        "offset": 12345, "event": "deadlettered", "seq": rec.sequence_number,
        "message_id": rec.message_id, "session_id": rec.session_id,
        "partition_key": rec.partition_key, "enqueued_ms": rec.enqueued_time_ms,
        "event_ms": NOW + 1, "size": rec.size, "delivery_count": rec.delivery_count,
        "reason": "MaxDeliveryCountExceeded",
        "properties": rec.tail[ps[0] : ps[1]] if ps else None,
        "body": rec.tail[bs[0] : bs[1]] if with_body and bs else None,
    }  # fmt: skip
    assert data == PACKER.pack(expected)
    assert decode_log(data)["seq"] == rec.sequence_number


def test_log_fields_are_the_keys_a_log_record_holds_in_order() -> None:
    """LOG_FIELDS, which the log readers, the segment files and the Spark source build their
    schemas from, names every key encode_log writes, in the order it writes them."""
    rec = message_record(
        sequence_number=1, enqueued_time_ms=NOW, tail=b"pb", size=2,
        properties_span=(0, 1), body_span=(1, 2),
    )  # fmt: skip
    data = encode_log(
        namespace="ns", entity="q", queue="q", partition=0, offset=0,
        event=LogEvent.ENQUEUED, record=rec, event_ms=NOW, with_body=True,
    )  # fmt: skip
    assert list(msgpack.unpackb(data)) == [name for name, _kind in LOG_FIELDS]


def test_an_unencodable_value_is_refused() -> None:
    with pytest.raises(TypeError):
        encode_message(_record(message_id=object()))


def _general(data: bytes, monkeypatch: pytest.MonkeyPatch) -> MessageRecord:
    """decode_message the general way (msgpack, every layout), msgspec's decoder refused."""
    import msgspec

    from sbemu.partitions import records

    def refuse(_data: bytes) -> MessageRecord:
        raise msgspec.ValidationError("refused")

    with monkeypatch.context() as m:
        m.setattr(records, "_DECODE", refuse)
        return decode_message(data)


@pytest.mark.parametrize("rec", _variants(), ids=lambda r: f"{r.sequence_number}-{r.size}")
def test_a_current_record_decodes_as_the_general_way_does(rec, monkeypatch):
    """decode_message reads a current record with msgspec's decoder straight into the Struct:
    the same record as the general (msgpack) way, state as the enum, spans as tuples."""
    data = encode_message(rec)
    fast = decode_message(data)
    assert fast == _general(data, monkeypatch)
    assert type(fast.state) is MessageState
    assert fast.properties_span is None or type(fast.properties_span) is tuple


def test_other_layouts_go_the_general_way():
    """Older layouts (22 and 24 fields), a span stored empty, transfer hops stored nil: read
    as before; an unknown version or state is refused."""
    rec = _record(properties_span=(1, 2), body_span=(0, 1), transfer_hops=2)
    fields = msgpack.unpackb(encode_message(rec))
    for n in (22, 24):
        got = decode_message(PACKER.pack(fields[:n]))
        assert got.sequence_number == rec.sequence_number and got.transfer_hops == 0
        assert got.body_span == (None if n == 22 else (0, 1))
    empty = decode_message(PACKER.pack([*fields[:22], [], [], None]))
    assert (empty.properties_span, empty.body_span, empty.transfer_hops) == (None, None, 0)
    with pytest.raises(ValueError, match="unknown message record version"):
        decode_message(PACKER.pack([2, *fields[1:]]))
    with pytest.raises(ValueError):
        decode_message(PACKER.pack([fields[0], fields[1], fields[2], 9, *fields[4:]]))
