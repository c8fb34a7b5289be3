"""Pad proton's outgoing performatives to their full field count [contract 0.1, 1.6].

proton drops trailing null fields and sends `end`/`close` as list0. That is valid AMQP, but
azure-servicebus 7.14 and earlier index performative fields by position (and read a transfer's
payload at index 11), so every performative must carry all its fields, with explicit nulls,
the way Microsoft's own stack writes them. This module rewrites only the list header of each
AMQP frame's performative; payloads are copied untouched. Cost: a few microseconds per frame.

It also writes an empty delivery tag the way Azure does, as a zero-length binary: proton writes
an empty tag as null, which go-amqp refuses on a first transfer ("received message without a
delivery-tag"), while the Python SDK's receive-and-delete deliveries expect an empty tag.
"""

from __future__ import annotations

import struct

_U32 = struct.Struct(">I")
_NULL = 0x40
_LIST8_HEAD = struct.Struct(">BBB")
_TRANSFER = 0x14
_EMPTY_BINARY = b"\xa0\x00"  # vbin8 of length 0: the delivery tag proton writes as null
# bytes taken by a uint field by its constructor (uint0, smalluint, uint) [AMQP 1.6.4]
_UINT_WIDTH = {0x43: 1, 0x52: 2, 0x70: 5}
_ID_WIDTH = {**_UINT_WIDTH, _NULL: 1}
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
_NULLS = [bytes([_NULL]) * n for n in range(max(FIELD_COUNTS.values()) + 1)]
# A delivery's transfer as proton writes it: an AMQP frame (doff 2) whose performative is a
# transfer in a list8 [AMQP 2.7.5], read with the frame's size by one unpack (FramePadder._frames).
_TRANSFER_LIST8 = 0x005314C0  # the performative's descriptor and list8 constructor, as a word
# a frame's first 15 bytes: size, doff/type/channel, the word above, the list8's size and count,
# and its first field's constructor
_FIRST = struct.Struct(">IIIBBB")
_TRANSFER_HEAD = struct.Struct(">IIIBB")  # size, doff/type/channel, descriptor+list8, size, count
_DOFF2_AMQP = 0x02000000  # the second word's doff 2 and type 0 (AMQP), channel masked out
_TRANSFER_FIELDS = FIELD_COUNTS[_TRANSFER]
# the least list size taken by the quick path: the tag's constructor (at most 10 bytes into the
# items, past the widest handle and delivery-id) lies inside the list
_TRANSFER_MIN_ITEMS = 12
# bytes a handle or delivery-id takes by its first byte (a uint, or null for the id): 0 for any
# other constructor, which sends the frame to the general path
_ID_WIDTHS = bytes(_ID_WIDTH.get(b, 0) for b in range(256))
# The most padding adds to a frame: the nulls of the longest performative (attach, 14) and a
# list8 header widened to list32 (6). The peer's open reaches proton with its max-frame-size
# lowered by this much (peeropen.py), so proton's fullest frames still fit once padded.
PAD_HEADROOM = 32


class FramePadder:
    """Stateful rewriter for one connection's outgoing AMQP byte stream (after SASL)."""

    def __init__(self) -> None:
        self._pending: bytes | bytearray = b""
        self._header_done = False
        # The peer's max-frame-size (0: none): a frame padding would push over it goes out as
        # proton wrote it (a peer whose limit is below 512 + PAD_HEADROOM, where proton cannot
        # be told a lower one).
        self.limit = 0

    def feed(self, data: bytes | bytearray) -> bytes:
        """Return the bytes to send: whole frames, padded; keeps an incomplete tail."""
        out: list[bytes | memoryview] = []
        self.feed_into(data, out)
        return b"".join(out)

    def feed_into(self, data: bytes | bytearray, out: list[bytes | memoryview]) -> None:
        """Append the bytes to send to `out`: whole frames, padded; keeps an incomplete tail.

        Unchanged spans (a transfer's payload) go to `out` as views of `data`, so the caller
        copies each byte once, when it joins `out` (`data` must not change until then). A frame
        begun in an earlier chunk is completed by copying only its own bytes.
        """
        start = 0
        pending = self._pending
        if pending:
            need = self._needed(pending)
            if need is None:
                data = pending + data  # a short or odd start: join (rare)
            elif need > len(data):
                self._pending = pending + data
                return
            else:
                head = pending + data[:need]
                used = self._frames(head, 0, out)
                if used < len(head):
                    data = head[used:] + data[need:]
                else:
                    start = need
            self._pending = b""
        pos = self._frames(data, start, out)
        self._pending = bytes(data[pos:]) if pos < len(data) else b""

    def _needed(self, pending: bytes | bytearray) -> int | None:
        """How many more bytes complete what `pending` began (None: not known yet)."""
        if not self._header_done:
            return 8 - len(pending) if len(pending) < 8 else None
        if len(pending) < 4:
            return None
        size = _U32.unpack_from(pending, 0)[0]
        return size - len(pending) if size >= 8 and size > len(pending) else None

    def _frames(self, buf: bytes | bytearray, pos: int, out: list[bytes | memoryview]) -> int:
        """Pad the whole frames of buf from `pos` into `out`; returns where the tail starts."""
        view = memoryview(buf)
        n = len(buf)
        if not self._header_done:
            if n - pos < 8:
                return pos
            out.append(view[pos : pos + 8])
            pos += 8
            self._header_done = True
        limit = self.limit
        widths, head_of, nulls_of, first = (
            _ID_WIDTHS,
            _TRANSFER_HEAD.pack,
            _NULLS,
            _FIRST.unpack_from,
        )
        while pos + 8 <= n:
            if pos + _FIRST.size > n:  # a frame too short for a transfer (a heartbeat)
                size = _U32.unpack_from(buf, pos)[0]
                if size < 8 or pos + size > n:
                    break
                _pad_frame(buf, view, pos, size, out, limit)
                pos += size
                continue
            size, word, perf, lsize, count, handle = first(buf, pos)
            end = pos + size
            if size < 8 or end > n:
                break
            # A delivery's transfer (the receive hot path): padded here with one new header,
            # when its list8 stays one, its delivery tag is not null and no frame limit is near.
            if (
                perf == _TRANSFER_LIST8
                and word & 0xFFFF0000 == _DOFF2_AMQP
                and 2 < count < _TRANSFER_FIELDS
                and _TRANSFER_MIN_ITEMS <= lsize <= 255 + count - _TRANSFER_FIELDS
                and (items_end := pos + 13 + lsize) <= end
                and (hw := widths[handle]) != 0
                and (iw := widths[buf[pos + 14 + hw]]) != 0
                and buf[pos + 14 + hw + iw] != _NULL  # else its tag becomes an empty binary
                and not (limit and size + _TRANSFER_FIELDS - count > limit)
            ):
                k = _TRANSFER_FIELDS - count
                out.append(
                    head_of(size + k, word, perf, lsize + k, _TRANSFER_FIELDS)
                    + buf[pos + 14 : items_end]
                    + nulls_of[k]
                )
                if items_end < end:
                    out.append(view[items_end:end])  # the message
            else:
                _pad_frame(buf, view, pos, size, out, limit)
            pos = end
        if pos < n and n - pos >= 8 and _U32.unpack_from(buf, pos)[0] < 8:
            # Not a frame we understand: pass the rest through unchanged.
            out.append(view[pos:])
            pos = n
        return pos


def _pad_frame(
    buf: bytes | bytearray,
    view: memoryview,
    pos: int,
    size: int,
    out: list[bytes | memoryview],
    limit: int = 0,
) -> None:
    """Append the frame at buf[pos:pos+size] to `out`, its performative padded.

    Runs once per outgoing frame (every delivery's transfer): the frame is passed on as views of
    `buf` around one new piece, the list header with the size and nulls it gains."""
    end = pos + size
    body = pos + buf[pos + 4] * 4
    if (
        size <= body - pos + 3
        or buf[pos + 5] != 0  # not an AMQP frame
        or buf[body] != 0x00
        or buf[body + 1] != 0x53
    ):
        out.append(view[pos:end])
        return
    code = buf[body + 2]
    full = FIELD_COUNTS.get(code)
    lpos = body + 3
    ctor = buf[lpos]
    if full is None:
        out.append(view[pos:end])
        return
    if ctor == 0xC0:
        count = buf[lpos + 2]
        items_start, items_end = lpos + 3, lpos + 2 + buf[lpos + 1]
    elif ctor == 0x45:
        count, items_start, items_end = 0, lpos + 1, lpos + 1
    elif ctor == 0xD0:
        count = _U32.unpack_from(buf, lpos + 5)[0]
        items_start, items_end = lpos + 9, lpos + 5 + _U32.unpack_from(buf, lpos + 1)[0]
    else:
        out.append(view[pos:end])
        return
    tag_at = -1
    if code == _TRANSFER and count > 2:  # where its delivery tag is null, if it is (inline: hot)
        at = items_start + _UINT_WIDTH.get(buf[items_start], size)  # handle
        if at < items_end:
            at += _ID_WIDTH.get(buf[at], size)  # delivery-id (null on a continuation)
            if at < items_end and buf[at] == _NULL:
                tag_at = at
    if count >= full and tag_at < 0:
        out.append(view[pos:end])
        return
    nulls = _NULLS[full - count] if count < full else b""
    length = items_end - items_start + len(nulls) + (tag_at >= 0)  # the padded items
    fields = full if full > count else count
    if length + 1 <= 255:
        head = _LIST8_HEAD.pack(0xC0, length + 1, fields)
    else:
        head = b"\xd0" + _U32.pack(length + 4) + _U32.pack(fields)
    # frame size: header (4 size bytes + the rest up to the list) + new list + payload
    padded = lpos - pos + len(head) + length + end - items_end
    if limit and padded > limit:
        out.append(view[pos:end])  # valid AMQP as it is; padded, the peer would refuse it
        return
    out.append(_U32.pack(padded))
    out.append(view[pos + 4 : lpos])
    out.append(head)
    if tag_at >= 0:
        out.append(view[items_start:tag_at])
        out.append(_EMPTY_BINARY)
        items_start = tag_at + 1
    if items_end > items_start:
        out.append(view[items_start:items_end])
    out.append(nulls)
    if items_end < end:
        out.append(view[items_end:end])  # a transfer's payload
