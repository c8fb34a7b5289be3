"""Decimals in application properties, written the way the service writes them [issue 23
item 3]; see sbemu/protocol/decimals.py for the layout and where it was read."""

from __future__ import annotations

import struct
from decimal import Decimal

import pytest
from azure.servicebus._pyamqp import _decode as pyamqp_decode
from azure.servicebus._pyamqp import _encode as pyamqp_encode

from sbemu.errors import ArgumentOutOfRange
from sbemu.protocol.codec import decode, enc_described, enc_int, enc_map, enc_string, enc_symbol
from sbemu.protocol.decimals import DecimalRangeError, rewrite_decimals, service_decimal128
from sbemu.protocol.messages import scan_transfer
from sbemu.protocol.sections import PropertyValueError, read_application_properties, scan_message


def pyamqp_decimal(value: Decimal) -> bytes:
    """What azure-servicebus 7.15 sends for a Decimal (0x94 + IEEE 754 binary integer)."""
    out = bytearray()
    pyamqp_encode.encode_decimal128(out, value)
    return bytes(out)


def dotnet_read(raw16: bytes) -> Decimal:
    """Microsoft.Azure.Amqp's DecodeDecimal128 + CreateDecimal, as written in its source."""
    negative = raw16[0] & 0x80
    exponent = (((raw16[0] & 0x7F) << 7) | ((raw16[1] & 0xFE) >> 1)) - 6176
    coefficient = int.from_bytes(raw16[4:16], "big")
    sign = 1 if negative else 0
    if exponent <= 0:
        scale = (-exponent) & 0xFF  # (byte)-exponent
        assert scale <= 28, "new decimal(...) would throw"
        return Decimal((sign, tuple(int(d) for d in str(coefficient)), -scale))
    return Decimal((sign, tuple(int(d) for d in str(coefficient * 10**exponent)), 0))


def dotnet_write(value: Decimal) -> bytes:
    """Microsoft.Azure.Amqp's DecimalEncoding.EncodeValue for a System.Decimal."""
    sign, digits, exponent = value.as_tuple()
    scale = -int(exponent)
    biased = 6176 - scale
    coefficient = int("".join(map(str, digits)) or "0")
    head = bytes(((0x80 if sign else 0) | (biased >> 9), ((biased & 0x7F) << 1) & 0xFF, 0, 0))
    return head + coefficient.to_bytes(12, "big")


VALUES = [
    "1.2345",
    "-1.2345",
    "0",
    "-0.00",
    "100",
    "1.2300",
    "0.0000000000000000000000000001",
    "123456789012345678901234567",
    "79228162514264337593543950335",
    "-42",
]


@pytest.mark.parametrize("text", VALUES)
def test_a_pyamqp_decimal_leaves_in_the_net_layout(text: str) -> None:
    raw = pyamqp_decimal(Decimal(text))
    out = service_decimal128(0x94, raw[1:])
    assert out == dotnet_write(Decimal(text))  # the bytes the service writes
    assert dotnet_read(out) == Decimal(text) and str(dotnet_read(out)) == str(Decimal(text))


@pytest.mark.parametrize("text", ["1.2345", "-1.2345", "0", "100", "1.2300", "4294967295"])
def test_pyamqp_reads_back_what_it_sent(text: str) -> None:
    """The SDK's own decoder reads the service layout (coefficients below 2**32: beyond, its
    decoder reads the words as digit groups, against Azure as well)."""
    out = service_decimal128(0x94, pyamqp_decimal(Decimal(text))[1:])
    _, value = pyamqp_decode._decode_decimal128(memoryview(out))
    assert value == Decimal(text)


@pytest.mark.parametrize("text", VALUES)
def test_a_net_client_decimal_is_kept(text: str) -> None:
    raw = dotnet_write(Decimal(text))
    assert service_decimal128(0x94, raw) == raw


def test_decimal32_and_decimal64_become_decimal128() -> None:
    d32 = struct.pack(">I", ((101 - 1) << 23) | 15)  # 1.5: coefficient 15, exponent -1
    d64 = struct.pack(">Q", (1 << 63) | ((398 - 3) << 53) | 123456)  # -123.456
    d32_large = struct.pack(">I", (0b11 << 29) | ((101 + 2) << 21) | 5)  # (2**23 + 5) E+2
    assert dotnet_read(service_decimal128(0x74, d32)) == Decimal("1.5")
    assert dotnet_read(service_decimal128(0x84, d64)) == Decimal("-123.456")
    assert dotnet_read(service_decimal128(0x74, d32_large)) == Decimal((2**23 + 5) * 100)


@pytest.mark.parametrize(
    ("code", "raw", "why"),
    [
        (0x94, b"\x78" + bytes(15), "infinity"),
        (0x94, b"\x7c" + bytes(15), "NaN"),
        (0x74, b"\x7c\x00\x00\x00", "NaN"),
        (0x94, pyamqp_decimal(Decimal("1E-36"))[1:], "scale"),
        (0x94, pyamqp_decimal(Decimal("1E-260"))[1:], "scale"),  # no (byte) wrap to 4
        (0x94, pyamqp_decimal(Decimal("1E-29"))[1:], "scale"),
        (0x94, pyamqp_decimal(Decimal(2**96))[1:], "96 bits"),
        (0x84, struct.pack(">Q", ((398 + 20) << 53) | 10**15), "too large"),
    ],
)
def test_what_a_net_decimal_cannot_hold_is_refused(code: int, raw: bytes, why: str) -> None:
    with pytest.raises(DecimalRangeError):
        service_decimal128(code, raw)


def _props(pairs: list[tuple[bytes, bytes]]) -> bytes:
    return enc_described(0x74, enc_map(pairs))


def test_only_a_section_with_a_decimal_is_rewritten() -> None:
    d = pyamqp_decimal(Decimal("1.2345"))
    pairs = [
        (enc_string("prop"), enc_string("test")),
        (enc_string("decimalprop"), d),
        (enc_string("intprop"), enc_int(1)),
    ]
    body = enc_described(0x75, b"\xa0\x05hello")
    s = scan_message(_props(pairs) + body)
    props = read_application_properties(s.tail)
    start, end = s.properties_span
    assert decode(s.tail[start:end])[0] == props  # the span is the rewritten section's value
    assert props["prop"] == "test" and props["intprop"] == 1
    assert props["decimalprop"] == dotnet_write(Decimal("1.2345"))  # the codec keeps raw bytes
    assert s.tail[s.body_span[0] : s.body_span[1]] == body
    assert s.size == len(_props(pairs) + body)  # 17 bytes for 17 bytes
    # no decimal: the section stays byte for byte (one contiguous tail, nothing re-encoded)
    plain = _props([(enc_string("t\x94"), enc_string("\x84 test"))]) + body
    assert scan_message(plain).tail == plain


def test_decimals_in_described_values_arrays_and_lists() -> None:
    d32 = b"\x74" + struct.pack(">I", ((101 - 2) << 23) | 125)  # 1.25
    array = b"\xe0" + bytes((2 + 2 * 4, 2)) + b"\x74" + d32[1:] + d32[1:]
    described = b"\x00" + enc_symbol("com.example:money") + pyamqp_decimal(Decimal("-9.99"))
    listed = b"\xc0" + bytes((1 + 5 + 1, 2)) + d32 + b"\x41"
    value = enc_map(
        [(enc_string("a"), array), (enc_string("d"), described), (enc_string("l"), listed)]
    )
    end, out = rewrite_decimals(value, 0)
    assert end == len(value) and out is not None
    got, _ = decode(out)
    assert [dotnet_read(x) for x in got["a"]] == [Decimal("1.25")] * 2
    assert dotnet_read(got["d"].value) == Decimal("-9.99")
    assert dotnet_read(got["l"][0]) == Decimal("1.25") and got["l"][1] is True
    assert rewrite_decimals(enc_map([(enc_string("x"), enc_int(5))]), 0)[1] is None


def test_a_message_with_an_impossible_decimal_is_refused_at_send() -> None:
    bad = _props([(enc_string("d"), pyamqp_decimal(Decimal("1E-40")))])
    with pytest.raises(PropertyValueError, match="scale of 40"):
        scan_message(bad)
    with pytest.raises(ArgumentOutOfRange, match="application property"):
        scan_transfer(bad, 1 << 20)


def test_a_batch_with_one_impossible_decimal_is_refused_whole() -> None:
    good = _props([(enc_string("d"), pyamqp_decimal(Decimal("1.5")))]) + enc_described(
        0x75, b"\xa0\x01x"
    )
    bad = _props([(enc_string("d"), pyamqp_decimal(Decimal("1E-40")))]) + enc_described(
        0x75, b"\xa0\x01y"
    )
    envelope = b"".join(
        enc_described(0x75, b"\xb0" + struct.pack(">I", len(m)) + m) for m in (good, bad)
    )
    with pytest.raises(ArgumentOutOfRange):
        scan_transfer(envelope, 1 << 20)
    (one, two) = scan_transfer(
        b"".join(
            enc_described(0x75, b"\xb0" + struct.pack(">I", len(m)) + m) for m in (good, good)
        ),
        1 << 20,
    )
    assert read_application_properties(one.tail) == read_application_properties(two.tail)
