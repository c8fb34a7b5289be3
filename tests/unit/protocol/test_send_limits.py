"""Checks before work on the send path (issue 35): the batch limit before a transfer is split,
Azure's 4,500 messages in a batch, its header and property quotas (64 KB, 32 KB), each refused
before the sections they guard are read; and batches written with long-form (ulong, symbolic)
section descriptors split like the smallulong form every SDK sends."""

from __future__ import annotations

import time

import proton
import pytest

from sbemu.errors import MessageSizeExceeded, QuotaExceeded
from sbemu.protocol.codec import enc_binary, enc_described, enc_map, enc_string, enc_symbol
from sbemu.protocol.messages import scan_transfer
from sbemu.protocol.sections import (
    MAX_BODY_SECTIONS,
    MAX_HEADER_BYTES,
    MAX_PROPERTY_BYTES,
    starts_section,
)

MB = 1024 * 1024
HEADER = b"\x00\x53\x70\xc0\x02\x01\x41"  # header [durable=true]
TINY = b"\x00\x53\x75\xa0\x06" + b"\x00\x53\x77\xa1\x01x"  # a data section holding a message


def _data(payload: bytes) -> bytes:
    return enc_described(0x75, enc_binary(payload))


def _props(pairs: list[tuple[str, bytes]]) -> bytes:
    return enc_described(0x74, enc_map([(enc_string(k), v) for k, v in pairs]))


def _long_form(message: bytes) -> bytes:
    """`message` with every section descriptor `00 53 <code>` written `00 80 <ulong code>`."""
    out, pos = [], 0
    while pos < len(message):
        assert message[pos : pos + 2] == b"\x00\x53"
        code = message[pos + 2]
        nxt = _next_section(message, pos + 3)
        out.append(b"\x00\x80" + code.to_bytes(8, "big") + message[pos + 3 : nxt])
        pos = nxt
    return b"".join(out)


def _next_section(message: bytes, vpos: int) -> int:
    from sbemu.protocol.codec import _skip

    return _skip(message, vpos)


def _inner(i: int) -> bytes:
    return bytes(proton.Message(id=f"m-{i}", body=f"body-{i}", properties={"i": i}).encode())


def test_a_batch_past_the_batch_limit_is_refused_before_it_is_split() -> None:
    # the probe, at full size: a header then 9,000,000 tiny data sections (99 MB)
    data = HEADER + TINY * 9_000_000
    started = time.perf_counter()
    with pytest.raises(MessageSizeExceeded, match=r"batch \(size 99000007 bytes\)"):
        scan_transfer(data, 100 * MB, False, MB)
    assert time.perf_counter() - started < 0.05  # was 16-19 s in the server


def test_more_than_4500_messages_in_a_batch_are_refused_at_the_4501st() -> None:
    ok = HEADER + TINY * MAX_BODY_SECTIONS
    assert len(scan_transfer(ok, MB, False, MB)) == MAX_BODY_SECTIONS
    over = HEADER + TINY * 90_000  # 990 KB: within the batch limit, 20 times Azure's count
    started = time.perf_counter()
    with pytest.raises(QuotaExceeded, match="more than 4500"):
        scan_transfer(over, MB, False, MB)
    assert time.perf_counter() - started < 0.05  # was 1.4 s


def test_a_plain_message_with_too_many_body_sections_is_refused() -> None:
    data = _data(b"x") * (MAX_BODY_SECTIONS + 1)  # no batch shape: one message's body
    with pytest.raises(QuotaExceeded):
        scan_transfer(data, 100 * MB, False, MB)
    (msg,) = scan_transfer(_data(b"x") * MAX_BODY_SECTIONS, 100 * MB, False, MB)
    a, b = msg.body_span
    assert b - a == 6 * MAX_BODY_SECTIONS


@pytest.mark.parametrize(
    ("size", "quota"), [(MAX_PROPERTY_BYTES + 1, "one property"), (200 * 1024, "message header")]
)
def test_one_property_past_32_kb_is_refused(size: int, quota: str) -> None:
    data = _props([("big", enc_string("v" * size))]) + _data(b"x")
    with pytest.raises(MessageSizeExceeded, match=quota):
        scan_transfer(data, 100 * MB, False, MB)


def test_a_key_past_32_kb_is_refused() -> None:
    data = _props([("k" * 60_000, enc_string("v"))]) + _data(b"x")
    with pytest.raises(MessageSizeExceeded, match=r"one property \(32768\)"):
        scan_transfer(data, 100 * MB, False, MB)


def test_properties_within_the_quotas_are_taken() -> None:
    near = MAX_PROPERTY_BYTES - 100
    data = _props([("a", enc_string("v" * near)), ("b", enc_string("w" * 30_000))]) + _data(b"x")
    (msg,) = scan_transfer(data, MB, False, MB)
    assert msg.properties_span is not None


@pytest.mark.parametrize("count", [10_000, 1_000_000])  # ~130 KB, ~12 MB of properties
def test_many_properties_past_64_kb_are_refused_before_they_are_read(count: int) -> None:
    data = _props([(f"p{i}", enc_string("v")) for i in range(count)]) + _data(b"x")
    started = time.perf_counter()
    with pytest.raises(MessageSizeExceeded, match=r"message header \(65536\)"):
        scan_transfer(data, 100 * MB, False, MB)
    assert time.perf_counter() - started < 0.05


def test_the_header_quota_counts_annotations_and_properties_together() -> None:
    ann = enc_described(0x72, enc_map([(enc_symbol("x-a"), enc_string("a" * 30_000))]))
    props = enc_described(0x73, b"\xc0\x05\x01\xa1\x02id")
    app = _props([("b", enc_string("b" * 30_000)), ("c", enc_string("c" * 6_000))])
    assert len(ann) + len(props) + len(app) > MAX_HEADER_BYTES
    with pytest.raises(MessageSizeExceeded, match="65536"):
        scan_transfer(ann + props + app + _data(b"x"), MB, False, MB)
    (msg,) = scan_transfer(ann + props + _data(b"x" * 900_000), MB, False, MB)  # body: no count
    assert msg.message_id == "id"


def test_a_batch_whose_message_passes_the_quota_is_refused_whole() -> None:
    big = bytes(proton.Message(id="big", properties={"p": "v" * 40_000}).encode())
    envelope = _data(_inner(0)) + _data(big) + _data(_inner(2))
    with pytest.raises(MessageSizeExceeded, match="32768"):
        scan_transfer(envelope, MB, False, MB)


@pytest.mark.parametrize("form", ["ulong", "symbolic"])
def test_a_batch_of_long_form_messages_is_split(form: str) -> None:
    if form == "ulong":
        parts = [_long_form(_inner(i)) for i in range(20)]
    else:
        parts = [_symbolic(_inner(i)) for i in range(20)]
    assert all(not p.startswith(b"\x00\x53") for p in parts)
    got = scan_transfer(b"".join(_data(p) for p in parts), MB, False, MB)
    assert [m.message_id for m in got] == [f"m-{i}" for i in range(20)]
    # and stored in the smallulong form the SDKs read (contract 1.6)
    assert all(m.tail.startswith(b"\x00\x53") for m in got)


def test_a_long_form_envelope_past_the_batch_limit_is_refused_before_the_scan() -> None:
    part = _long_form(bytes(proton.Message(body="x").encode()))
    data = HEADER + _data(part) * 80_000
    started = time.perf_counter()
    with pytest.raises(MessageSizeExceeded, match="batch"):
        scan_transfer(data, 100 * MB, False, MB)
    assert time.perf_counter() - started < 0.05


_NAMES = {
    0x70: b"amqp:header:list",
    0x73: b"amqp:properties:list",
    0x74: b"amqp:application-properties:map",
    0x77: b"amqp:amqp-value:*",
}


def _symbolic(message: bytes) -> bytes:
    out, pos = [], 0
    while pos < len(message):
        code = message[pos + 2]
        nxt = _next_section(message, pos + 3)
        name = _NAMES[code]
        out.append(b"\x00\xa3" + bytes((len(name),)) + name + message[pos + 3 : nxt])
        pos = nxt
    return b"".join(out)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\x00\x53\x70", True),
        (b"\x00\x53\x79", False),
        (b"\x00\x80" + (0x77).to_bytes(8, "big"), True),
        (b"\x00\x80" + (0x1_0000_0077).to_bytes(8, "big"), False),  # another domain
        (b"\x00\x80\x00\x00", False),  # cut short
        (b"\x00\xa3\x11amqp:amqp-value:*", True),
        (b"\x00\xa3\x05amqp:", False),
        (b"\x00\xb3\x00\x00\x00\x11amqp:amqp-value:*", True),
        (b"\x01\x53\x70", False),
    ],
)
def test_starts_section_reads_every_descriptor_form(raw: bytes, expected: bool) -> None:
    assert starts_section(raw, 0, len(raw)) is expected


def test_a_stored_message_rebuilt_with_sbemus_additions_is_not_held_to_the_send_quotas() -> None:
    """What sbemu adds to a stored message (dead-letter reason and description) may take it
    past 64 KB: routing it again (view_of_record, a resubmit) must not fail on Azure's send
    quotas, which the sender already met."""
    from sbemu.protocol.sections import HeaderTooLarge, scan_message

    sent = _props([("a", enc_string("v" * 30_000)), ("b", enc_string("w" * 30_000))])
    extra = _props(
        [("a", enc_string("v" * 30_000)), ("b", enc_string("w" * 30_000))]
        + [("DeadLetterErrorDescription", enc_string("d" * 8_000))]
    )
    assert len(sent) < MAX_HEADER_BYTES < len(extra)
    with pytest.raises(HeaderTooLarge):
        scan_message(extra + _data(b"x"))
    assert scan_message(extra + _data(b"x"), quotas=False).properties_span is not None
