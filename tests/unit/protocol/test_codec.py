"""Tests for sbemu.protocol.codec, cross-checked against proton's encoder/decoder."""

from __future__ import annotations

import struct
import uuid

import proton
import pytest

from sbemu.protocol import codec
from sbemu.protocol.codec import (
    DecodeError,
    Described,
    Symbol,
    Timestamp,
    decode,
    enc_binary,
    enc_bool,
    enc_byte,
    enc_described,
    enc_int,
    enc_list,
    enc_long,
    enc_long_array,
    enc_map,
    enc_map_body,
    enc_null,
    enc_short,
    enc_string,
    enc_symbol,
    enc_symbol_array,
    enc_timestamp,
    enc_timestamp_array,
    enc_ubyte,
    enc_uint,
    enc_ulong,
    enc_ushort,
    enc_uuid,
    enc_uuid_array,
    encode,
    skip,
)

U = uuid.UUID("12345678-1234-5678-9abc-def012345678")


def proton_bytes(put) -> bytes:
    """Encode one value with proton.Data; put receives the Data object."""
    d = proton.Data()
    put(d)
    return bytes(d.encode())


def proton_value(buf: bytes):
    """Decode one value with proton.Data."""
    d = proton.Data()
    d.decode(buf)
    d.rewind()
    d.next()
    value = d.get_object()
    # proton hands binaries out as a memoryview into its own buffer: copy it
    # while the Data object is still alive.
    return bytes(value) if isinstance(value, memoryview) else value


# --- decoding proton's encodings ------------------------------------------------

PROTON_CASES = [
    (lambda d: d.put_null(), None),
    (lambda d: d.put_bool(True), True),
    (lambda d: d.put_bool(False), False),
    (lambda d: d.put_ubyte(200), 200),
    (lambda d: d.put_byte(-5), -5),
    (lambda d: d.put_ushort(65000), 65000),
    (lambda d: d.put_short(-30000), -30000),
    (lambda d: d.put_uint(0), 0),
    (lambda d: d.put_uint(7), 7),
    (lambda d: d.put_uint(4_000_000_000), 4_000_000_000),
    (lambda d: d.put_int(-7), -7),
    (lambda d: d.put_int(-2_000_000_000), -2_000_000_000),
    (lambda d: d.put_ulong(0), 0),
    (lambda d: d.put_ulong(9), 9),
    (lambda d: d.put_ulong(2**64 - 1), 2**64 - 1),
    (lambda d: d.put_long(-100), -100),
    (lambda d: d.put_long(-(2**63)), -(2**63)),
    (lambda d: d.put_float(1.5), 1.5),
    (lambda d: d.put_double(-2.25), -2.25),
    (lambda d: d.put_char("é"), "é"),
    (lambda d: d.put_timestamp(1_700_000_000_123), Timestamp(1_700_000_000_123)),
    (lambda d: d.put_uuid(U), U),
    (lambda d: d.put_binary(b"\x00\x01"), b"\x00\x01"),
    (lambda d: d.put_binary(b"x" * 300), b"x" * 300),
    (lambda d: d.put_string("héllo"), "héllo"),
    (lambda d: d.put_string("s" * 300), "s" * 300),
    (lambda d: d.put_symbol("sym"), Symbol("sym")),
    (lambda d: d.put_symbol("y" * 300), Symbol("y" * 300)),
]


@pytest.mark.parametrize("put,expected", PROTON_CASES)
def test_decode_matches_proton(put, expected):
    buf = proton_bytes(put)
    value, end = decode(buf)
    assert end == len(buf) == skip(buf, 0)
    assert value == expected
    assert type(value) is type(expected)


def test_decode_timestamp_and_symbol_types():
    ts, _ = decode(proton_bytes(lambda d: d.put_timestamp(5)))
    assert isinstance(ts, Timestamp) and isinstance(ts, int) and ts == 5
    sym, _ = decode(proton_bytes(lambda d: d.put_symbol("a")))
    assert isinstance(sym, Symbol) and isinstance(sym, str) and sym == "a"


def test_decode_decimals_raw():
    for code, width in ((0x74, 4), (0x84, 8), (0x94, 16)):
        raw = bytes(range(width))
        assert decode(bytes([code]) + raw) == (raw, 1 + width)


def test_decode_list_map_described_from_proton():
    msg = proton.Message(
        body=[1, "two", None, [3]],
        properties={"k": 1, "s": "v"},
        annotations={Symbol("x-opt-a"): 5},
    )
    buf = bytes(msg.encode())
    pos, sections = 0, []
    while pos < len(buf):
        value, end = decode(buf, pos)
        assert skip(buf, pos) == end
        sections.append(value)
        pos = end
    by_code = {s.descriptor: s.value for s in sections}
    assert all(isinstance(s, Described) for s in sections)
    assert by_code[0x74] == {"k": 1, "s": "v"}
    assert by_code[0x72] == {"x-opt-a": 5}
    assert by_code[0x77] == [1, "two", None, [3]]


def test_decode_arrays_from_proton():
    def arr(kind, values, put):
        def f(d):
            d.put_array(False, kind)
            d.enter()
            for v in values:
                put(d, v)
            d.exit()

        return proton_bytes(f)

    buf = arr(proton.Data.SYMBOL, ["a", "bb"], proton.Data.put_symbol)
    assert decode(buf) == (["a", "bb"], len(buf))
    assert all(type(v) is Symbol for v in decode(buf)[0])
    buf = arr(proton.Data.LONG, [1, -2, 2**40], proton.Data.put_long)
    assert decode(buf)[0] == [1, -2, 2**40]
    buf = arr(proton.Data.UUID, [U, U], proton.Data.put_uuid)
    assert decode(buf)[0] == [U, U]
    buf = arr(proton.Data.SYMBOL, [], proton.Data.put_symbol)
    assert decode(buf) == ([], len(buf))


def test_decode_described_array():
    # array8 of described ubytes: descriptor smallulong 7, element constructor ubyte
    body = b"\x00\x53\x07\x50" + b"\x01\x02"
    buf = bytes([0xE0, len(body) + 1, 2]) + body
    assert decode(buf) == ([Described(7, 1), Described(7, 2)], len(buf))
    assert skip(buf, 0) == len(buf)


def test_described_symbolic_descriptor():
    buf = b"\x00" + enc_symbol("amqp:header:list") + enc_list([enc_bool(True)])
    value, end = decode(buf)
    assert end == len(buf)
    assert value == Described(Symbol("amqp:header:list"), [True])
    assert isinstance(value.descriptor, Symbol)


def test_decode_at_offset():
    buf = b"\xff\xff" + enc_string("x") + enc_long(300)
    v, p = decode(buf, 2)
    assert (v, p) == ("x", 5)
    assert decode(buf, p) == (300, len(buf))


# --- encoders: exact bytes (smallest encoding) -----------------------------------


def test_scalar_encoders_smallest_form():
    assert enc_null() == b"\x40"
    assert enc_bool(True) == b"\x41" and enc_bool(False) == b"\x42"
    assert enc_ubyte(7) == b"\x50\x07"
    assert enc_ushort(258) == b"\x60\x01\x02"
    assert enc_uint(0) == b"\x43"
    assert enc_uint(255) == b"\x52\xff"
    assert enc_uint(256) == b"\x70\x00\x00\x01\x00"
    assert enc_ulong(0) == b"\x44"
    assert enc_ulong(0x53) == b"\x53\x53"
    assert enc_ulong(256) == b"\x80" + struct.pack(">Q", 256)
    assert enc_byte(-1) == b"\x51\xff"
    assert enc_short(-2) == b"\x61\xff\xfe"
    assert enc_int(-128) == b"\x54\x80"
    assert enc_int(128) == b"\x71\x00\x00\x00\x80"
    assert enc_long(127) == b"\x55\x7f"
    assert enc_long(-129) == b"\x81" + struct.pack(">q", -129)
    assert enc_timestamp(1) == b"\x83" + struct.pack(">q", 1)
    assert enc_uuid(U) == b"\x98" + U.bytes
    assert enc_binary(b"ab") == b"\xa0\x02ab"
    assert enc_binary(b"a" * 256)[:5] == b"\xb0\x00\x00\x01\x00"
    assert enc_string("é") == b"\xa1\x02\xc3\xa9"
    assert enc_string("a" * 256)[:5] == b"\xb1\x00\x00\x01\x00"
    assert enc_symbol("ab") == b"\xa3\x02ab"
    assert enc_symbol("a" * 256)[:5] == b"\xb3\x00\x00\x01\x00"


@pytest.mark.parametrize(
    "fn,bad",
    [
        (enc_ubyte, 256),
        (enc_ushort, -1),
        (enc_uint, 2**32),
        (enc_uint, -1),
        (enc_ulong, 2**64),
        (enc_byte, 128),
        (enc_short, 2**15),
        (enc_int, 2**31),
        (enc_long, 2**63),
        (enc_timestamp, -(2**63) - 1),
    ],
)
def test_encoder_range_errors(fn, bad):
    with pytest.raises(ValueError):
        fn(bad)


def test_enc_symbol_rejects_non_ascii():
    with pytest.raises(UnicodeEncodeError):
        enc_symbol("é")


@pytest.mark.parametrize(
    "encoded,expected",
    [
        (enc_ubyte(7), 7),
        (enc_ushort(9), 9),
        (enc_uint(70000), 70000),
        (enc_ulong(2**40), 2**40),
        (enc_byte(-3), -3),
        (enc_short(-300), -300),
        (enc_int(-70000), -70000),
        (enc_long(-(2**40)), -(2**40)),
        (enc_uuid(U), U),
        (enc_binary(b"\x00" * 300), b"\x00" * 300),
        (enc_string("ü" * 200), "ü" * 200),
        (enc_symbol("s" * 300), "s" * 300),
        (enc_symbol_array(["a", "b" * 300]), ["a", "b" * 300]),
        (enc_uuid_array([U, uuid.UUID(int=1)]), [U, uuid.UUID(int=1)]),
        (enc_long_array([1, -1, 2**62]), [1, -1, 2**62]),
        (enc_long_array(list(range(40))), list(range(40))),
    ],
)
def test_encoders_decode_in_proton(encoded, expected):
    got = proton_value(encoded)
    if isinstance(got, proton.Array):
        got = list(got.elements)
    assert got == expected
    assert decode(encoded) == (expected, len(encoded))


def test_timestamp_encoding_decodes_as_proton_timestamp():
    got = proton_value(enc_timestamp(1_700_000_000_000))
    assert isinstance(got, proton.timestamp) and got == 1_700_000_000_000
    arr = enc_timestamp_array([1, 2])
    assert decode(arr) == ([Timestamp(1), Timestamp(2)], len(arr))
    assert list(proton_value(arr).elements) == [1, 2]


def test_enc_list_never_list0_and_switches_to_list32():
    assert enc_list([]) == b"\xc0\x01\x00"
    small = enc_list([enc_null()] * 3)
    assert small == b"\xc0\x04\x03\x40\x40\x40"
    big = enc_list([enc_string("x" * 300)])
    assert big[0] == 0xD0
    assert decode(big) == (["x" * 300], len(big))
    many = enc_list([enc_null()] * 256)  # count > 255 forces list32
    assert many[0] == 0xD0 and decode(many)[0] == [None] * 256
    edge = enc_list([enc_binary(b"x" * 252)])  # body 254 bytes: still list8
    assert edge[0] == 0xC0 and decode(edge)[0] == [b"x" * 252]
    edge = enc_list([enc_binary(b"x" * 253)])  # body 255 bytes: size byte would be 256
    assert edge[0] == 0xD0 and decode(edge)[0] == [b"x" * 253]


def test_enc_map_and_map_body():
    m = enc_map([(enc_string("a"), enc_int(1)), (enc_symbol("b"), enc_null())])
    assert m[0] == 0xC1 and m[2] == 4
    assert decode(m)[0] == {"a": 1, "b": None}
    assert proton_value(m) == {"a": 1, proton.symbol("b"): None}
    body = enc_string("k") + enc_long(5)
    assert enc_map_body(body, 1) == enc_map([(enc_string("k"), enc_long(5))])
    big = enc_map([(enc_string(str(i)), enc_long(i)) for i in range(200)])
    assert big[0] == 0xD1 and decode(big)[0] == {str(i): i for i in range(200)}
    assert enc_map([]) == b"\xc1\x01\x00"


def test_enc_described():
    assert enc_described(0x70, enc_list([])) == b"\x00\x53\x70\xc0\x01\x00"
    big = enc_described(0x137000000001, enc_null())
    assert big == b"\x00\x80" + struct.pack(">Q", 0x137000000001) + b"\x40"
    assert decode(big) == (Described(0x137000000001, None), len(big))


def test_encode_picks_types():
    value = {
        "n": None,
        "b": True,
        "i": 3,
        "f": 1.25,
        "s": "str",
        "sym": Symbol("sym"),
        "t": Timestamp(10),
        "u": U,
        "bin": b"\x01",
        "l": [1, [2]],
        "d": Described(0x77, "v"),
        "sd": Described(Symbol("x:y"), 1),
    }
    buf = encode(value)
    back, end = decode(buf)
    assert end == len(buf)
    assert back == value
    assert type(back["t"]) is Timestamp and type(back["sym"]) is Symbol
    assert type(back["b"]) is bool
    assert encode(3) == enc_long(3)
    assert encode(True) == b"\x41"
    assert encode(1.5) == b"\x82" + struct.pack(">d", 1.5)
    p = proton_value(encode({"t": Timestamp(10), "s": Symbol("q"), "l": 2**40}))
    assert isinstance(p["t"], proton.timestamp) and isinstance(p["s"], proton.symbol)
    assert isinstance(p["l"], int) and p["l"] == 2**40
    with pytest.raises(TypeError):
        encode(object())


# --- skip --------------------------------------------------------------------------


def test_skip_every_width_category():
    samples = [
        b"\x40",
        b"\x50\x01",
        b"\x60\x00\x01",
        b"\x70\x00\x00\x00\x01",
        b"\x81" + b"\x00" * 8,
        b"\x98" + b"\x00" * 16,
        enc_string("abc"),
        enc_string("a" * 300),
        enc_list([enc_long(1)]),
        enc_list([enc_string("a" * 300)]),
        enc_symbol_array(["a"]),
        enc_long_array(list(range(40))),
        enc_described(0x75, enc_binary(b"xyz")),
        b"\x00" + enc_symbol("d") + enc_described(3, enc_null()),  # nested described
        b"\x57\x01",  # unknown code in the 1-byte category: skippable by width [AMQP 1.0 1.2]
    ]
    joined = b"".join(samples)
    pos = 0
    for s in samples:
        end = skip(joined, pos)
        assert end == pos + len(s)
        pos = end


# --- errors ----------------------------------------------------------------------


def _complex_value() -> bytes:
    return (
        encode(
            {
                "a": [1, "two", U, Timestamp(5), b"bin"],
                Symbol("s"): Described(0x70, [True, None]),
                "big": "x" * 300,
            }
        )
        + b""
    )


def test_truncation_raises_decode_error_at_every_offset():
    buf = _complex_value()
    arr = enc_symbol_array(["abc", "de"]) + b""
    for whole in (buf, arr, enc_long(2**40), enc_uuid(U)):
        assert decode(whole)[1] == len(whole)
        for cut in range(len(whole)):
            with pytest.raises(DecodeError):
                decode(whole[:cut])
            with pytest.raises(DecodeError):
                skip(whole[:cut], 0)


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x01",  # constructor below 0x40
        b"\x47",  # unused code
        b"\xe1\x00",  # reserved array code: decode refuses it
        b"\xc0\x05\x09\x40\x40\x40\x40",  # count larger than size
        b"\xc0\x03\x01\x40\x40",  # element ends before the declared size
        b"\xc1\x02\x01\x40",  # odd map element count
        b"\xc1\x05\x02\xc0\x01\x00\x40",  # unhashable map key (a list)
        b"\xe0\x03\x01\x00\x40",  # described array without element constructor
        b"\x73\xff\xff\xff\xff",  # char out of range
        b"\xa1\x02\xff\xfe",  # invalid UTF-8
        b"",
    ],
)
def test_garbage_raises_decode_error(garbage):
    with pytest.raises(DecodeError):
        decode(garbage)


def test_decode_error_is_value_error():
    assert issubclass(DecodeError, ValueError)
    assert issubclass(codec.DecodeError, ValueError)
