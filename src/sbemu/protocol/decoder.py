"""AMQP 1.0 decoding: read and skip values ([AMQP 1.0 1], types.xml).

On the hot path: decoding dispatches through a 256-entry table indexed by the constructor
byte, fixed-width values go through precompiled ``struct.Struct`` objects, and nothing loops
over individual bytes. ``_decode`` and ``_skip`` are the fast forms without the exception
translation, for callers that translate failures themselves (the section scanner, the
rebuilder, the frame filters); ``decode`` and ``skip`` raise only :class:`DecodeError`. The
Python values each AMQP type decodes to are listed in ``sbemu.protocol.codec``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from .amqptypes import DecodeError, Described, Symbol, Timestamp

__all__ = ["decode", "skip"]

_unpack_H = struct.Struct(">H").unpack_from
_unpack_h = struct.Struct(">h").unpack_from
_unpack_I = struct.Struct(">I").unpack_from
_unpack_i = struct.Struct(">i").unpack_from
_unpack_Q = struct.Struct(">Q").unpack_from
_unpack_q = struct.Struct(">q").unpack_from
_unpack_f = struct.Struct(">f").unpack_from
_unpack_d = struct.Struct(">d").unpack_from
_unpack_II = struct.Struct(">II").unpack_from

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
