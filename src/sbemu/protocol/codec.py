"""AMQP 1.0 type system: decode, skip and encode values ([AMQP 1.0 1], types.xml).

The names the rest of the program uses, from the three modules that own them: the value
types (protocol/amqptypes.py), the decoder (protocol/decoder.py) and the encoder
(protocol/encoder.py). Pure stdlib, and on the hot path. ``_decode``, ``_skip`` and ``_WIDTH``
are exported too: the fast forms without the exception translation, for the section scanner,
the rebuilder and the frame filters, which translate failures themselves.

Python mapping used by :func:`decode` and :func:`encode`:

* null -> ``None``; boolean -> ``bool``; every integer type -> ``int``
* float/double -> ``float``; decimal32/64/128 -> raw ``bytes``; char -> ``str``
* timestamp -> :class:`Timestamp` (``int`` ms since the Unix epoch)
* uuid -> ``uuid.UUID``; binary -> ``bytes``; string -> ``str``; symbol -> :class:`Symbol`
* list -> ``list``; map -> ``dict``; array -> ``list``
* described -> :class:`Described` (descriptor is an ``int`` or a :class:`Symbol`)
"""

from __future__ import annotations

from .amqptypes import DecodeError, Described, Symbol, Timestamp
from .decoder import _WIDTH as _WIDTH
from .decoder import _decode as _decode
from .decoder import _skip as _skip
from .decoder import decode, skip
from .encoder import (
    enc_binary,
    enc_bool,
    enc_byte,
    enc_described,
    enc_double,
    enc_float,
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
)

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
