"""Pad proton's outgoing performatives to their full field count [contract 0.1, 1.6].

proton drops trailing null fields and sends `end`/`close` as list0. That is valid AMQP, but
azure-servicebus 7.14 and earlier index performative fields by position (and read a transfer's
payload at index 11), so every performative must carry all its fields, with explicit nulls,
the way Microsoft's own stack writes them. This module rewrites only the list header of each
AMQP frame's performative; payloads are copied untouched. Cost: a few microseconds per frame.
"""

from __future__ import annotations

import struct

_U32 = struct.Struct(">I")
_NULL = 0x40
# descriptor code -> number of fields of the performative [AMQP 2.7]
FIELD_COUNTS = {
    0x10: 10,  # open
    0x11: 8,  # begin
    0x12: 14,  # attach
    0x13: 11,  # flow
    0x14: 11,  # transfer
    0x15: 6,  # disposition
    0x16: 3,  # detach
    0x17: 1,  # end
    0x18: 1,  # close
}


class FramePadder:
    """Stateful rewriter for one connection's outgoing AMQP byte stream (after SASL)."""

    def __init__(self) -> None:
        self._pending: bytes | bytearray = b""
        self._header_done = False

    def feed(self, data: bytes | bytearray) -> bytes:
        """Return the bytes to send: whole frames, padded; keeps an incomplete tail.

        Frames are gathered as views of `data` and joined once, so a transfer's payload is
        copied once on its way through (not once per slice).
        """
        buf = self._pending + data if self._pending else data
        view = memoryview(buf)
        out: list[bytes | memoryview] = []
        pos = 0
        n = len(buf)
        if not self._header_done:
            if n < 8:
                self._pending = bytes(buf)
                return b""
            out.append(view[:8])
            pos = 8
            self._header_done = True
        while pos + 8 <= n:
            size = _U32.unpack_from(buf, pos)[0]
            if size < 8 or pos + size > n:
                break
            _pad_frame(buf, view, pos, size, out)
            pos += size
        if pos < n and n - pos >= 8 and _U32.unpack_from(buf, pos)[0] < 8:
            # Not a frame we understand: pass the rest through unchanged.
            out.append(view[pos:])
            pos = n
        self._pending = bytes(buf[pos:]) if pos < n else b""
        return b"".join(out)


def _pad_frame(
    buf: bytes | bytearray, view: memoryview, pos: int, size: int, out: list[bytes | memoryview]
) -> None:
    """Append the frame at buf[pos:pos+size] to `out`, its performative padded."""
    end = pos + size
    doff = buf[pos + 4] * 4
    body = pos + doff
    if size <= doff + 3 or buf[pos + 5] != 0:  # empty (heartbeat) or not an AMQP frame
        out.append(view[pos:end])
        return
    if buf[body] != 0x00 or buf[body + 1] != 0x53:
        out.append(view[pos:end])
        return
    full = FIELD_COUNTS.get(buf[body + 2])
    if full is None:
        out.append(view[pos:end])
        return
    lpos = body + 3
    ctor = buf[lpos]
    if ctor == 0x45:
        count, items_start, items_end = 0, lpos + 1, lpos + 1
    elif ctor == 0xC0:
        lsize, count = buf[lpos + 1], buf[lpos + 2]
        items_start, items_end = lpos + 3, lpos + 2 + lsize
    elif ctor == 0xD0:
        lsize = _U32.unpack_from(buf, lpos + 1)[0]
        count = _U32.unpack_from(buf, lpos + 5)[0]
        items_start, items_end = lpos + 9, lpos + 5 + lsize
    else:
        out.append(view[pos:end])
        return
    if count >= full:
        out.append(view[pos:end])
        return
    items = bytes(buf[items_start:items_end]) + bytes([_NULL]) * (full - count)
    if len(items) + 1 <= 255:
        new_list = bytes((0xC0, len(items) + 1, full)) + items
    else:
        new_list = b"\xd0" + _U32.pack(len(items) + 4) + _U32.pack(full) + items
    # frame size: header (4 size bytes + the rest up to the list) + new list + payload
    new_size = (lpos - pos) + len(new_list) + (end - items_end)
    out.append(_U32.pack(new_size))
    out.append(view[pos + 4 : lpos])
    out.append(new_list)
    if items_end < end:
        out.append(view[items_end:end])  # a transfer's payload
