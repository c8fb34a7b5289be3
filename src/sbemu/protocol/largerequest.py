"""A `$management` request over READ_CHUNK bytes (a message scheduled whole inside it, up to
100 MB on Premium), read from the engine a slice per loop pass, its large binary straight into
a bytes object of its own.

Taken as a small request is, it was read whole from the engine, decoded whole by proton and its
message scanned and stamped on one loop pass: 408 ms for one 99 MB message scheduled and
cancelled (`make loop-hold --kinds schedule`; 10.8 ms with this and the cancel's read off the
loop). Here `RequestRead` reads the request's first PREFIX bytes, finds the one
binary in its body larger than READ_CHUNK (`find_large`: the message), reads that binary
straight into a bytes object of its size, READ_CHUNK bytes a step, then the rest. The sections
in front of the body are decoded by proton as before (they are small); the body is decoded by
`_value` from the bytes around the binary, the binary put back in its place. The operation then
scans the message over several passes (management.py, largescan.py).

A request whose body holds no such binary in its first PREFIX bytes (a binary inside an array,
a request of many smaller messages) is read whole, a slice a step, and decoded by proton as a
small one is.
"""

from __future__ import annotations

import struct
from typing import Any

from cproton_ffi import ffi as _ffi
from cproton_ffi import lib as _lib
from proton import Message

from . import codec
from .intake import READ_CHUNK

PREFIX = 64 * 1024  # bytes read first: the sections before the body and the body's start
MAX_DEPTH = 16  # compounds inside compounds walked here (deeper: proton decodes the request)
_AMQP_VALUE = 0x77
_I = struct.Struct(">I")
_LIST0, _LIST8, _LIST32, _MAP8, _MAP32 = 0x45, 0xC0, 0xD0, 0xC1, 0xD1
_ARRAY8, _ARRAY32, _VBIN32 = 0xE0, 0xF0, 0xB0
_COMPOUNDS = (_LIST8, _LIST32, _MAP8, _MAP32)
_STAND_IN = b"\xa0\x00"  # an empty vbin8 where the large binary was


class _Found(Exception):
    """The large binary: its constructor's position and its length."""

    def __init__(self, at: int, size: int) -> None:
        self.at, self.size = at, size


def _count(buf: bytes, pos: int, code: int) -> tuple[int, int]:
    """(element count, position after the size and count) of a compound whose constructor
    `code` was read; pos is just after it."""
    if code in (_LIST8, _MAP8, _ARRAY8):
        return buf[pos + 1], pos + 2
    return _I.unpack_from(buf, pos + 4)[0], pos + 8


def _skip(buf: bytes, pos: int) -> int:
    """The position after the value whose constructor is at pos (inside buf only)."""
    end = codec.skip(buf, pos)
    if end > len(buf):
        raise IndexError("past the bytes read")
    return end


def _walk(buf: bytes, pos: int, depth: int = 0) -> int:
    """Skip the value whose constructor is at pos, raising _Found at the first binary over
    READ_CHUNK bytes outside an array; the position after it."""
    if depth > MAX_DEPTH:
        raise IndexError("nested too deep")  # (left to proton, which bounds its own)
    code = buf[pos]
    if code == _VBIN32:
        size = _I.unpack_from(buf, pos + 1)[0]
        if size > READ_CHUNK:
            raise _Found(pos, size)
        return pos + 5 + size
    if code in _COMPOUNDS:
        count, at = _count(buf, pos + 1, code)
        for _ in range(count):
            at = _walk(buf, at, depth + 1)
        return at
    return _skip(buf, pos)


def find_large(prefix: bytes) -> tuple[int, int, int] | None:
    """(where the body section starts, where the large binary's constructor is, its length)
    in a request's first bytes; None when its body holds no binary over READ_CHUNK there."""
    pos = 0
    try:
        while pos < len(prefix):
            if prefix[pos] != 0x00 or prefix[pos + 1] != 0x53:
                return None
            if prefix[pos + 2] == _AMQP_VALUE:
                try:
                    _walk(prefix, pos + 3)
                except _Found as found:
                    return pos, found.at, found.size
                return None
            pos = _skip(prefix, pos + 3)
    except Exception:  # noqa: BLE001 - whatever the bytes are, proton decodes them as before
        return None
    return None


def _value(
    buf: bytes, pos: int, large_at: int, large: bytes, code: int = -1, depth: int = 0
) -> tuple[Any, int]:
    """The value at pos as proton gives it (maps as dicts, lists and arrays of them as lists),
    with `large` where its stand-in is (at large_at); `code`: an array's element
    constructor (the value has none of its own)."""
    if depth > MAX_DEPTH:
        raise codec.DecodeError("nested too deep")
    start, depth = pos, depth + 1
    if code < 0:
        if pos == large_at:
            return large, pos + len(_STAND_IN)
        code, pos = buf[pos], pos + 1
    if code in (_LIST8, _LIST32):
        count, pos = _count(buf, pos, code)
        out = []
        for _ in range(count):
            item, pos = _value(buf, pos, large_at, large, depth=depth)
            out.append(item)
        return out, pos
    if code in (_MAP8, _MAP32):
        count, pos = _count(buf, pos, code)
        mapped: dict[Any, Any] = {}
        for _ in range(count // 2):
            key, pos = _value(buf, pos, large_at, large, depth=depth)
            mapped[key], pos = _value(buf, pos, large_at, large, depth=depth)
        return mapped, pos
    if code in (_ARRAY8, _ARRAY32):
        count, at = _count(buf, pos, code)
        if buf[at] in _COMPOUNDS:  # maps or lists: each decoded as above
            element, at = buf[at], at + 1
            items = []
            for _ in range(count):
                item, at = _value(buf, at, large_at, large, element, depth)
                items.append(item)
            return items, at
    if code == _LIST0:
        return [], pos
    return codec.decode(buf, start)


def assemble(prefix: bytes, found: tuple[int, int, int], large: bytes, rest: bytes) -> Message:
    """The request from its parts: `prefix` (its first bytes, through the large binary's
    start), `found` (find_large's answer), the large binary's bytes, and what follows it."""
    body_at, at, _size = found
    request = Message()
    if body_at:
        request.decode(prefix[:body_at])  # the sections before the body
    shadow = prefix[:at] + _STAND_IN + rest
    request.body, _end = _value(shadow, body_at + 3, at, large)
    return request


class RequestRead:
    """One request over READ_CHUNK bytes read from the engine, a bounded piece per `step()`
    (an intake job: protocol/intake.py); then `request()` is the request as proton would
    have decoded it."""

    __slots__ = ("link", "size", "_got", "prefix", "_found", "large", "_large_got", "rest",
                 "_rest_got", "whole")  # fmt: skip

    def __init__(self, link: Any, size: int) -> None:
        self.link = link  # the C link; its current delivery is the request
        self.size = size
        self._got = 0  # bytes of the request read so far
        self.prefix = bytes(min(PREFIX, size))  # calloc'd and filled in place (as below)
        self._found: tuple[int, int, int] | None = None
        self.large = b""  # the large binary's bytes
        self._large_got = 0
        self.rest = b""  # what follows it
        self._rest_got = 0
        self.whole = b""  # a request read whole (no large binary found)

    def _recv(self, into: bytes, at: int, want: int) -> int:
        got = _lib.pn_link_recv(self.link, _ffi.from_buffer(into) + at, want)
        if got <= 0:
            raise EOFError("the engine holds less than the transfer said")
        self._got += got
        return int(got)

    def step(self) -> bool:
        """Read up to READ_CHUNK more bytes; True once the request is read (and the link
        advanced past it)."""
        try:
            if self._got < len(self.prefix):
                self._recv(self.prefix, self._got, len(self.prefix) - self._got)
                if self._got == len(self.prefix):
                    self._start()
            elif self._found is not None and self._large_got < len(self.large):
                n = self._recv(
                    self.large, self._large_got, min(READ_CHUNK, len(self.large) - self._large_got)
                )
                self._large_got += n
            elif self._found is not None:
                n = self._recv(
                    self.rest, self._rest_got, min(READ_CHUNK, len(self.rest) - self._rest_got)
                )
                self._rest_got += n
            else:
                self._recv(self.whole, self._got, min(READ_CHUNK, self.size - self._got))
        except EOFError:
            self.size = self._got  # (not expected: what was read is decoded, or refused)
        if self._got < self.size:
            return False
        _lib.pn_link_advance(self.link)
        return True

    def _start(self) -> None:
        """The prefix is read: find the large binary, or read the request whole."""
        found = find_large(self.prefix) if self.size > len(self.prefix) else None
        if found is None:
            self.whole = bytes(self.size)
            _ffi.memmove(_ffi.from_buffer(self.whole), self.prefix, len(self.prefix))
            return
        self._found = found
        _body, at, size = found
        content = at + 5  # after its constructor and length
        self.large = bytes(size)
        have = len(self.prefix) - content  # its first bytes came with the prefix
        _ffi.memmove(_ffi.from_buffer(self.large), self.prefix[content:], have)
        self._large_got = have
        self.rest = bytes(self.size - content - size)

    def request(self) -> Message:
        """The request as proton decodes a small one (raises what proton or codec raises on
        bytes they refuse)."""
        if self._found is None:
            request = Message()
            request.decode(self.whole or self.prefix)
            return request
        return assemble(self.prefix, self._found, self.large, self.rest)

    def data(self) -> bytes:
        """The request's first bytes (what an undecodable request is answered from)."""
        return self.whole or self.prefix
