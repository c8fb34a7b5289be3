"""x-opt-partition-key as AMQP binary [issue 23 item 4].

pyamqp decodes the string the service sent into bytes, so a received message sent again
carries its partition key as binary. It is the UTF-8 text the sender set: compared with the
SessionId as text (not as hex), and stored as a string, as the service writes it."""

from __future__ import annotations

import struct

import pytest

from sbemu.errors import InvalidOperation
from sbemu.partitions.keys import partition_key_of
from sbemu.protocol.codec import (
    decode,
    enc_binary,
    enc_described,
    enc_list,
    enc_map,
    enc_null,
    enc_string,
    enc_symbol,
)
from sbemu.protocol.messages import scan_transfer
from sbemu.protocol.sections import SectionError, scan_message

BODY = enc_described(0x75, enc_binary(b"hello"))


def _message(pk: bytes, session_id: str | None = None, key: str = "x-opt-partition-key") -> bytes:
    ann = enc_described(
        0x72,
        enc_map([(enc_symbol("app"), enc_string("kept")), (enc_symbol(key), pk)]),
    )
    fields = (
        [enc_string("mid")]
        + [enc_null()] * 9
        + [enc_string(session_id) if session_id else enc_null()]
    )
    return ann + enc_described(0x73, enc_list(fields)) + BODY


def _stored(annotations: bytes, count: int) -> dict:
    """The stored annotation pairs (a map body without its constructor) as a dict."""
    return dict(
        decode(b"\xd1" + struct.pack(">II", len(annotations) + 4, 2 * count) + annotations)[0]
    )


def test_binary_partition_key_is_its_utf8_text() -> None:
    s = scan_message(_message(enc_binary("sëss".encode()), session_id="sëss"))
    assert s.partition_key == "sëss" and s.session_id == "sëss"
    # stored as a string: what a .NET receiver's (string) cast reads back
    assert _stored(s.annotations, s.annotation_count) == {
        "app": "kept",
        "x-opt-partition-key": "sëss",
    }


def test_string_partition_key_is_stored_byte_for_byte() -> None:
    raw = _message(enc_string("pk"))
    s = scan_message(raw)
    assert s.partition_key == "pk"
    assert s.annotations in raw  # not rewritten: the common path copies the bytes


def test_binary_via_partition_key() -> None:
    s = scan_message(_message(enc_binary(b"via"), key="x-opt-via-partition-key"))
    assert s.via_partition_key == "via"


def test_resent_session_message_passes_the_session_id_rule() -> None:
    (msg,) = scan_transfer(_message(enc_binary(b"s1"), session_id="s1"), 1 << 20)
    assert partition_key_of(msg.session_id, msg.partition_key, msg.message_id, False) == "s1"


def test_non_utf8_binary_partition_key_is_refused_clearly() -> None:
    with pytest.raises(SectionError, match="x-opt-partition-key must be a string"):
        scan_message(_message(enc_binary(b"\xff\xfe")))
    with pytest.raises(InvalidOperation, match="x-opt-partition-key"):
        scan_transfer(_message(enc_binary(b"\xff\xfe")), 1 << 20)
