"""Tests for sbemu.protocol.sections: scanning proton/SDK messages and rebuilding them."""

from __future__ import annotations

import datetime
import uuid

import proton
import pytest

from sbemu.protocol import sectionfields
from sbemu.protocol.codec import (
    Symbol,
    decode,
    enc_binary,
    enc_described,
    enc_int,
    enc_list,
    enc_long,
    enc_map,
    enc_null,
    enc_short,
    enc_string,
    enc_symbol,
    enc_timestamp,
    enc_uint,
    enc_ulong,
    skip,
)
from sbemu.protocol.sections import (
    SERVICE_ANNOTATIONS,
    ScannedMessage,
    SectionError,
    assign_message_id,
    build_message,
    new_message_id,
    read_application_properties,
    read_properties,
    scan_message,
    split_batch,
    stamp,
)

U = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")


def encode_proton(**kw) -> bytes:
    return bytes(proton.Message(**kw).encode())


def decode_proton(buf: bytes) -> proton.Message:
    m = proton.Message()
    m.decode(buf)
    return m


def sections_of(buf: bytes) -> list[tuple[int, bytes]]:
    """(descriptor code, whole section bytes) for each section, via the codec."""
    out, pos = [], 0
    while pos < len(buf):
        end = skip(buf, pos)
        value, _ = decode(buf, pos)
        out.append((value.descriptor, buf[pos:end]))
        pos = end
    return out


def rebuild(s: ScannedMessage, **kw) -> bytes:
    args = dict(
        durable=s.durable,
        priority=s.priority,
        ttl_ms=s.ttl_ms,
        delivery_count=0,
        annotations=s.annotations,
        annotation_count=s.annotation_count,
        stamps=[],
        tail=s.tail,
    )
    args.update(kw)
    return build_message(**args)


def full_proton_message(body=b"payload") -> bytes:
    return encode_proton(
        id="msg-1",
        group_id="session-a",
        reply_to_group_id="session-b",
        correlation_id="corr",
        subject="subj",
        address="dest",
        reply_to="replies",
        content_type="application/json",
        ttl=30.0,
        durable=True,
        priority=7,  # not proton's default (4), which it would omit
        annotations={
            Symbol("x-opt-partition-key"): "session-a",
            Symbol("x-opt-sequence-number"): 99,  # client-supplied: must be stripped
            Symbol("x-opt-enqueued-time"): proton.timestamp(1),
            Symbol("custom"): "kept",
        },
        properties={
            "s": "text",
            "i": 42,
            "f": 1.5,
            "b": True,
            "n": None,
            "u": U,
            "bin": b"\x01\x02",
            "i32": proton.int32(-7),
        },
        body=body,
        inferred=isinstance(body, bytes),  # bytes travel in a data section, as the SDKs send
    )


# --- scanning ----------------------------------------------------------------------


def test_scan_full_proton_message():
    buf = full_proton_message()
    s = scan_message(buf)
    assert s.durable is True
    assert s.priority == 7
    assert s.ttl_ms == 30_000
    assert s.message_id == "msg-1"
    assert s.session_id == "session-a"
    assert s.reply_to_session_id == "session-b"
    assert s.correlation_id == "corr"
    assert s.subject == "subj"
    assert s.to == "dest"
    assert s.reply_to == "replies"
    assert s.content_type == "application/json" and type(s.content_type) is str
    assert s.partition_key == "session-a"
    assert s.via_partition_key is None
    assert s.scheduled_enqueue_time_ms is None
    assert s.size == len(buf)
    # annotations keep only client entries, byte-for-byte
    assert s.annotation_count == 2
    assert s.annotations == (
        enc_symbol("x-opt-partition-key")
        + enc_string("session-a")
        + enc_symbol("custom")
        + enc_string("kept")
    )
    # tail = properties .. body, exactly the bytes proton produced
    codes = [c for c, _ in sections_of(buf)]
    assert codes == [0x70, 0x72, 0x73, 0x74, 0x75]
    assert s.tail == b"".join(sec for c, sec in sections_of(buf) if c >= 0x73)
    assert buf.endswith(s.tail)


@pytest.mark.parametrize(
    "body,inferred,codes",
    [
        ("text", False, [0x77]),
        (b"bytes", True, [0x75]),  # data section
        (b"bytes", False, [0x77]),  # amqp-value holding binary
        (None, False, []),  # proton, like pyamqp, sends no body section at all
        ([1, "two", None], False, [0x77]),
        ([b"a", b"b"], True, [0x76]),  # amqp-sequence
    ],
)
def test_scan_bodies(body, inferred, codes):
    buf = encode_proton(id="x", body=body, inferred=inferred)
    s = scan_message(buf)
    assert s.message_id == "x"
    tail_codes = [c for c, _ in sections_of(s.tail)]
    assert tail_codes == [0x73, *codes]
    back = decode_proton(rebuild(s))
    assert back.body == body
    assert back.id == "x"
    assert back.inferred == inferred or body is None


@pytest.mark.parametrize(
    "mid,rendered",
    [
        ("plain", "plain"),
        (U, str(U)),
        (proton.ulong(12345), "12345"),
        (b"\xde\xad\xbe\xef", "deadbeef"),
        (proton.symbol("symid"), "symid"),
    ],
)
def test_message_id_rendering(mid, rendered):
    s = scan_message(encode_proton(id=mid, correlation_id=mid, body=b""))
    assert s.message_id == rendered and type(s.message_id) is str
    assert s.correlation_id == rendered


def test_scan_message_without_header_properties_or_body():
    # Only message-annotations: header, properties and body all absent.
    buf = enc_described(0x72, enc_map([(enc_symbol("x-opt-partition-key"), enc_string("pk"))]))
    s = scan_message(buf)
    assert (s.durable, s.priority, s.ttl_ms, s.message_id, s.session_id) == (
        None,  # not sent: none handed back [issue 36 C]
        None,
        None,
        None,
        None,
    )
    assert s.partition_key == "pk"
    assert s.tail == b""
    # Only properties (what pyamqp sends for ServiceBusMessage(None) without extras).
    buf = enc_described(0x73, enc_list([enc_string("id")] + [enc_null()] * 12))
    s = scan_message(buf)
    assert (
        s.message_id == "id" and s.tail == buf and s.annotations == b"" and s.annotation_count == 0
    )


def test_scan_azure_sdk_messages():
    sb = pytest.importorskip("azure.servicebus")
    transport = pytest.importorskip("azure.servicebus._transport._pyamqp_transport")
    encode_mod = pytest.importorskip("azure.servicebus._pyamqp._encode")

    def sdk_bytes(msg) -> bytes:
        out = bytearray()
        am = transport.PyamqpTransport.to_outgoing_amqp_message(msg.raw_amqp_message)
        encode_mod.encode_payload(out, am)
        return bytes(out)

    when = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    msg = sb.ServiceBusMessage(
        "hello",
        message_id="m1",
        session_id="s1",
        partition_key="s1",
        time_to_live=datetime.timedelta(seconds=30),
        scheduled_enqueue_time_utc=when,
        content_type="text/plain",
        application_properties={"a": 1, "b": "x"},
    )
    s = scan_message(sdk_bytes(msg))
    assert (s.message_id, s.session_id, s.partition_key, s.ttl_ms) == ("m1", "s1", "s1", 30_000)
    assert s.content_type == "text/plain"
    assert s.scheduled_enqueue_time_ms == int(when.timestamp() * 1000)
    assert read_application_properties(s.tail) == {"a": 1, "b": "x"}

    empty = scan_message(sdk_bytes(sb.ServiceBusMessage(None)))
    assert [c for c, _ in sections_of(empty.tail)] == [0x73]  # no body section at all
    assert uuid.UUID(empty.message_id)


def test_scheduled_enqueue_time_timestamp_or_long():
    for enc in (enc_timestamp(1_900_000_000_000), enc_long(1_900_000_000_000)):
        buf = enc_described(0x72, enc_map([(enc_symbol("x-opt-scheduled-enqueue-time"), enc)]))
        s = scan_message(buf)
        assert s.scheduled_enqueue_time_ms == 1_900_000_000_000
        assert s.annotation_count == 1  # not a broker-owned key: kept
    bad = enc_described(
        0x72, enc_map([(enc_symbol("x-opt-scheduled-enqueue-time"), enc_string("soon"))])
    )
    with pytest.raises(SectionError):
        scan_message(bad)


def test_via_partition_key_and_all_broker_keys_stripped():
    pairs = [(enc_symbol(k), enc_long(1)) for k in sorted(SERVICE_ANNOTATIONS)]
    pairs.insert(3, (enc_symbol("x-opt-via-partition-key"), enc_string("via")))
    pairs.append((enc_symbol("a" * 300), enc_string("sym32 key")))  # sym32 key path
    pairs.append((enc_ulong(7), enc_string("ulong key")))  # ulong keys are legal too
    buf = enc_described(0x72, enc_map(pairs))
    s = scan_message(buf)
    assert s.via_partition_key == "via"
    assert s.annotation_count == 3
    assert s.annotations == b"".join(
        k + v for k, v in pairs if not (k[0] == 0xA3 and k[2:].decode() in SERVICE_ANNOTATIONS)
    )
    assert len(SERVICE_ANNOTATIONS) == 8


def test_delivery_annotations_kept_without_a_stale_lock_token():
    # [issue 23 item 1] the service hands a sender's delivery-annotations to the receiver;
    # an x-opt-lock-token among them (a received message sent again) is its own to stamp
    da = enc_described(
        0x71,
        enc_map([(enc_symbol("x-opt-lock-token"), enc_string("t")), (enc_symbol("k"), enc_int(3))]),
    )
    props = enc_described(0x73, enc_list([enc_string("id")]))
    body = enc_described(0x75, enc_binary(b"b"))
    s = scan_message(da + props + body)
    assert s.tail == enc_described(0x71, enc_map([(enc_symbol("k"), enc_int(3))])) + props + body
    assert s.message_id == "id"
    plain = enc_described(0x71, enc_map([(enc_symbol("k"), enc_int(3))])) + props + body
    assert scan_message(plain).tail == plain  # nothing to drop: byte for byte
    # on the way out they go after the header, before the message annotations
    out = rebuild(
        s,
        stamps=[(enc_symbol("x-opt-sequence-number"), enc_long(5))],
        delivery_stamps=[(enc_symbol("x-opt-lock-token"), b"\x98" + U.bytes)],
    )
    m = decode_proton(out)
    assert m.instructions == {"k": 3, "x-opt-lock-token": U}
    assert [code for code, _ in sections_of(out)] == [0x70, 0x71, 0x72, 0x73, 0x75]
    assert m.id == "id"


def test_symbolic_and_ulong_descriptors_accepted_and_normalised():
    def sym(name: str, value: bytes) -> bytes:
        return b"\x00" + enc_symbol(name) + value

    def ulong(code: int, value: bytes) -> bytes:
        return b"\x00\x80" + code.to_bytes(8, "big") + value

    buf = (
        sym("amqp:header:list", enc_list([b"\x41", enc_null(), enc_uint(5000)]))
        + ulong(0x72, enc_map([(enc_symbol("x-opt-partition-key"), enc_string("pk"))]))
        + sym("amqp:properties:list", enc_list([enc_string("id"), enc_null(), enc_string("to")]))
        + ulong(0x74, enc_map([(enc_string("k"), enc_int(1))]))
        + sym("amqp:amqp-value:*", enc_string("body"))
    )
    s = scan_message(buf)
    assert (s.durable, s.ttl_ms, s.partition_key, s.message_id, s.to) == (
        True,
        5000,
        "pk",
        "id",
        "to",
    )
    # The tail is re-emitted with smallulong descriptors (contract §1.6)
    assert [sec[:2] for _, sec in sections_of(s.tail)] == [b"\x00\x53"] * 3
    m = decode_proton(rebuild(s))
    assert (m.id, m.address, m.properties, m.body) == ("id", "to", {"k": 1}, "body")
    # the spans point into the re-emitted tail
    a, b = s.properties_span
    assert decode(s.tail[a:b])[0] == {"k": 1}
    a, b = s.body_span
    assert s.tail[a:b] == b"\x00\x53\x77" + enc_string("body") and b == len(s.tail)


def test_out_of_order_sections_tolerated():
    props = enc_described(0x73, enc_list([enc_string("id")]))
    hdr = enc_described(0x70, enc_list([b"\x41"]))
    body = enc_described(0x75, enc_binary(b"b"))
    s = scan_message(props + hdr + body)
    assert s.durable is True and s.message_id == "id"
    assert s.tail == props + body


# --- build_message -----------------------------------------------------------------


def test_build_message_decodes_in_proton_with_typed_stamps():
    s = scan_message(full_proton_message())
    stamps = [
        stamp("x-opt-sequence-number", enc_long(1234567)),
        stamp("x-opt-enqueued-time", enc_timestamp(1_700_000_000_000)),
        stamp("x-opt-locked-until", enc_timestamp(1_700_000_060_000)),
        stamp("x-opt-partition-id", enc_short(3)),
        stamp("x-opt-message-state", enc_int(0)),
    ]
    out = build_message(
        durable=s.durable,
        priority=s.priority,
        ttl_ms=s.ttl_ms,
        delivery_count=2,
        annotations=s.annotations,
        annotation_count=s.annotation_count,
        stamps=stamps,
        tail=s.tail,
    )
    m = decode_proton(out)
    assert m.durable is True and m.priority == 7 and m.ttl == 30.0
    assert m.delivery_count == 2 and m.first_acquirer is False
    ann = m.annotations
    assert ann["x-opt-sequence-number"] == 1234567 and type(ann["x-opt-sequence-number"]) is int
    assert isinstance(ann["x-opt-enqueued-time"], proton.timestamp)
    assert ann["x-opt-enqueued-time"] == 1_700_000_000_000
    assert isinstance(ann["x-opt-locked-until"], proton.timestamp)
    assert isinstance(ann["x-opt-partition-id"], proton.short) and ann["x-opt-partition-id"] == 3
    assert isinstance(ann["x-opt-message-state"], proton.int32)
    assert ann["x-opt-partition-key"] == "session-a" and ann["custom"] == "kept"
    assert len(ann) == 7  # client's sequence number / enqueued time were replaced, not duplicated
    # properties and application properties preserved
    assert (m.id, m.group_id, m.reply_to_group_id, m.correlation_id) == (
        "msg-1",
        "session-a",
        "session-b",
        "corr",
    )
    assert (m.subject, m.address, m.reply_to, m.content_type) == (
        "subj",
        "dest",
        "replies",
        "application/json",
    )
    assert m.properties["i32"] == -7 and isinstance(m.properties["i32"], proton.int32)
    assert m.properties["u"] == U and m.properties["n"] is None and m.properties["s"] == "text"
    assert m.body == b"payload"
    # header is the full 5-field list with smallulong descriptors on every section
    assert out.startswith(b"\x00\x53\x70\xc0")
    assert decode(out)[0].value == [True, 7, 30_000, None, 2]  # first-acquirer null
    assert all(sec[:2] == b"\x00\x53" for _, sec in sections_of(out))
    assert out.endswith(s.tail)


def test_build_header_wire_types():
    out = build_message(
        durable=None,
        priority=None,
        ttl_ms=None,
        delivery_count=300,
        annotations=b"",
        annotation_count=0,
        stamps=[],
        tail=b"",
    )
    # durable, priority, ttl and first-acquirer null (none sent), delivery-count uint: the
    # header as the sender set it [issue 23, issue 36 C]
    assert out == b"\x00\x53\x70\xc0\x0a\x05\x40\x40\x40\x40\x70\x00\x00\x01\x2c"
    sent = build_message(
        durable=False,
        first_acquirer=True,
        priority=None,
        ttl_ms=None,
        delivery_count=0,
        annotations=b"",
        annotation_count=0,
        stamps=[],
        tail=b"",
    )
    assert sent == b"\x00\x53\x70\xc0\x06\x05\x42\x40\x40\x41\x43"
    d = proton.Data()
    d.decode(out)
    d.rewind()
    d.next()
    d.enter()  # described
    d.next()
    d.next()
    d.enter()  # list
    types = []
    while d.next():
        types.append(d.type())
    assert types == [
        proton.Data.NULL,
        proton.Data.NULL,
        proton.Data.NULL,
        proton.Data.NULL,
        proton.Data.UINT,
    ]
    # no annotations and no stamps: no message-annotations section at all
    assert [c for c, _ in sections_of(out)] == [0x70]


def test_build_annotation_section_with_stamps_only():
    out = build_message(
        durable=False,
        priority=None,
        ttl_ms=1000,
        delivery_count=0,
        annotations=b"",
        annotation_count=0,
        stamps=[stamp("x-opt-sequence-number", enc_long(1))],
        tail=b"",
    )
    assert [c for c, _ in sections_of(out)] == [0x70, 0x72]
    assert decode_proton(out).annotations == {"x-opt-sequence-number": 1}


def test_build_large_annotations_use_map32():
    big = stamp("custom", enc_string("v" * 400))
    out = build_message(
        durable=True,
        priority=None,
        ttl_ms=None,
        delivery_count=0,
        annotations=big[0] + big[1],
        annotation_count=1,
        stamps=[stamp("x-opt-sequence-number", enc_long(5))],
        tail=b"",
    )
    m = decode_proton(out)
    assert m.annotations == {"custom": "v" * 400, "x-opt-sequence-number": 5}


def test_property_overrides_replace_and_append():
    s = scan_message(full_proton_message())
    out = rebuild(
        s,
        property_overrides={
            "s": enc_string("replaced"),
            "DeadLetterReason": enc_string("why"),
            "DeadLetterErrorDescription": enc_string("because"),
        },
    )
    m = decode_proton(out)
    assert m.properties["s"] == "replaced"
    assert m.properties["DeadLetterReason"] == "why"
    assert m.properties["DeadLetterErrorDescription"] == "because"
    assert m.properties["i"] == 42 and m.properties["u"] == U
    assert list(m.properties)[-2:] == ["DeadLetterReason", "DeadLetterErrorDescription"]
    assert m.body == b"payload" and m.id == "msg-1"
    # the other sections of the tail are byte-for-byte unchanged
    before = dict(sections_of(s.tail))
    after = dict(sections_of(out))
    for code in (0x73, 0x75):
        assert after[code] == before[code]
    assert read_application_properties(scan_message(out).tail)["s"] == "replaced"


def test_property_overrides_create_section_after_properties():
    s = scan_message(encode_proton(id="x", body=b"body", inferred=True))
    assert 0x74 not in dict(sections_of(s.tail))
    out = rebuild(s, property_overrides={"DeadLetterReason": enc_string("r")})
    assert [c for c, _ in sections_of(out)] == [0x70, 0x73, 0x74, 0x75]
    m = decode_proton(out)
    assert m.properties == {"DeadLetterReason": "r"} and m.body == b"body" and m.id == "x"
    # no properties and no body at all: the section is simply appended
    s = scan_message(enc_described(0x70, enc_list([b"\x42"])))
    out = rebuild(s, property_overrides={"k": enc_int(1)})
    assert [c for c, _ in sections_of(out)] == [0x70, 0x74]


def test_rebuild_roundtrip_is_stable():
    s = scan_message(full_proton_message())
    out = rebuild(s, stamps=[stamp("x-opt-sequence-number", enc_long(7))])
    s2 = scan_message(out)
    assert s2.tail == s.tail and s2.annotations == s.annotations
    assert (s2.message_id, s2.session_id, s2.partition_key, s2.ttl_ms) == (
        s.message_id,
        s.session_id,
        s.partition_key,
        s.ttl_ms,
    )


# --- read helpers --------------------------------------------------------------------


def test_read_properties_and_application_properties():
    s = scan_message(full_proton_message())
    props = read_properties(s.tail)
    assert props["message-id"] == "msg-1"
    assert props["group-id"] == "session-a"
    assert props["reply-to-group-id"] == "session-b"
    assert props["content-type"] == Symbol("application/json")
    assert props["to"] == "dest" and props["reply-to"] == "replies" and props["subject"] == "subj"
    assert "absolute-expiry-time" not in props and "user-id" not in props  # nulls omitted
    app = read_application_properties(s.tail)
    assert app == {
        "s": "text",
        "i": 42,
        "f": 1.5,
        "b": True,
        "n": None,
        "u": U,
        "bin": b"\x01\x02",
        "i32": -7,
    }
    assert read_application_properties(b"") == {} and read_properties(b"") == {}


# --- batches ---------------------------------------------------------------------------


def test_split_batch_three_messages():
    inner = [
        encode_proton(id="m1", group_id="g", body=b"one", inferred=True),
        encode_proton(id="m2", body="two" * 100),  # > 255 bytes: vbin32 data section
        encode_proton(id="m3", properties={"k": 3}, body=None),
    ]
    envelope = (
        enc_described(0x72, enc_map([(enc_symbol("x-opt-partition-key"), enc_string("g"))]))
        + enc_described(0x73, enc_list([enc_string("m1")] + [enc_null()] * 9 + [enc_string("g")]))
        + b"".join(enc_described(0x75, enc_binary(m)) for m in inner)
    )
    parts = split_batch(envelope)
    assert parts == inner
    assert [scan_message(p).message_id for p in parts] == ["m1", "m2", "m3"]
    assert decode_proton(parts[1]).body == "two" * 100


def test_split_batch_requires_data():
    with pytest.raises(SectionError):
        split_batch(enc_described(0x73, enc_list([enc_string("x")])))
    with pytest.raises(SectionError):
        split_batch(b"\x00\x53\x75\xa0\x05ab")


# --- malformed input -------------------------------------------------------------------


def _boundaries(buf: bytes) -> set[int]:
    pos, out = 0, {0}
    while pos < len(buf):
        pos = skip(buf, pos)
        out.add(pos)
    return out


@pytest.mark.parametrize("body", [b"payload", "text", None, [1, 2]])
def test_truncation_at_every_offset(body):
    buf = full_proton_message(body)
    boundaries = _boundaries(buf)
    for cut in range(len(buf)):
        piece = buf[:cut]
        if cut in boundaries and cut > 0:
            scan_message(piece)  # a shorter but well-formed message
            continue
        with pytest.raises(SectionError):
            scan_message(piece)


def test_truncated_batch_raises_section_error():
    envelope = b"".join(enc_described(0x75, enc_binary(encode_proton(id=str(i)))) for i in range(3))
    boundaries = _boundaries(envelope)
    for cut in range(len(envelope)):
        if cut in boundaries and cut > 0:
            assert len(split_batch(envelope[:cut])) >= 1
            continue
        with pytest.raises(SectionError):
            split_batch(envelope[:cut])


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x40",  # not a described value
        b"hello world",
        b"\x00\x53\x79\x40",  # unknown section code
        b"\x00\x53\x10\x40",
        b"\x00\x44\x40",  # ulong0 descriptor = code 0
        b"\x00" + enc_symbol("amqp:bogus:list") + b"\xc0\x01\x00",
        b"\x00\x53\x75\xa1\x01x",  # data section holding a string
        b"\x00\x53\x70\xa1\x01x",  # header that is not a list
        b"\x00\x53\x72\xc0\x01\x00",  # message-annotations that is a list
        b"\x00\x53\x72\xc1\x02\x01\x40",  # odd map count
        b"\x00\x53\x72\xc1\x03\x02\xa3\x05",  # key overruns the map
        b"\x00\x53\x70\xc0\x03\x02\x41\x40\x00\x53\x70\xc0\x01\x00",  # duplicate header
        b"\x00\x53\x70\xc0\x03\x03\x41\xa1\x01p",  # priority that is a string
        b"\x00\x53\x73\xc0\x05\x01\xa1\x02\xff\xfe",  # invalid UTF-8 message-id
        b"\x00\x53\x75\xa0\x01x\xff",  # trailing garbage after a valid section
    ],
)
def test_garbage_raises_section_error(garbage):
    with pytest.raises(SectionError):
        scan_message(garbage)


def test_bytearray_input_accepted():
    buf = full_proton_message()
    assert scan_message(bytearray(buf)) == scan_message(buf)
    assert split_batch(bytearray(enc_described(0x75, enc_binary(buf)))) == [buf]


def test_properties_and_body_spans():
    s = scan_message(full_proton_message(b"payload"))
    a, b = s.properties_span
    props = decode(s.tail[a:b])[0]
    assert props["s"] == "text" and props["i"] == 42 and props["bin"] == b"\x01\x02"
    a, b = s.body_span
    assert decode(s.tail[a:b])[0].value == b"payload"
    plain = scan_message(
        enc_described(0x75, enc_binary(b"x")) + enc_described(0x75, enc_binary(b"y"))
    )
    assert plain.properties_span is None
    assert plain.tail[plain.body_span[0] : plain.body_span[1]] == plain.tail


# --- broker-assigned MessageId ---------------------------------------------------------


def test_new_message_id_is_azure_form():
    mid = new_message_id()
    assert len(mid) == 32 and int(mid, 16) >= 0 and mid == mid.lower() and "-" not in mid
    assert new_message_id() != mid


@pytest.mark.parametrize("with_props", [True, False])
def test_assign_message_id_patches_properties_keeps_the_rest(with_props):
    kw = dict(correlation_id="corr", subject="subj", group_id="s1") if with_props else {}
    raw = encode_proton(properties={"k": "v", "n": 7}, body=b"payload", inferred=True, **kw)
    s = scan_message(raw)
    assert s.message_id is None
    out = assign_message_id(s, "0123456789abcdef0123456789abcdef")
    assert out.message_id == "0123456789abcdef0123456789abcdef"
    assert out.size == s.size + len(out.tail) - len(s.tail)
    a, b = out.properties_span
    assert decode(out.tail[a:b])[0] == {"k": "v", "n": 7}
    a, b = out.body_span
    assert decode(out.tail[a:b])[0].value == b"payload"
    m = decode_proton(rebuild(out))
    assert m.id == "0123456789abcdef0123456789abcdef"  # an AMQP string
    assert m.body == b"payload" and m.properties == {"k": "v", "n": 7}
    if with_props:
        assert (m.correlation_id, m.subject, m.group_id) == ("corr", "subj", "s1")
    rescanned = scan_message(rebuild(out))
    assert rescanned.message_id == out.message_id and rescanned.tail == out.tail


def test_assigned_message_id_goes_after_delivery_annotations():
    da = enc_described(0x71, enc_map([(enc_symbol("k"), enc_int(3))]))
    body = enc_described(0x75, enc_binary(b"b"))
    s = assign_message_id(scan_message(da + body), "new-id")
    assert [code for code, _ in sections_of(s.tail)] == [0x71, 0x73, 0x75]
    assert s.tail[s.body_span[0] : s.body_span[1]] == body
    assert read_properties(s.tail)["message-id"] == "new-id"


def test_delivery_annotations_after_the_body_are_stored_first():
    # pyamqp encodes properties, body, footer, then delivery-annotations
    props = enc_described(0x73, enc_list([enc_string("id")]))
    body = enc_described(0x75, enc_binary(b"b"))
    footer = enc_described(0x78, enc_map([(enc_symbol("f"), enc_int(6))]))
    da = enc_described(0x71, enc_map([(enc_symbol("k"), enc_int(3))]))
    s = scan_message(props + body + footer + da)
    assert s.tail == da + props + body + footer
    assert s.tail[s.body_span[0] : s.body_span[1]] == body
    out = decode_proton(rebuild(s))
    assert out.instructions == {"k": 3} and out.id == "id" and out.body == b"b"


def _list8(items: bytes, count: int) -> bytes:
    return bytes((0xC0, len(items) + 1, count)) + items


def _list32(items: bytes, count: int) -> bytes:
    return b"\xd0" + (len(items) + 4).to_bytes(4, "big") + count.to_bytes(4, "big") + items


@pytest.mark.parametrize(
    "header",
    [
        _list8(b"\x41", 1),
        _list8(b"\x42", 1),
        _list8(b"\x40", 1),
        _list32(b"\x41", 1),
        _list32(b"\x42", 1),
        _list8(b"\x41\x50\x07\x52\x10", 3),
        _list32(b"\x42\x40\x70\x00\x00\x13\x88", 3),
        _list8(b"\x43", 1),  # a uint where durable's boolean goes: read field by field
        _list8(b"", 0),
        b"\x45",
    ],
)
@pytest.mark.parametrize(
    "properties",
    [
        _list8(b"\xa1\x03m-1", 1),
        _list32(b"\xa1\x03m-1", 1),
        _list8(b"\xa1\x00", 1),
        _list8(b"\x98" + U.bytes, 1),
        _list8(b"\xa1\x03m-1\x40\xa1\x02to", 3),
        _list32(b"\xa1\x03m-1\x40\x40\x40\x40\x40\x40\x40\x40\x40\xa1\x01s", 11),
        _list8(b"\xa1\x09m-1", 1),  # the string runs past the list: refused
        None,
    ],
)
def test_fast_path_scans_as_the_generic_path(header: bytes, properties: bytes | None):
    """The scan reads sections in the form every SDK sends (smallulong descriptors) on a fast
    path, and a header or properties list of one field inline; with ulong descriptors the
    same sections take the generic descriptor path, and header_fields reads any header field by
    field. All give the same fields, or the same error, and the properties are what the codec's
    full decoder reads."""

    def message(descriptor) -> bytes:
        parts = [descriptor(0x70) + header]
        if properties is not None:
            parts.append(descriptor(0x73) + properties)
        parts.append(descriptor(0x74) + enc_map([(enc_string("i"), enc_int(7))]))
        parts.append(descriptor(0x75) + enc_binary(b"x" * 300))
        return b"".join(parts)

    fast = message(lambda code: bytes((0x00, 0x53, code)))
    generic = message(lambda code: b"\x00\x80" + code.to_bytes(8, "big"))

    def outcome(buf: bytes) -> object:
        try:
            s = scan_message(buf)
        except SectionError as exc:
            return type(exc)  # (its text names positions, which differ between the forms)
        return {name: getattr(s, name) for name in s.__dataclass_fields__ if name != "size"}

    got = outcome(fast)
    assert got == outcome(generic)
    if properties == _list8(b"\xa1\x09m-1", 1):
        assert got is SectionError
        with pytest.raises((SectionError, IndexError, ValueError)):
            sectionfields.property_values(properties, 0, len(properties))
        return
    assert isinstance(got, dict)
    assert scan_message(fast).size == len(fast)
    # the fields as the generic readers give them
    assert (
        got["durable"],
        got["priority"],
        got["ttl_ms"],
        got["first_acquirer"],
    ) == sectionfields.header_fields(header, 0, len(header))
    decoded = decode(properties)[0] if properties is not None else []
    fields = [sectionfields._render(v) for v in decoded] + [None] * (13 - len(decoded))
    assert [got["message_id"], got["to"], got["subject"], got["session_id"]] == [
        fields[0],
        fields[2],
        fields[3],
        fields[10],
    ]
