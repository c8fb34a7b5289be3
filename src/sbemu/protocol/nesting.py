"""How deep an encoded AMQP value nests, checked without decoding it (the send path's guard).

A message whose structured sections (message annotations, application properties, an
amqp-value or amqp-sequence body, the footer) nest lists, maps, arrays or described values
more than ``MAX_VALUE_DEPTH`` levels is refused at send (sbemu.protocol.sections), so nothing
downstream that decodes it (the dashboard's explorer, `$management` peeks, the partition logs
and the Spark jobs reading them, SQL filters) meets a value that would exhaust its recursion.
The section's own value is level 1: ``{"a": [1, {"b": 2}]}`` as application properties is 3.

Cheap on the hot path (``too_deep``): a section whose value is not compound is not looked at.
Along any chain of nested values each level past the first starts with a constructor byte of
its own (0x00 for a described value, 0xc0, 0xc1, 0xd0, 0xd1, 0xe0 or 0xf0 for a compound; an
array's elements share one, but it is a byte of their array's, not of the array holding it), so
a value nests more than ``MAX_VALUE_DEPTH`` levels only if its body holds at least that many
such bytes: a body shorter than the limit is let through on its length alone, one with fewer
of those bytes on one ``bytes.translate`` (in C, about 3k instructions for 100 bytes where the
regular expression below took 17k). Only a value with as many is searched for a compound
constructor or a described-in-described pattern (one regular expression search) and, when one
appears, walked, constructor by constructor, never deeper than the limit (so never deeper
than ``MAX_VALUE_DEPTH`` Python frames). A chain of described values with symbol descriptors
and primitive values is not looked for (no SDK sends one): the scanner's own recursion guard
bounds it, and the decoders downstream treat a RecursionError as an undecodable value.
"""

from __future__ import annotations

import re
import struct

from .codec import DecodeError, _skip

__all__ = ["MARKERS", "MAX_VALUE_DEPTH", "OPENERS", "ValueTooDeep", "too_deep", "within_depth"]

MAX_VALUE_DEPTH = 32

_LIST_MAP8 = frozenset({0xC0, 0xC1})
_LIST_MAP32 = frozenset({0xD0, 0xD1})
_ARRAYS = frozenset({0xE0, 0xF0})
_COMPOUND = _LIST_MAP8 | _LIST_MAP32 | _ARRAYS
OPENERS = frozenset(_COMPOUND | {0x00})  # first bytes of a value that can nest
_OPENER_BYTES = bytes(sorted(OPENERS))
# What must appear inside a value that nests more than one level: a compound constructor, or a
# described value (ulong descriptor) whose descriptor or value is itself described. 0x00 bytes
# inside numbers rarely match; a false match only costs a walk.
MARKERS = re.compile(
    rb"[\xc0\xc1\xd0\xd1\xe0\xf0]"
    rb"|\x00(?:\x00[\x53\x80]|\x53[\s\S]\x00|\x80[\s\S]{8}\x00)"
)
_II = struct.Struct(">II").unpack_from


class ValueTooDeep(Exception):
    """The value nests more than the limit allows."""


def too_deep(buf: bytes, pos: int, end: int, limit: int = MAX_VALUE_DEPTH) -> bool:
    """Whether the value at ``buf[pos:end]`` nests more than ``limit`` levels: bounds from its
    length and its count of constructor bytes first, the exact check (``within_depth``) only
    when neither rules it out. Raises as ``within_depth`` does."""
    c = buf[pos]
    if c not in OPENERS:
        return False  # a primitive: nothing inside
    # the body, past a list's or map's size and count (they are no constructors)
    start = pos + 3 if c in _LIST_MAP8 else pos + 9 if c in _LIST_MAP32 else pos + 1
    if end - start < limit:
        return False  # too short to hold `limit` constructors
    if end - start - len(buf[start:end].translate(None, _OPENER_BYTES)) < limit:
        return False  # fewer constructors than levels past the first
    return not within_depth(buf, pos, end, limit)


def within_depth(buf: bytes, pos: int, end: int, limit: int = MAX_VALUE_DEPTH) -> bool:
    """Whether the value at ``buf[pos:end]`` nests at most ``limit`` levels. Raises
    DecodeError (or IndexError/struct.error) on a malformed value, as the scanner does."""
    if buf[pos] not in OPENERS:
        return True  # a primitive: nothing inside
    if MARKERS.search(buf, pos + 1, end) is None:
        return True  # one level; nothing inside can open another
    try:
        _value(buf, pos, limit)
    except ValueTooDeep:
        return False
    return True


def _value(buf: bytes, pos: int, left: int) -> int:
    """End of the value at ``pos``; raises ValueTooDeep when it needs more than ``left``
    levels."""
    c = buf[pos]
    if c == 0x00:  # described: the descriptor and the value each one level further in
        if left <= 0:
            raise ValueTooDeep
        return _value(buf, _value(buf, pos + 1, left - 1), left - 1)
    if c in _COMPOUND:
        return _body(buf, pos + 1, c, left)
    return _skip(buf, pos)


def _body(buf: bytes, p: int, c: int, left: int) -> int:
    """End of a compound's body at ``p`` (after its constructor ``c``)."""
    if left <= 0:
        raise ValueTooDeep
    if c in _LIST_MAP8 or c == 0xE0:
        size, count = buf[p], buf[p + 1]
        end, p = p + 1 + size, p + 2
    else:
        size, count = _II(buf, p)
        end, p = p + 4 + size, p + 8
    if end > len(buf):
        raise DecodeError("compound value runs past the end of the buffer")
    if c in _ARRAYS:
        if buf[p] == 0x00:  # a described element constructor
            p = _value(buf, p + 1, left - 1)
        element = buf[p]
        if element not in _COMPOUND:
            return end  # primitives (their constructor is shared): nothing nests
        p += 1
        for _ in range(count):
            p = _body(buf, p, element, left - 1)
            if p > end:
                raise DecodeError("array element runs past the array")
        return end
    for _ in range(count):
        p = _value(buf, p, left - 1)
        if p > end:
            raise DecodeError("compound element runs past its container")
    return end
