"""A large message (up to 100 MB on Premium) scanned without copying its body on the spot.

A plain scan copies a message's tail (its properties, application properties and body) out of
the transfer, and a message without a MessageId is copied again to stamp one in: each copy of
99 MB took 100-120 ms on a developer machine, on the event loop. Here the scan gives the tail as
pieces (sections.py's `pieces`: spans of the transfer and the few bytes it rewrote), the
MessageId is stamped into the pieces, and `step()` copies COPY_CHUNK bytes of them a call into
one bytes object, so the caller spreads the copy over event-loop turns (protocol/intake.py).
What the client sees is what scan_transfer gives: the same checks, errors and stored bytes.
"""

from __future__ import annotations

from typing import Any

from cproton_ffi import ffi as _ffi

from ..errors import MessageSizeExceeded
from ..partitions import IncomingMessage
from . import codec, sections
from .messages import (
    _REFUSALS,
    _SCAN_ERRORS,
    _batch_shaped,
    _batch_too_large,
    _refusal,
    scan_transfer,
    to_incoming,
)
from .rebuild import _properties_fields
from .sectioncodes import _DELIVERY_ANNOTATIONS_PREFIX

COPY_CHUNK = 4 * 1024 * 1024  # bytes of the tail copied per step (a few ms, faults included)

Piece = bytes | tuple[int, int]  # bytes as they go in the tail, or a [start, end) of the data


def scan_large(
    data: bytes, limit: int, for_topic: bool, batch_limit: int | None
) -> LargeScan | list[IncomingMessage]:
    """scan_transfer() for a large transfer: a LargeScan to step through its copy, or, for a
    transfer that is not one message as scanned (not AMQP, a batch), scan_transfer's answer."""
    if len(data) > limit:
        raise MessageSizeExceeded(
            f"The received message (size {len(data)} bytes) exceeds the limit "
            f"({limit} bytes) currently allowed on the link."
        )
    if batch_limit is not None and len(data) > batch_limit and _batch_shaped(data):
        raise _batch_too_large(len(data), batch_limit)
    try:
        fields = sections._scan(data, True, True)
    except _REFUSALS as exc:
        raise _refusal(exc) from exc
    except _SCAN_ERRORS:
        fields = None
    if fields is None or fields[sections.MAY_BE_BATCH]:  # an error to report, or a batch:
        # scan_transfer's way
        return scan_transfer(data, limit, for_topic, batch_limit)
    return LargeScan(data, fields, for_topic)


class LargeScan:
    """The tail of one scanned large message, copied COPY_CHUNK bytes per step()."""

    __slots__ = ("data", "fields", "for_topic", "pieces", "size", "spans", "assigned", "tail",
                 "_at", "_piece", "_offset", "message_id")  # fmt: skip

    def __init__(self, data: bytes, fields: tuple[Any, ...], for_topic: bool) -> None:
        self.data = data
        self.fields = fields
        self.for_topic = for_topic
        pieces: list[Piece] = list(fields[sections.TAIL])
        self.size: int = fields[sections.SIZE]
        self.spans: tuple[Any, Any] = (fields[sections.PROPERTIES_SPAN], fields[sections.BODY_SPAN])
        self.message_id: str | None = fields[sections.PROPERTY_VALUES][0]
        self.assigned = self.message_id is None
        if self.message_id is None:
            self.message_id = sections.new_message_id()
            pieces = self._stamp_id(pieces, fields[sections.PROPERTIES_AT], self.message_id)
        self.pieces = pieces
        total = sum(len(p) if type(p) is bytes else p[1] - p[0] for p in pieces)
        # calloc'd: a block this large is fresh zero pages from the system, so nothing is
        # written twice; filled in place below before anything else sees it
        self.tail = bytes(total)
        self._at = 0  # bytes of the tail copied
        self._piece = 0  # the piece being copied, and how far into it
        self._offset = 0

    def _cut(self, pieces: list[Piece], start: int, end: int) -> list[Piece]:
        """The pieces of tail[start:end]."""
        out: list[Piece] = []
        at = 0
        for p in pieces:
            n = len(p) if type(p) is bytes else p[1] - p[0]
            lo, hi = max(start - at, 0), min(end - at, n)
            if lo < hi:
                if type(p) is bytes:
                    out.append(p[lo:hi])
                else:
                    out.append((p[0] + lo, p[0] + hi))
            at += n
        return out

    def _join(self, pieces: list[Piece]) -> bytes:
        """A few pieces as bytes (a small part of the tail)."""
        data = self.data
        return b"".join(p if type(p) is bytes else data[p[0] : p[1]] for p in pieces)

    def _stamp_id(
        self, pieces: list[Piece], props_at: tuple[int, int] | None, message_id: str
    ) -> list[Piece]:
        """The pieces with properties.message-id set (rebuild.assign_message_id's bytes): the
        properties section rebuilt (or a new one at the front, behind delivery annotations);
        the spans and the size move by what it added."""
        if props_at is None:
            first = pieces[0] if pieces else b""
            front = (
                len(first)
                if type(first) is bytes and first.startswith(_DELIVERY_ANNOTATIONS_PREFIX)
                else 0
            )
            start = end = front
            fields: list[bytes] = []
        else:
            start, end = props_at
            section = self._join(self._cut(pieces, start, end))
            fields = _properties_fields(section)[2]
        if fields:
            fields[0] = codec.enc_string(message_id)
        else:
            fields = [codec.enc_string(message_id)]
        section = b"\x00\x53\x73" + codec.enc_list(fields)
        delta = len(section) - (end - start)
        self.size += delta
        props_span, body_span = self.spans
        self.spans = (_moved(props_span, end, delta), _moved(body_span, end, delta))
        total = sum(len(p) if type(p) is bytes else p[1] - p[0] for p in pieces)
        return [*self._cut(pieces, 0, start), section, *self._cut(pieces, end, total)]

    def step(self) -> bool:
        """Copy up to COPY_CHUNK more bytes of the tail; True once it is whole."""
        dst, budget = _ffi.from_buffer(self.tail), COPY_CHUNK
        pieces = self.pieces
        while budget > 0 and self._piece < len(pieces):
            p = pieces[self._piece]
            if type(p) is bytes:
                start, end, src = 0, len(p), p
            else:
                start, end, src = p[0], p[1], self.data
            n = min(end - start - self._offset, budget)
            _ffi.memmove(dst + self._at, _ffi.from_buffer(src) + start + self._offset, n)
            self._at += n
            self._offset += n
            budget -= n
            if start + self._offset >= end:
                self._piece += 1
                self._offset = 0
        return self._piece >= len(pieces)

    def message(self) -> IncomingMessage:
        """The message, once step() said the tail is whole."""
        scanned = sections.scanned(self.fields)
        scanned.message_id, scanned.tail, scanned.size = self.message_id, self.tail, self.size
        scanned.properties_span, scanned.body_span = self.spans
        self.data = b""  # the transfer's bytes are not needed any more
        return to_incoming(scanned, self.for_topic, self.assigned)


def _moved(span: tuple[int, int] | None, end: int, delta: int) -> tuple[int, int] | None:
    """A span of the tail after `delta` bytes were added before `end`."""
    if span is None or span[0] < end:
        return span
    return (span[0] + delta, span[1] + delta)
