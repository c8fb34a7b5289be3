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


# A transfer's delivery tag: proton writes an empty one as null; Azure, and go-amqp on a first
# transfer, need a zero-length binary there [issue 23].


def test_a_null_delivery_tag_becomes_an_empty_binary() -> None:
    payload = b"\x00Sw\xa1\x05hello"
    for handle, delivery_id in ((b"\x43", b"\x43"), (b"\x52\x07", b"\x70\x00\x01\x00\x00")):
        fields = [handle, delivery_id, b"\x40", b"\x43", b"\x41"]  # ..., format 0, settled
        count, got, rest = _fields(FramePadder().feed(HEADER + _frame(0x14, fields, payload))[8:])
        assert count == 11
        assert got == handle + delivery_id + b"\xa0\x00\x43\x41" + b"\x40" * 6
        assert rest == payload


def test_a_continuation_without_delivery_id_gets_the_empty_tag_too() -> None:
    # proton repeats the (empty) tag on each frame of a delivery: all agree on b""
    fields = [b"\x43", b"\x40", b"\x40", b"\x43", b"\x41", b"\x41"]  # more=true
    count, got, _ = _fields(FramePadder().feed(HEADER + _frame(0x14, fields, b"x" * 9))[8:])
    assert got == b"\x43\x40\xa0\x00\x43\x41\x41" + b"\x40" * 5


def test_other_tags_and_other_performatives_are_untouched() -> None:
    tagged = [b"\x43", b"\x43", b"\xa0\x02ab", b"\x43"]
    _, got, _ = _fields(FramePadder().feed(HEADER + _frame(0x14, tagged))[8:])
    assert got == b"\x43\x43\xa0\x02ab\x43" + b"\x40" * 7
    # a disposition's third field (last) may be null: not a tag
    disposition = [b"\x41", b"\x43", b"\x40", b"\x41"]
    _, got, _ = _fields(FramePadder().feed(HEADER + _frame(0x15, disposition))[8:])
    assert got == b"\x41\x43\x40\x41\x40\x40"
    # a transfer whose fields stop before the tag is only padded (no tag to rewrite)
    _, got, _ = _fields(FramePadder().feed(HEADER + _frame(0x14, [b"\x43", b"\x43"]))[8:])
    assert got == b"\x43\x43" + b"\x40" * 9


def test_a_full_transfer_with_a_null_tag_is_rewritten_and_a_wide_list_stays_wide() -> None:
    full = [b"\x43", b"\x43", b"\x40"] + [b"\x40"] * 8
    out = FramePadder().feed(HEADER + _frame(0x14, full, b"p"))[8:]
    count, got, rest = _fields(out)
    assert (count, got, rest) == (11, b"\x43\x43\xa0\x00" + b"\x40" * 8, b"p")
    wide = FramePadder().feed(HEADER + _frame(0x14, full[:4], b"p", wide=True))[8:]
    body = wide[8:]
    assert wide[:4] == struct.pack(">I", len(wide))
    assert body[3] == 0xC0 and body[5] == 11  # re-encoded as list8: it fits
    assert body[6:-1] == b"\x43\x43\xa0\x00\x40" + b"\x40" * 7


def test_the_empty_tag_decodes_as_an_empty_binary_in_proton() -> None:
    from proton import Data

    fields = [b"\x43", b"\x43", b"\x40", b"\x43", b"\x41"]
    out = FramePadder().feed(HEADER + _frame(0x14, fields))[8:]
    data = Data()
    data.decode(out[8:])
    data.rewind()
    data.next()
    data.enter()
    data.next()  # the descriptor
    data.next()  # the list
    data.enter()
    values = []
    while data.next():
        values.append((data.type(), data.get_object()))
    assert values[2] == (Data.BINARY, b"")


# A delivery's transfer as proton writes it (handle, delivery-id, a 16-byte tag, format, and
# settled/more when set) takes the padder's quick path: the same bytes as the general one.


def test_proton_shaped_transfers_are_padded_like_any_frame() -> None:
    from sbemu.protocol import frames

    tag = b"\xa0\x10" + bytes(range(16))
    payload = b"\x00Sw\xa1\x05hello" * 90
    stream = HEADER
    expected = HEADER
    for handle in (b"\x43", b"\x52\x03"):
        for delivery_id in (b"\x43", b"\x52\xfe", b"\x70\x00\x01\x00\x00"):
            for tail in ([b"\x43"], [b"\x43", b"\x41"], [b"\x43", b"\x42", b"\x41"]):
                fields = [handle, delivery_id, tag, *tail]
                stream += _frame(0x14, fields, payload)
                items = b"".join(fields) + b"\x40" * (11 - len(fields))
                body = b"\x00\x53\x14" + bytes((0xC0, len(items) + 1, 11)) + items + payload
                expected += struct.pack(">I", 8 + len(body)) + b"\x02\x00\x00\x00" + body
    assert FramePadder().feed(stream) == expected
    general: list[bytes | memoryview] = []  # frame by frame through the general path
    view, pos = memoryview(stream), 8
    while pos < len(stream):
        size = struct.unpack_from(">I", stream, pos)[0]
        frames._pad_frame(stream, view, pos, size, general)
        pos += size
    assert HEADER + b"".join(general) == expected
    for step in (5, 13, 100):  # and split anywhere
        padder = FramePadder()
        parts = [padder.feed(bytearray(stream[i : i + step])) for i in range(0, len(stream), step)]
        assert b"".join(parts) == expected
    # a frame the padding would push over the peer's limit goes out as it is
    one = _frame(0x14, [b"\x43", b"\x43", tag, b"\x43"], payload)
    padder = FramePadder()
    padder.limit = len(one) + 6
    assert padder.feed(HEADER + one) == HEADER + one
    padder = FramePadder()
    padder.limit = len(one) + 7
    assert len(padder.feed(HEADER + one)) == len(HEADER + one) + 7
