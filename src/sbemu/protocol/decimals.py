"""AMQP decimals, written the way Azure Service Bus writes them.

The service does not hand a message's application properties back as the sender encoded them:
it decodes them into .NET values and encodes them again with its AMQP stack
(Microsoft.Azure.Amqp, `Encoding/DecimalEncoding.cs`). For a decimal that matters:

* Every decimal (decimal32 0x74, decimal64 0x84, decimal128 0x94) becomes a .NET
  `System.Decimal` (a 96-bit integer coefficient and a scale of 0..28) and leaves as a
  decimal128 in that stack's own layout: sign in bit 7 of byte 0, the biased exponent
  (6176 - scale) split as `exponent >> 9` into byte 0 and `(exponent & 0x7F) << 1` into
  byte 1, bytes 2-3 zero, then the coefficient as three big-endian 32-bit words
  (high, middle, low).
* That is the layout the SDKs' decoders read: azure-servicebus 7.15's pyamqp takes the
  exponent as `(b0 & 0x7F) << 9 | b1 >> 1` and the words as digit groups; the .NET decoder
  reads `(b0 & 0x7F) << 7 | b1 >> 1` and lands on the same scale through its `(byte)` cast.
  pyamqp cannot read its own IEEE 754 binary-integer encoding back, nor decimal32/64 at all
  (no decoder for 0x74/0x84): a message whose decimal went back unchanged broke the SDK's
  receiver and held up the messages behind it on that receiver.

Decoding follows the .NET decoder too, so both what pyamqp sends (IEEE BID, exponent at bit
49) and what a .NET client sends (the layout above) are read as their senders meant them. A
decimal .NET cannot hold is refused (DecimalRangeError) rather than silently changed: NaN and
infinities, a scale above 28, a value beyond 96 bits.
"""

from __future__ import annotations

import struct

from .codec import DecodeError, _skip

__all__ = [
    "DECIMAL_CODES",
    "DECIMAL_WIDTH",
    "DecimalRangeError",
    "rewrite_decimals",
    "service_decimal128",
]

DECIMAL32, DECIMAL64, DECIMAL128 = 0x74, 0x84, 0x94
DECIMAL_CODES = frozenset((DECIMAL32, DECIMAL64, DECIMAL128))
DECIMAL_WIDTH = {DECIMAL32: 4, DECIMAL64: 8, DECIMAL128: 16}
_BIAS = {DECIMAL32: 101, DECIMAL64: 398, DECIMAL128: 6176}
_MAX_SCALE = 28  # System.Decimal
_MAX_COEFFICIENT = (1 << 96) - 1  # System.Decimal: a 96-bit integer
_NET_HIGH = (6176 - _MAX_SCALE) >> 9  # byte 0 (sign aside) of every decimal .NET writes: 12


class DecimalRangeError(ValueError):
    """A decimal that a .NET System.Decimal (so the service) cannot represent."""


def _fields(code: int, raw: bytes) -> tuple[bool, int, int]:
    """(negative, coefficient, exponent) as IEEE 754-2008 (binary integer coefficient) and
    the service's decoder read them."""
    b0 = raw[0]
    negative = bool(b0 & 0x80)
    if b0 & 0x78 == 0x78:  # 11110: infinity, 11111: NaN
        raise DecimalRangeError("NaN and infinity have no .NET decimal value")
    large = b0 & 0x60 == 0x60  # s 11 exponent (100)coefficient: beyond the plain form
    if code == DECIMAL128:
        if large:
            return negative, 0, 0  # beyond 34 digits: non-canonical, zero [IEEE 754-2008 3.5.2]
        exponent = ((b0 & 0x7F) << 7) | ((raw[1] & 0xFE) >> 1)
        if (raw[1] & 0x01) or raw[2] or raw[3]:
            raise DecimalRangeError("the coefficient exceeds the 96 bits of a .NET decimal")
        return negative, int.from_bytes(raw[4:16], "big"), exponent - _BIAS[code]
    word = int.from_bytes(raw, "big")
    bits = 53 if code == DECIMAL64 else 23  # coefficient bits of the plain form
    ebits = 10 if code == DECIMAL64 else 8
    if large:
        exponent = (word >> (bits - 2)) & ((1 << ebits) - 1)
        coefficient = (word & ((1 << (bits - 2)) - 1)) | (1 << bits)
    else:
        exponent = (word >> bits) & ((1 << ebits) - 1)
        coefficient = word & ((1 << bits) - 1)
    return negative, coefficient, exponent - _BIAS[code]


def service_decimal128(code: int, raw: bytes) -> bytes:
    """The 16 value bytes of decimal128 the service sends for the decimal `raw` (the value
    bytes after constructor `code`), or DecimalRangeError."""
    negative, coefficient, exponent = _fields(code, raw)
    if exponent <= 0:
        scale = -exponent
        if code == DECIMAL128 and scale > _MAX_SCALE and raw[0] & 0x7F == _NET_HIGH:
            # The .NET layout read as IEEE: its exponent lands near -4600, and .NET's own
            # decoder gets the scale back through `new decimal(..., (byte)-exponent)`.
            scale &= 0xFF
        if scale > _MAX_SCALE:
            raise DecimalRangeError(f"a scale of {scale} exceeds the 28 of a .NET decimal")
    else:
        coefficient *= 10**exponent  # .NET multiplies by 10, exponent times
        scale = 0
    if coefficient > _MAX_COEFFICIENT:
        raise DecimalRangeError("the value is too large for a .NET decimal")
    biased = _BIAS[DECIMAL128] - scale
    head = bytes(((0x80 if negative else 0) | (biased >> 9), ((biased & 0x7F) << 1) & 0xFF, 0, 0))
    return head + coefficient.to_bytes(12, "big")


# ---------------------------------------------------------------- application properties
# Only a section that may hold a decimal is walked (see sections._scan: a byte 0x84 or 0x94
# in it), and only what holds one is re-encoded: everything else stays byte for byte.

_unpack_count = struct.Struct(">I").unpack_from


def rewrite_decimals(buf: bytes, pos: int) -> tuple[int, bytes | None]:
    """The end of the AMQP value at `pos`, and its encoding with every decimal in it
    (values, described values, list/map entries, array elements) written as the service
    writes it; None when it holds no decimal."""
    c = buf[pos]
    width = DECIMAL_WIDTH.get(c)
    if width is not None:
        end = pos + 1 + width
        if end > len(buf):
            raise DecodeError(f"decimal at {pos} runs past the end of the buffer")
        return end, b"\x94" + service_decimal128(c, buf[pos + 1 : end])
    if c == 0x00:  # described: the descriptor as it is, the value rewritten
        start = _skip(buf, pos + 1)
        end, value = rewrite_decimals(buf, start)
        return end, None if value is None else buf[pos:start] + value
    if c in (0xC0, 0xC1, 0xD0, 0xD1):  # list8, map8, list32, map32
        small = c < 0xD0
        count = buf[pos + 2] if small else _unpack_count(buf, pos + 5)[0]
        p = pos + (3 if small else 9)
        end = pos + (2 + buf[pos + 1] if small else 5 + _unpack_count(buf, pos + 1)[0])
        items: list[bytes] = []
        changed = False
        for _ in range(count):
            item_end, new = rewrite_decimals(buf, p)
            items.append(buf[p:item_end] if new is None else new)
            changed = changed or new is not None
            p = item_end
        if p != end:
            raise DecodeError(f"compound at {pos}: its items do not match its size")
        if not changed:
            return end, None
        return end, _compound(c & 0x0F, count, b"".join(items))
    if c in (0xE0, 0xF0):  # array8, array32: one constructor for all elements
        return _rewrite_array(buf, pos)
    return _skip(buf, pos), None


def _rewrite_array(buf: bytes, pos: int) -> tuple[int, bytes | None]:
    small = buf[pos] == 0xE0
    end = pos + (2 + buf[pos + 1] if small else 5 + _unpack_count(buf, pos + 1)[0])
    count = buf[pos + 2] if small else _unpack_count(buf, pos + 5)[0]
    ctor = pos + (3 if small else 9)
    head = b""
    if buf[ctor] == 0x00:  # described elements: 0x00 descriptor element-constructor
        inner = _skip(buf, ctor + 1)
        head, ctor = buf[ctor:inner], inner
    code = buf[ctor]
    width = DECIMAL_WIDTH.get(code)
    if width is None:
        return end, None  # no decimals (arrays of compound values are kept as they are)
    p = ctor + 1
    if p + count * width != end:
        raise DecodeError(f"decimal array at {pos}: its elements do not match its size")
    values = [
        service_decimal128(code, buf[p + i * width : p + (i + 1) * width]) for i in range(count)
    ]
    body = head + b"\x94" + b"".join(values)
    if len(body) + 1 <= 255 and count <= 255:
        return end, bytes((0xE0, len(body) + 1, count)) + body
    return end, b"\xf0" + struct.pack(">II", len(body) + 4, count) + body


def _compound(kind: int, count: int, items: bytes) -> bytes:
    """A list (kind 0) or map (kind 1) of `count` encoded items, in its smallest form."""
    if len(items) + 1 <= 255 and count <= 255:
        return bytes((0xC0 | kind, len(items) + 1, count)) + items
    return bytes((0xD0 | kind,)) + struct.pack(">II", len(items) + 4, count) + items
