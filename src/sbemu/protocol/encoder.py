"""AMQP 1.0 encoding: the smallest encoding of each scalar ([AMQP 1.0 1.6]), compounds from
pre-encoded items, and :func:`encode` choosing the AMQP type from a Python value's type.

The ``enc_*`` functions take values already known to be of their type and return bytes
ready to be joined; compounds (lists, maps, arrays, described values) take their items
already encoded, so a caller composes a frame without building Python containers first.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable
from typing import Any

from .amqptypes import Described, Symbol, Timestamp

__all__ = [
    "encode",
    "enc_null",
    "enc_bool",
    "enc_ubyte",
    "enc_ushort",
    "enc_uint",
    "enc_ulong",
    "enc_byte",
    "enc_short",
    "enc_int",
    "enc_long",
    "enc_float",
    "enc_double",
    "enc_timestamp",
    "enc_uuid",
    "enc_binary",
    "enc_string",
    "enc_symbol",
    "enc_list",
    "enc_map",
    "enc_map_body",
    "enc_described",
    "enc_symbol_array",
    "enc_uuid_array",
    "enc_long_array",
    "enc_timestamp_array",
]


_NULL = b"\x40"
_TRUE = b"\x41"
_FALSE = b"\x42"
_UINT0 = b"\x43"
_ULONG0 = b"\x44"

_pack_H = struct.Struct(">H").pack
_pack_h = struct.Struct(">h").pack
_pack_I = struct.Struct(">I").pack
_pack_i = struct.Struct(">i").pack
_pack_Q = struct.Struct(">Q").pack
_pack_q = struct.Struct(">q").pack
_pack_f = struct.Struct(">f").pack
_pack_d = struct.Struct(">d").pack
_pack_BB = struct.Struct(">BB").pack
_pack_b = struct.Struct(">b").pack


def _range_error(kind: str, v: object) -> ValueError:
    return ValueError(f"{v!r} does not fit in AMQP {kind}")


def enc_null() -> bytes:
    """Encode null."""
    return _NULL


def enc_bool(v: bool) -> bytes:
    """Encode a boolean as 0x41 (true) / 0x42 (false)."""
    return _TRUE if v else _FALSE


def enc_ubyte(v: int) -> bytes:
    """Encode a ubyte."""
    if not 0 <= v <= 0xFF:
        raise _range_error("ubyte", v)
    return _pack_BB(0x50, v)


def enc_ushort(v: int) -> bytes:
    """Encode a ushort."""
    if not 0 <= v <= 0xFFFF:
        raise _range_error("ushort", v)
    return b"\x60" + _pack_H(v)


def enc_uint(v: int) -> bytes:
    """Encode a uint as uint0, smalluint or uint."""
    if 0 <= v <= 0xFF:
        return _UINT0 if v == 0 else _pack_BB(0x52, v)
    if v < 0 or v > 0xFFFFFFFF:
        raise _range_error("uint", v)
    return b"\x70" + _pack_I(v)


def enc_ulong(v: int) -> bytes:
    """Encode a ulong as ulong0, smallulong or ulong."""
    if 0 <= v <= 0xFF:
        return _ULONG0 if v == 0 else _pack_BB(0x53, v)
    if v < 0 or v > 0xFFFFFFFFFFFFFFFF:
        raise _range_error("ulong", v)
    return b"\x80" + _pack_Q(v)


def enc_byte(v: int) -> bytes:
    """Encode a (signed) byte."""
    if not -128 <= v <= 127:
        raise _range_error("byte", v)
    return b"\x51" + _pack_b(v)


def enc_short(v: int) -> bytes:
    """Encode a short (int16)."""
    if not -0x8000 <= v <= 0x7FFF:
        raise _range_error("short", v)
    return b"\x61" + _pack_h(v)


def enc_int(v: int) -> bytes:
    """Encode an int as smallint or int."""
    if -128 <= v <= 127:
        return b"\x54" + _pack_b(v)
    if not -0x80000000 <= v <= 0x7FFFFFFF:
        raise _range_error("int", v)
    return b"\x71" + _pack_i(v)


def enc_long(v: int) -> bytes:
    """Encode a long as smalllong or long."""
    if -128 <= v <= 127:
        return b"\x55" + _pack_b(v)
    if not -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
        raise _range_error("long", v)
    return b"\x81" + _pack_q(v)


def enc_float(v: float) -> bytes:
    """Encode a 32-bit IEEE 754 float."""
    return b"\x72" + _pack_f(v)


def enc_double(v: float) -> bytes:
    """Encode a 64-bit IEEE 754 double."""
    return b"\x82" + _pack_d(v)


def enc_timestamp(ms: int) -> bytes:
    """Encode a timestamp (milliseconds since the Unix epoch)."""
    if not -0x8000000000000000 <= ms <= 0x7FFFFFFFFFFFFFFF:
        raise _range_error("timestamp", ms)
    return b"\x83" + _pack_q(ms)


def enc_uuid(v: uuid.UUID) -> bytes:
    """Encode a uuid (16 bytes, network order)."""
    return b"\x98" + v.bytes


def enc_binary(b: bytes) -> bytes:
    """Encode binary as vbin8 or vbin32."""
    n = len(b)
    if n <= 0xFF:
        return _pack_BB(0xA0, n) + b
    return b"\xb0" + _pack_I(n) + b


def enc_string(s: str) -> bytes:
    """Encode a UTF-8 string as str8 or str32."""
    raw = s.encode("utf-8")
    n = len(raw)
    if n <= 0xFF:
        return _pack_BB(0xA1, n) + raw
    return b"\xb1" + _pack_I(n) + raw


def enc_symbol(s: str) -> bytes:
    """Encode an ASCII symbol as sym8 or sym32."""
    # [AMQP 1.0 1.6.21] symbols are ASCII; refuse to emit anything else.
    raw = s.encode("ascii")
    n = len(raw)
    if n <= 0xFF:
        return _pack_BB(0xA3, n) + raw
    return b"\xb3" + _pack_I(n) + raw


def _compound(code8: int, code32: bytes, count: int, body: bytes) -> bytes:
    # size counts the count field plus the body [AMQP 1.0 1.2]
    n = len(body)
    if n < 0xFF and count <= 0xFF:
        return bytes((code8, n + 1, count)) + body
    return code32 + _pack_I(n + 4) + _pack_I(count) + body


def enc_list(encoded_items: list[bytes]) -> bytes:
    """Encode a list of pre-encoded items as list8/list32 (never list0, contract §1.6)."""
    return _compound(0xC0, b"\xd0", len(encoded_items), b"".join(encoded_items))


def enc_map(encoded_pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Encode a map from pre-encoded (key, value) pairs as map8/map32."""
    parts: list[bytes] = []
    for k, v in encoded_pairs:
        parts.append(k)
        parts.append(v)
    return _compound(0xC1, b"\xd1", len(parts), b"".join(parts))


def enc_map_body(body: bytes, pair_count: int) -> bytes:
    """Wrap concatenated pre-encoded key/value entries (pair_count pairs) in a map8/map32 header."""
    return _compound(0xC1, b"\xd1", 2 * pair_count, body)


def enc_described(code: int, encoded_value: bytes) -> bytes:
    """Encode a described value with a numeric descriptor (smallulong when < 256)."""
    if 0 <= code <= 0xFF:
        # contract §1.6: pyamqp reads the descriptor code at a fixed offset, so
        # it must be the 0x00 0x53 <code> form.
        return bytes((0x00, 0x53, code)) + encoded_value
    return b"\x00\x80" + _pack_Q(code) + encoded_value


def _array(count: int, constructor: bytes, body: bytes) -> bytes:
    # array size counts the count field, the element constructor and the body
    n = len(body) + len(constructor)
    if n < 0xFF and count <= 0xFF:
        return bytes((0xE0, n + 1, count)) + constructor + body
    return b"\xf0" + _pack_I(n + 4) + _pack_I(count) + constructor + body


def enc_symbol_array(values: list[str]) -> bytes:
    """Encode an array of symbols (sym8 elements when all fit, else sym32)."""
    raws = [s.encode("ascii") for s in values]
    if all(len(r) <= 0xFF for r in raws):
        body = b"".join(bytes((len(r),)) + r for r in raws)
        return _array(len(raws), b"\xa3", body)
    body = b"".join(_pack_I(len(r)) + r for r in raws)
    return _array(len(raws), b"\xb3", body)


def enc_uuid_array(values: list[uuid.UUID]) -> bytes:
    """Encode an array of uuids."""
    return _array(len(values), b"\x98", b"".join(v.bytes for v in values))


def enc_long_array(values: list[int]) -> bytes:
    """Encode an array of longs (fixed 8-byte elements, as proton and .NET emit)."""
    # Array elements share one constructor; the full-width 0x81 form is what
    # every peer emits and decodes, so we do not try smalllong here.
    return _array(len(values), b"\x81", b"".join(_pack_q(v) for v in values))


def enc_timestamp_array(values: list[int]) -> bytes:
    """Encode an array of timestamps (ms since the Unix epoch)."""
    return _array(len(values), b"\x83", b"".join(_pack_q(v) for v in values))


def encode(value: Any) -> bytes:
    """Encode a Python value, choosing the AMQP type from its Python type."""
    # Order matters: bool before int, Timestamp before int, Symbol before str,
    # Described (a tuple) before list/tuple.
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if isinstance(value, Timestamp):
        return enc_timestamp(value)
    if isinstance(value, int):
        return enc_long(value)
    if isinstance(value, float):
        return enc_double(value)
    if isinstance(value, Symbol):
        return enc_symbol(value)
    if isinstance(value, str):
        return enc_string(value)
    if isinstance(value, uuid.UUID):
        return enc_uuid(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return enc_binary(bytes(value))
    if isinstance(value, Described):
        d = value.descriptor
        if isinstance(d, str):
            return b"\x00" + enc_symbol(d) + encode(value.value)
        return enc_described(d, encode(value.value))
    if isinstance(value, (list, tuple)):
        return enc_list([encode(v) for v in value])
    if isinstance(value, dict):
        return enc_map([(encode(k), encode(v)) for k, v in value.items()])
    raise TypeError(f"cannot AMQP-encode {type(value).__name__}")
