"""largescan: a large message scanned without copying its body at once gives what
scan_transfer gives (the same stored tail, size, spans and fields; a MessageId stamped in when
the sender set none), whatever its sections look like, copied a slice per step."""

from __future__ import annotations

import proton
import pytest

from sbemu.errors import MessageSizeExceeded
from sbemu.protocol import largescan
from sbemu.protocol.codec import (
    enc_binary,
    enc_described,
    enc_list,
    enc_map,
    enc_string,
    enc_symbol,
)
from sbemu.protocol.largescan import LargeScan, scan_large
from sbemu.protocol.messages import scan_transfer

BODY = bytes(range(256)) * 40  # 10 KB, copied in slices of 4 KB below


def _ulong(code: int) -> bytes:  # a long-form section descriptor
    return b"\x00\x80" + code.to_bytes(8, "big")


HEADER = enc_described(0x70, b"\xc0\x02\x01\x41")
ANNOTATIONS = enc_described(0x72, enc_map([(enc_symbol("x-opt-partition-key"), enc_string("k"))]))
DA = enc_described(0x71, enc_map([(enc_symbol("x-opt-a"), enc_string("v"))]))
PROPS = enc_described(0x73, enc_list([enc_string("sent-id"), b"\x40", enc_string("to")]))
PROPS_NO_ID = enc_described(0x73, enc_list([b"\x40", b"\x40", enc_string("to")]))
APP = enc_described(0x74, enc_map([(enc_string("colour"), enc_string("red"))]))
DECIMAL_APP = enc_described(
    0x74, enc_map([(enc_string("d"), b"\x84" + bytes.fromhex("31c0000000000001"))])
)
DATA = enc_described(0x75, enc_binary(BODY))
FOOTER = enc_described(0x78, enc_map([]))

SHAPES = {
    "sdk": HEADER + ANNOTATIONS + PROPS + APP + DATA,
    "no id": HEADER + PROPS_NO_ID + APP + DATA,
    "no properties": HEADER + APP + DATA,
    "body only": DATA,
    "delivery annotations after the body": HEADER + PROPS_NO_ID + DATA + DA,
    "delivery annotations, no properties": DA + DATA + FOOTER,
    "long-form body": HEADER + PROPS + _ulong(0x75) + enc_binary(BODY),
    "long-form properties, no id": HEADER
    + _ulong(0x73)
    + enc_list([b"\x40", enc_string("x")])
    + DATA,
    "decimal rewritten": HEADER + PROPS + DECIMAL_APP + DATA + FOOTER,
    "value body": HEADER + PROPS_NO_ID + enc_described(0x77, enc_string("v" * 9000)),
}


def _fields(msg: object) -> dict:
    return {f: getattr(msg, f) for f in msg.__struct_fields__ if f != "view"}  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(largescan, "COPY_CHUNK", 4096)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_large_scan_stores_what_scan_transfer_stores(shape: str) -> None:
    data = SHAPES[shape]
    (want,) = scan_transfer(data, 1 << 20)
    scan = scan_large(data, 1 << 20, False, 1 << 20)
    assert isinstance(scan, LargeScan)
    steps = 1
    while not scan.step():
        steps += 1
    assert steps >= len(scan.tail) // 4096  # a slice a step
    got = _fields(scan.message())
    want = _fields(want)
    if want["message_id_assigned"]:  # ids are random: the stamped one stands where it should
        stamped = got["message_id"]
        assert len(stamped) == 32 and stamped != want["message_id"]
        assert got["tail"] == want["tail"].replace(want["message_id"].encode(), stamped.encode())
        got["tail"], got["message_id"] = want["tail"], want["message_id"]
    assert got == want


def test_a_large_scan_checks_what_scan_transfer_checks() -> None:
    data = SHAPES["sdk"]
    with pytest.raises(MessageSizeExceeded):
        scan_large(data, len(data) - 1, False, 1 << 20)
    # not a message: scan_transfer's answer (and error) for it
    not_amqp = b"\x00\x53\x77\xff" * 3
    with pytest.raises(Exception) as want:
        scan_transfer(not_amqp, 1 << 20)
    with pytest.raises(type(want.value)):
        scan_large(not_amqp, 1 << 20, False, 1 << 20)


def test_a_batch_over_the_batch_size_is_refused_before_it_is_copied() -> None:
    inner = bytes(proton.Message(id="in", body=b"b" * 100).encode())
    batch = HEADER + enc_described(0x75, enc_binary(inner)) * 50
    with pytest.raises(MessageSizeExceeded, match="batch"):
        scan_large(batch, 1 << 20, False, 1024)
