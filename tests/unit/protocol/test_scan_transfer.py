"""scan_transfer: one transfer into the messages to store. The scan notes whether the first
body section could be a batch envelope's (a data section whose payload starts like an encoded
message); only then is the transfer split and each part scanned [contract 3.4]."""

from __future__ import annotations

import proton
import pytest

from sbemu.protocol.codec import enc_binary, enc_described, enc_map, enc_string, enc_symbol
from sbemu.protocol.messages import scan_transfer


def _data(payload: bytes) -> bytes:
    return enc_described(0x75, enc_binary(payload))


def _inner(i: int, size: int = 10) -> bytes:
    return bytes(proton.Message(id=f"in-{i}", body=b"b" * size).encode())


@pytest.mark.parametrize("size", [10, 300])  # vbin8 and vbin32 parts
def test_batch_envelope_split_into_its_messages(size: int) -> None:
    envelope = b"".join(_data(_inner(i, size)) for i in range(3))
    got = scan_transfer(envelope, 1 << 20)
    assert [m.message_id for m in got] == ["in-0", "in-1", "in-2"]


def test_envelope_after_header_and_delivery_annotations_still_split() -> None:
    header = enc_described(0x70, b"\xc0\x02\x01\x41")
    da = enc_described(0x71, enc_map([(enc_symbol("x-opt-a"), enc_string("v"))]))
    envelope = header + da + b"".join(_data(_inner(i)) for i in range(2))
    got = scan_transfer(envelope, 1 << 20)
    assert [m.message_id for m in got] == ["in-0", "in-1"]


@pytest.mark.parametrize(
    "body",
    [
        _data(b"plain bytes"),
        _data(b"\x00\x53"),  # too short to be a message
        _data(b"\x00\x53\x70") + enc_described(0x78, enc_map([])),  # ... and a footer
        _data(b"\x00\x53\x79whatever"),  # not a section code
        _data(b"\x00\x53\x77\xff"),  # starts like one, does not scan: one message after all
        enc_described(0x77, enc_string("value body")),
    ],
)
def test_a_body_that_is_no_envelope_is_one_message(body: bytes) -> None:
    raw = enc_described(0x73, b"\xc0\x05\x01\xa1\x02id") + body
    (msg,) = scan_transfer(raw, 1 << 20)
    assert msg.message_id == "id"
    a, b = msg.body_span
    assert body.startswith(msg.tail[a:b]) and msg.tail.endswith(body)  # (a footer is no body)


def test_a_message_whose_body_is_a_message_is_taken_as_an_envelope() -> None:
    # (the shape is what marks an envelope: the binding gives no message-format)
    (msg,) = scan_transfer(_data(_inner(7)), 1 << 20)
    assert msg.message_id == "in-7"
