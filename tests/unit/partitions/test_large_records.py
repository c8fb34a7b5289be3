"""Large (Premium, up to 100 MB) messages at the unit level: the record encoding that copies
the tail once, the partition log's body cap, the batch limit of a batch envelope, and the
explorer's cut preview (issue 26 item 5)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import msgpack
import pytest
from proton import Message

from builders import message_record
from sbemu.admin import explorer
from sbemu.config import NamespaceConfig, QueueConfig
from sbemu.errors import MessageSizeExceeded
from sbemu.partitions import records
from sbemu.partitions.commits import GroupCommit
from sbemu.partitions.records import (
    LogEvent,
    MessageRecord,
    decode_message,
    encode_message,
)
from sbemu.partitions.router import Router
from sbemu.partitions.specs import queue_spec
from sbemu.protocol.messages import scan_transfer
from sbemu.protocol.views import encode_property, encode_symbol
from sbemu.protocol.wirecodec import WIRE_CODEC

NOW = 1_800_000_000_000
MIB = 1024 * 1024


def _record(tail: bytes, body_span: tuple[int, int] | None = None) -> MessageRecord:
    return message_record(
        sequence_number=7,
        enqueued_time_ms=NOW,
        message_id="m",
        session_id="s",
        ttl_ms=60_000,
        expires_at_ms=NOW + 60_000,
        tail=tail,
        size=len(tail) + 20,
        scheduled_enqueue_time_ms=None,
        dead_letter_reason="r",
        dead_letter_description="d",
        dead_letter_source=None,
        property_overrides={"k": b"\x41\x01"},
        original_sequence_number=3,
        properties_span=None,
        body_span=body_span,
        transfer_hops=1,
    )


def test_a_large_record_is_packed_exactly_as_a_small_one() -> None:
    rec = _record(os.urandom(records.LARGE_TAIL + 1), (0, 10))
    data = encode_message(rec)
    fields = [
        records.MESSAGE_SCHEMA_VERSION,
        rec.sequence_number,
        rec.enqueued_time_ms,
        int(rec.state),
        rec.delivery_count,
        rec.message_id,
        rec.session_id,
        rec.partition_key,
        rec.ttl_ms,
        rec.expires_at_ms,
        rec.durable,
        rec.priority,
        rec.annotation_count,
        rec.annotations,
        rec.tail,
        rec.size,
        rec.scheduled_enqueue_time_ms,
        rec.dead_letter_reason,
        rec.dead_letter_description,
        rec.dead_letter_source,
        rec.property_overrides,
        rec.original_sequence_number,
        rec.properties_span,
        rec.body_span,
        rec.transfer_hops,
        rec.first_acquirer,
    ]
    assert data == msgpack.packb(fields, use_bin_type=True)
    assert decode_message(data) == rec


def test_the_log_keeps_at_most_256_kib_of_a_body() -> None:
    body = os.urandom(3 * MIB)
    rec = _record(body, (0, len(body)))
    logged = records.decode_log(
        records.encode_log(
            namespace="ns",
            entity="q",
            queue="main",
            partition=0,
            offset=1,
            event=LogEvent.ENQUEUED,
            record=rec,
            event_ms=NOW,
            with_body=True,
        )
    )
    assert logged["body"] == body[: records.LOG_BODY_MAX] and logged["size"] == rec.size


def _encoded(body: bytes) -> bytes:
    msg = Message(body=body)
    msg.inferred = True
    return msg.encode()


def test_a_batch_envelope_is_held_to_the_batch_limit() -> None:
    inner = [_encoded(b"x" * 300_000) for _ in range(4)]
    # the envelope [contract 3.4]: one data section per encoded message
    data = b"".join(b"\x00\x53\x75\xb0" + len(i).to_bytes(4, "big") + i for i in inner)
    assert len(scan_transfer(data, 100 * MIB, False, 2 * MIB)) == 4  # a 1.2 MB batch fits 2 MB
    with pytest.raises(MessageSizeExceeded):
        scan_transfer(data, 100 * MIB, False, MIB)  # Premium's batch limit: 1 MB
    single = _encoded(os.urandom(5 * MIB))
    assert len(scan_transfer(single, 100 * MIB, False, MIB)) == 1  # one message: its own limit


def test_the_explorer_shows_a_cut_body_of_a_large_message(tmp_path: Path) -> None:
    router = Router(tmp_path, lambda: None, encode_property, encode_symbol)
    ns = NamespaceConfig(name="ns", premium_partitions=1)
    router.add_entity(queue_spec(ns, QueueConfig(name="big", max_message_size_kb=102_400)))
    entity = router.entities[("ns", "big")]
    try:
        text = "abc" * (MIB)  # 3 MB of text in one data section
        data = explorer.build_test_message({"body": text, "properties": {"n": 1}}, NOW)
        errors: list[Exception | None] = []
        explorer.send_bytes(WIRE_CODEC, entity, data, 100 * MIB, NOW, errors.append)
        GroupCommit(router).turn(NOW)
        asyncio.run(asyncio.sleep(0))
        assert errors == [None]
        (shown,) = explorer.peek(WIRE_CODEC, entity, None, "active", 0, 10, NOW)["messages"]
        assert shown["application_properties"] == {"n": 1}
        assert shown["body"]["kind"] == "text" and shown["body"]["truncated"] is True
        assert shown["body"]["text"] == text[: explorer.BODY_PREVIEW]
        assert shown["body"]["size"] == len(text)
    finally:
        router.close()


@pytest.mark.parametrize("size", [0, 5 * MIB + 3])
def test_a_large_record_read_off_the_loop_is_the_record_decoded(size: int) -> None:
    """largeread: the read-ahead notes only the sequence number; the commit's read gives the
    record decode_message gives, its body a bytes object of its own (not a view of the map)."""
    from sbemu.partitions import largeread

    rec = _record(os.urandom(size), body_span=(0, size))
    data = encode_message(rec)
    data = data if isinstance(data, bytes) else b"".join(data)
    view = memoryview(data)
    ahead = largeread.ahead(view)
    assert type(ahead) is largeread.Ahead and ahead.sequence_number == rec.sequence_number
    got = largeread.read(view)
    assert got == decode_message(data) == rec
    assert type(got.tail) is bytes and type(got.state) is type(rec.state)


def test_a_large_record_in_another_layout_reads_as_decode_message_reads_it() -> None:
    """Older layouts read as decode_message reads them; one msgspec cannot take (a span
    stored empty, hops stored nil) is decoded where the read-ahead meets it, as before."""
    from sbemu.partitions import largeread

    rec = _record(b"x" * 100)
    encoded = encode_message(rec)
    fields = msgpack.unpackb(encoded if isinstance(encoded, bytes) else b"".join(encoded))
    for older in (msgpack.packb(fields[:22]), msgpack.packb(fields[:24])):
        assert type(largeread.ahead(older)) is largeread.Ahead
        assert largeread.read(older) == decode_message(older)
    other = msgpack.packb([*fields[:22], [], [], None])
    got = largeread.ahead(other)
    assert type(got) is MessageRecord and got == decode_message(other)
    assert largeread.read(other) == got
