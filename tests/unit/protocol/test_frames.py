"""FramePadder: performatives padded to their full field count, payloads untouched, any split."""

from __future__ import annotations

import struct

from sbemu.protocol.frames import FIELD_COUNTS, FramePadder

HEADER = b"AMQP\x00\x01\x00\x00"


def _frame(code: int, fields: list[bytes], payload: bytes = b"", wide: bool = False) -> bytes:
    items = b"".join(fields)
    if wide:
        lst = b"\xd0" + struct.pack(">II", len(items) + 4, len(fields)) + items
    elif not fields:
        lst = b"\x45"
    else:
        lst = bytes((0xC0, len(items) + 1, len(fields))) + items
    body = b"\x00\x53" + bytes((code,)) + lst + payload
    return struct.pack(">I", 8 + len(body)) + b"\x02\x00\x00\x00" + body


def _fields(frame: bytes) -> tuple[int, bytes, bytes]:
    """(field count, encoded fields, payload) of a padded frame."""
    body = frame[8:]
    assert frame[:4] == struct.pack(">I", len(frame))
    assert body[3] == 0xC0
    size, count = body[4], body[5]
    return count, body[6 : 5 + size], body[5 + size :]


def test_transfer_is_padded_and_its_payload_kept() -> None:
    payload = bytes(range(256)) * 5
    transfer = _frame(0x14, [b"\x43", b"\x52\x07"], payload)  # handle 0, delivery-id 7
    out = FramePadder().feed(HEADER + transfer)
    assert out[:8] == HEADER
    count, fields, rest = _fields(out[8:])
    assert count == FIELD_COUNTS[0x14] == 11
    assert fields == b"\x43\x52\x07" + b"\x40" * 9
    assert rest == payload


def test_split_anywhere_gives_the_same_bytes() -> None:
    stream = HEADER
    for i in range(40):
        code = (0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18)[i % 9]
        fields = [b"\x52" + bytes((i,))] * (i % 4)
        stream += _frame(code, fields, bytes([i]) * (i * 37) if code == 0x14 else b"", i % 5 == 0)
        if i % 7 == 0:
            stream += b"\x00\x00\x00\x08\x02\x00\x00\x00"  # heartbeat: passed through
    whole = FramePadder().feed(stream)
    for step in (1, 7, 64, 1000):
        padder = FramePadder()
        parts = [padder.feed(bytearray(stream[i : i + step])) for i in range(0, len(stream), step)]
        assert b"".join(parts) == whole
    # a full frame is never touched
    full = _frame(0x17, [b"\x40"])
    assert FramePadder().feed(HEADER + full) == HEADER + full
