"""AMQP 1.0 type system: decode, skip and encode values ([AMQP 1.0 1], types.xml).

Pure stdlib and on the hot path: decoding dispatches through a 256-entry table
indexed by the constructor byte, fixed-width values go through precompiled
``struct.Struct`` objects, and nothing loops over individual bytes.

Python mapping used by :func:`decode` and :func:`encode`:

* null -> ``None``; boolean -> ``bool``; every integer type -> ``int``
* float/double -> ``float``; decimal32/64/128 -> raw ``bytes``; char -> ``str``
* timestamp -> :class:`Timestamp` (``int`` ms since the Unix epoch)
* uuid -> ``uuid.UUID``; binary -> ``bytes``; string -> ``str``; symbol -> :class:`Symbol`
* list -> ``list``; map -> ``dict``; array -> ``list``
* described -> :class:`Described` (descriptor is an ``int`` or a :class:`Symbol`)
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

__all__ = [
    "DecodeError",
    "Described",
    "Symbol",
    "Timestamp",
    "decode",
    "skip",
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


class DecodeError(ValueError):
    """Raised for truncated, malformed or unknown AMQP encodings."""


class Symbol(str):
    """An AMQP symbol (ASCII name from a constrained domain), distinct from string."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


class Timestamp(int):
    """An AMQP timestamp: signed milliseconds since the Unix epoch."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Timestamp({int.__repr__(self)})"


class Described(NamedTuple):
    """A described value: ``descriptor`` is an int (ulong code) or a Symbol."""

    descriptor: Any
    value: Any


# ---------------------------------------------------------------------------
# Precompiled structs
# ---------------------------------------------------------------------------

_S_b = struct.Struct(">b")
_S_H = struct.Struct(">H")
_S_h = struct.Struct(">h")
_S_I = struct.Struct(">I")
_S_i = struct.Struct(">i")
_S_Q = struct.Struct(">Q")
_S_q = struct.Struct(">q")
_S_f = struct.Struct(">f")
_S_d = struct.Struct(">d")
_S_BB = struct.Struct(">BB")
_S_II = struct.Struct(">II")

_unpack_H = _S_H.unpack_from
_unpack_h = _S_h.unpack_from
_unpack_I = _S_I.unpack_from
_unpack_i = _S_i.unpack_from
_unpack_Q = _S_Q.unpack_from
_unpack_q = _S_q.unpack_from
_unpack_f = _S_f.unpack_from
_unpack_d = _S_d.unpack_from
_unpack_II = _S_II.unpack_from

# ---------------------------------------------------------------------------
# Decoding. Each decoder takes (buf, pos) with pos just past the constructor
# byte and returns (value, end). Truncation of fixed-width values surfaces as
# struct.error / IndexError and is converted to DecodeError by decode().
# ---------------------------------------------------------------------------

_Decoder = Callable[[bytes, int], tuple[Any, int]]


def _d_null(buf: bytes, pos: int) -> tuple[Any, int]:
    return None, pos


def _d_true(buf: bytes, pos: int) -> tuple[Any, int]:
    return True, pos


def _d_false(buf: bytes, pos: int) -> tuple[Any, int]:
    return False, pos


def _d_zero(buf: bytes, pos: int) -> tuple[Any, int]:
    return 0, pos


def _d_empty_list(buf: bytes, pos: int) -> tuple[Any, int]:
    return [], pos


def _d_boolean(buf: bytes, pos: int) -> tuple[Any, int]:
    # [AMQP 1.0 1.6.2] 0x56: 0x00 false, 0x01 true
    return buf[pos] != 0, pos + 1


def _d_ubyte(buf: bytes, pos: int) -> tuple[Any, int]:
    return buf[pos], pos + 1


def _d_byte(buf: bytes, pos: int) -> tuple[Any, int]:
    b = buf[pos]
    return (b - 256 if b > 127 else b), pos + 1


def _d_ushort(buf: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_H(buf, pos)[0], pos + 2


def _d_short(buf: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_h(buf, pos)[0], pos + 2


def _d_uint(buf: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_I(buf, pos)[0], pos + 4


def _d_int(buf: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_i(buf, pos)[0], pos + 4


def _d_ulong(buf: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_Q(buf, pos)[0], pos + 8


def _d_long(buf: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_q(buf, pos)[0], pos + 8


def _d_float(buf: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_f(buf, pos)[0], pos + 4


def _d_double(buf: bytes, pos: int) -> tuple[Any, int]:
    return _unpack_d(buf, pos)[0], pos + 8


def _d_char(buf: bytes, pos: int) -> tuple[Any, int]:
    # [AMQP 1.0 1.6.16] char is a UTF-32BE code point
    cp = _unpack_I(buf, pos)[0]
    if cp > 0x10FFFF:
        raise DecodeError(f"char code point out of range: {cp:#x}")
    return chr(cp), pos + 4


def _d_timestamp(buf: bytes, pos: int) -> tuple[Any, int]:
    return Timestamp(_unpack_q(buf, pos)[0]), pos + 8


def _fixed_raw(width: int) -> _Decoder:
    def _d_raw(buf: bytes, pos: int) -> tuple[Any, int]:
        end = pos + width
        if end > len(buf):
            raise DecodeError("truncated fixed-width value")
        return bytes(buf[pos:end]), end

    return _d_raw


def _d_uuid(buf: bytes, pos: int) -> tuple[Any, int]:
    end = pos + 16
    if end > len(buf):
        raise DecodeError("truncated uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def _d_vbin8(buf: bytes, pos: int) -> tuple[Any, int]:
    start = pos + 1
    end = start + buf[pos]
    if end > len(buf):
        raise DecodeError("truncated vbin8")
    return bytes(buf[start:end]), end


def _d_vbin32(buf: bytes, pos: int) -> tuple[Any, int]:
    start = pos + 4
    end = start + _unpack_I(buf, pos)[0]
    if end > len(buf):
        raise DecodeError("truncated vbin32")
    return bytes(buf[start:end]), end


def _d_str8(buf: bytes, pos: int) -> tuple[Any, int]:
    start = pos + 1
    end = start + buf[pos]
    if end > len(buf):
        raise DecodeError("truncated str8")
    return buf[start:end].decode("utf-8"), end


def _d_str32(buf: bytes, pos: int) -> tuple[Any, int]:
    start = pos + 4
    end = start + _unpack_I(buf, pos)[0]
    if end > len(buf):
        raise DecodeError("truncated str32")
    return buf[start:end].decode("utf-8"), end


# Symbols are ASCII by [AMQP 1.0 1.6.21]; decoding as UTF-8 (a superset) is
# lenient towards peers that stray, and costs the same.
def _d_sym8(buf: bytes, pos: int) -> tuple[Any, int]:
    start = pos + 1
    end = start + buf[pos]
    if end > len(buf):
        raise DecodeError("truncated sym8")
    return Symbol(buf[start:end].decode("utf-8")), end


def _d_sym32(buf: bytes, pos: int) -> tuple[Any, int]:
    start = pos + 4
    end = start + _unpack_I(buf, pos)[0]
    if end > len(buf):
        raise DecodeError("truncated sym32")
    return Symbol(buf[start:end].decode("utf-8")), end


def _items(buf: bytes, p: int, count: int, end: int) -> list[Any]:
    """Decode `count` consecutive values starting at p that must end exactly at end."""
    # Every element needs at least its constructor byte, so a count larger
    # than the remaining bytes is garbage (and would otherwise allocate a lot).
    if end > len(buf) or count > end - p:
        raise DecodeError("compound count/size exceeds the buffer")
    items: list[Any] = []
    append = items.append
    table = _DECODERS
    for _ in range(count):
        fn = table[buf[p]]
        if fn is None:
            raise DecodeError(f"unknown constructor {buf[p]:#04x} at {p}")
        v, p = fn(buf, p + 1)
        append(v)
    if p != end:
        raise DecodeError("compound value does not end at its declared size")
    return items


def _d_list8(buf: bytes, pos: int) -> tuple[Any, int]:
    # [AMQP 1.0 1.6.22] list8: size (1 byte, counts the count byte) + count (1 byte)
    size, count = buf[pos], buf[pos + 1]
    end = pos + 1 + size
    return _items(buf, pos + 2, count, end), end


def _d_list32(buf: bytes, pos: int) -> tuple[Any, int]:
    size, count = _unpack_II(buf, pos)
    end = pos + 4 + size
    return _items(buf, pos + 8, count, end), end


def _to_map(items: list[Any]) -> dict[Any, Any]:
    if len(items) & 1:
        raise DecodeError("map has an odd number of elements")
    try:
        return dict(zip(items[::2], items[1::2], strict=True))
    except TypeError as e:  # unhashable key (e.g. a list); not expected from SDKs
        raise DecodeError(f"unhashable map key: {e}") from e


def _d_map8(buf: bytes, pos: int) -> tuple[Any, int]:
    size, count = buf[pos], buf[pos + 1]
    end = pos + 1 + size
    return _to_map(_items(buf, pos + 2, count, end)), end


def _d_map32(buf: bytes, pos: int) -> tuple[Any, int]:
    size, count = _unpack_II(buf, pos)
    end = pos + 4 + size
    return _to_map(_items(buf, pos + 8, count, end)), end


def _array_items(buf: bytes, p: int, count: int, end: int) -> list[Any]:
    """Decode array elements: one (possibly described) constructor, then bare values."""
    if end > len(buf) or count > end - p:
        raise DecodeError("array count/size exceeds the buffer")
    descriptor: Any = None
    described = buf[p] == 0x00
    if described:
        descriptor, p = _decode(buf, p + 1)
    fn = _DECODERS[buf[p]]
    if fn is None or buf[p] == 0x00:
        raise DecodeError(f"bad array element constructor {buf[p]:#04x}")
    p += 1
    items: list[Any] = []
    append = items.append
    for _ in range(count):
        v, p = fn(buf, p)
        append(v)
    if p != end:
        raise DecodeError("array does not end at its declared size")
    if described:
        return [Described(descriptor, v) for v in items]
    return items


def _d_array8(buf: bytes, pos: int) -> tuple[Any, int]:
    size, count = buf[pos], buf[pos + 1]
    end = pos + 1 + size
    return _array_items(buf, pos + 2, count, end), end


def _d_array32(buf: bytes, pos: int) -> tuple[Any, int]:
    size, count = _unpack_II(buf, pos)
    end = pos + 4 + size
    return _array_items(buf, pos + 8, count, end), end


def _d_described(buf: bytes, pos: int) -> tuple[Any, int]:
    descriptor, pos = _decode(buf, pos)
    value, pos = _decode(buf, pos)
    return Described(descriptor, value), pos


_DECODERS: list[_Decoder | None] = [None] * 256
for _code, _fn in {
    0x00: _d_described,
    0x40: _d_null,
    0x41: _d_true,
    0x42: _d_false,
    0x43: _d_zero,  # uint0
    0x44: _d_zero,  # ulong0
    0x45: _d_empty_list,  # list0
    0x50: _d_ubyte,
    0x51: _d_byte,
    0x52: _d_ubyte,  # smalluint
    0x53: _d_ubyte,  # smallulong
    0x54: _d_byte,  # smallint
    0x55: _d_byte,  # smalllong
    0x56: _d_boolean,
    0x60: _d_ushort,
    0x61: _d_short,
    0x70: _d_uint,
    0x71: _d_int,
    0x72: _d_float,
    0x73: _d_char,
    0x74: _fixed_raw(4),  # decimal32
    0x80: _d_ulong,
    0x81: _d_long,
    0x82: _d_double,
    0x83: _d_timestamp,
    0x84: _fixed_raw(8),  # decimal64
    0x94: _fixed_raw(16),  # decimal128
    0x98: _d_uuid,
    0xA0: _d_vbin8,
    0xA1: _d_str8,
    0xA3: _d_sym8,
    0xB0: _d_vbin32,
    0xB1: _d_str32,
    0xB3: _d_sym32,
    0xC0: _d_list8,
    0xC1: _d_map8,
    0xD0: _d_list32,
    0xD1: _d_map32,
    0xE0: _d_array8,
    0xF0: _d_array32,
}.items():
    _DECODERS[_code] = _fn
del _code, _fn


def _decode(buf: bytes, pos: int) -> tuple[Any, int]:
    """Decode without the exception translation (internal fast path)."""
    fn = _DECODERS[buf[pos]]
    if fn is None:
        raise DecodeError(f"unknown constructor {buf[pos]:#04x} at {pos}")
    return fn(buf, pos + 1)


# Errors that mean "truncated or garbage" when raised inside a decoder.
_DECODE_FAILURES = (IndexError, struct.error, ValueError, TypeError, RecursionError)


def decode(buf: bytes, pos: int = 0) -> tuple[Any, int]:
    """Decode one AMQP value at pos; return (value, end position)."""
    try:
        fn = _DECODERS[buf[pos]]
        if fn is None:
            raise DecodeError(f"unknown constructor {buf[pos]:#04x} at {pos}")
        return fn(buf, pos + 1)
    except DecodeError:
        raise
    except _DECODE_FAILURES as e:
        raise DecodeError(f"malformed or truncated AMQP value at {pos}: {e}") from e


# ---------------------------------------------------------------------------
# Skipping. [AMQP 1.0 1.2] "The width of the constructor's subcategory ... allows
# a decoder to skip over values of unknown type": the high nibble of the format
# code fixes how many bytes follow. Width >= 0 is a fixed width; -1 / -4 mean a
# 1- or 4-byte size prefix follows (variable, compound and array categories).
# ---------------------------------------------------------------------------

_WIDTH: list[int | None] = [None] * 256
for _c in range(0x40, 0x100):
    _WIDTH[_c] = {
        0x4: 0,
        0x5: 1,
        0x6: 2,
        0x7: 4,
        0x8: 8,
        0x9: 16,
        0xA: -1,
        0xB: -4,
        0xC: -1,
        0xD: -4,
        0xE: -1,
        0xF: -4,
    }[_c >> 4]
del _c


def _skip(buf: bytes, pos: int) -> int:
    """Skip without the exception translation (internal fast path)."""
    c = buf[pos]
    if c == 0x00:  # described: descriptor, then the value it describes
        return _skip(buf, _skip(buf, pos + 1))
    w = _WIDTH[c]
    if w is None:
        raise DecodeError(f"unknown constructor {c:#04x} at {pos}")
    if w >= 0:
        end = pos + 1 + w
    elif w == -1:
        end = pos + 2 + buf[pos + 1]
    else:
        end = pos + 5 + _unpack_I(buf, pos + 1)[0]
    if end > len(buf):
        raise DecodeError(f"value at {pos} runs past the end of the buffer")
    return end


def skip(buf: bytes, pos: int) -> int:
    """Return the end position of the value at pos without decoding it."""
    try:
        return _skip(buf, pos)
    except DecodeError:
        raise
    except (IndexError, struct.error, RecursionError) as e:
        raise DecodeError(f"truncated AMQP value at {pos}: {e}") from e


# ---------------------------------------------------------------------------
# Encoding (smallest encoding for scalars, [AMQP 1.0 1.6])
# ---------------------------------------------------------------------------

_NULL = b"\x40"
_TRUE = b"\x41"
_FALSE = b"\x42"
_UINT0 = b"\x43"
_ULONG0 = b"\x44"

_pack_H = _S_H.pack
_pack_h = _S_h.pack
_pack_I = _S_I.pack
_pack_i = _S_i.pack
_pack_Q = _S_Q.pack
_pack_q = _S_q.pack
_pack_BB = _S_BB.pack
_pack_b = _S_b.pack


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
    return b"\x72" + _S_f.pack(v)


def enc_double(v: float) -> bytes:
    """Encode a 64-bit IEEE 754 double."""
    return b"\x82" + _S_d.pack(v)


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
