"""Scan AMQP messages section by section, without a full decode (what is read in the less
common section forms is ``sectionfields.py``, the rebuilding ``rebuild.py``, the shared codes
and errors ``sectioncodes.py``; all re-exported here).

[AMQP 1.0 3.2] A message is a sequence of sections, each a described value:
header 0x70, delivery-annotations 0x71, message-annotations 0x72, properties
0x73, application-properties 0x74, data 0x75, amqp-sequence 0x76, amqp-value
0x77, footer 0x78.

The partitions side only needs a handful of fields (header, a few properties and
annotations) to route and store a message; everything else is kept as opaque
byte ranges so the stored message is what the client sent. Scanning accepts
descriptors in all three forms (smallulong, ulong, symbolic); building always
emits ``0x00 0x53 <code>`` because pyamqp reads the section code at byte 2
(contract §1.6).
"""

from __future__ import annotations

import re
from typing import Any

from sbemu.protocol.codec import _WIDTH, DecodeError, _skip
from sbemu.protocol.nesting import MAX_VALUE_DEPTH, too_deep
from sbemu.protocol.rebuild import REMOVE as REMOVE
from sbemu.protocol.rebuild import SYSTEM_OVERRIDE_PREFIX as SYSTEM_OVERRIDE_PREFIX
from sbemu.protocol.rebuild import (
    assign_message_id,
    build_message,
    build_message_parts,
    new_message_id,
    read_application_properties,
    read_properties,
    split_batch,
    stamp,
)
from sbemu.protocol.sectioncodes import (
    _ALLOWED,
    _FAILURES,
    AMQP_SEQUENCE,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DATA,
    DELIVERY_ANNOTATIONS,
    FOOTER,
    HEADER,
    MAX_BODY_SECTIONS,
    MAX_HEADER_BYTES,
    MAX_PROPERTY_BYTES,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    PROPERTY_FIELDS,
    HeaderTooLarge,
    ScannedMessage,
    SectionError,
    SectionTooDeep,
    TooManySections,
    _section_code,
    _unpack_I,
    starts_section,
)
from sbemu.protocol.sectionfields import (
    _NO_HEADER,
    _NO_PROPERTIES,
    SHORT_HEADERS,
    check_property_sizes,
    header_fields,
    header_too_large,
    kept_delivery_annotations,
    message_annotations,
    property_values,
    service_decimals,
    too_deep_error,
)
from sbemu.protocol.sectionfields import SERVICE_ANNOTATIONS as SERVICE_ANNOTATIONS
from sbemu.protocol.sectionfields import PropertyValueError as PropertyValueError

__all__ = [
    "MAX_BODY_SECTIONS",
    "MAX_HEADER_BYTES",
    "MAX_PROPERTY_BYTES",
    "SERVICE_ANNOTATIONS",
    "PROPERTY_FIELDS",
    "HeaderTooLarge",
    "TooManySections",
    "PropertyValueError",
    "ScannedMessage",
    "SectionError",
    "SectionTooDeep",
    "assign_message_id",
    "build_message",
    "build_message_parts",
    "new_message_id",
    "read_application_properties",
    "read_properties",
    "scan_message",
    "split_batch",
    "stamp",
    "starts_section",
]

# Sections that may appear at most once [AMQP 1.0 3.2]; data and amqp-sequence repeat.
_SINGLE = frozenset(
    {HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, FOOTER}
)


# Sections whose value is checked for depth as a whole; properties (a list, sectioncodes'
# _ALLOWED) are checked field by field as _property_fields walks them.
_STRUCTURED = frozenset(
    {MESSAGE_ANNOTATIONS, APPLICATION_PROPERTIES, AMQP_SEQUENCE, AMQP_VALUE, FOOTER}
)
# The scan's fast path: the first four bytes of a section in the form every SDK sends (the
# smallulong descriptor 0x00 0x53 <code> and a constructor its section allows) -> (code, the
# constructor's width as codec._WIDTH gives it, the section's bit if it may appear only once,
# whether its value is checked for depth). Anything else (ulong or symbolic descriptors, a
# described amqp-value, bad input) goes through _section_code and _skip as before.
_FAST: dict[bytes, tuple[int, int, int, bool]] = {}
for _code, _allowed in _ALLOWED.items():
    for _ctor in _allowed if _allowed is not None else range(0x40, 0x100):
        _w = _WIDTH[_ctor]
        if _w is not None:
            _FAST[bytes((0x00, 0x53, _code, _ctor))] = (
                _code,
                _w,
                (1 << (_code - HEADER)) if _code in _SINGLE else 0,
                _code in _STRUCTURED,
            )
del _code, _allowed, _ctor, _w
# A byte of a decimal's constructor (decimal64 0x84, decimal128 0x94) in a range: one search
_DECIMAL_BYTES = re.compile(b"[\x84\x94]").search


def scan_message(buf: bytes, quotas: bool = True) -> ScannedMessage:
    """Scan an encoded message, extracting routing fields and opaque byte ranges. `quotas`:
    apply Azure's property quotas (a send); False for a stored message rebuilt with what sbemu
    added to it (dead-letter properties), which must stay movable."""
    return scanned(scan_fields(buf, quotas))


def scanned(fields: tuple[Any, ...]) -> ScannedMessage:
    """The ScannedMessage of _scan's answer."""
    header, props, ann, tail, size, properties_span, body_span, _, _ = fields
    durable, priority, ttl, first_acquirer = header
    message_id, session_id, reply_session, correlation_id, subject, to, reply_to, ctype = props
    partition_key, via_partition_key, scheduled, annotations, annotation_count = ann
    return ScannedMessage(
        durable, priority, ttl, message_id, session_id, reply_session, correlation_id,
        subject, to, reply_to, ctype, partition_key, via_partition_key, scheduled, annotations,
        annotation_count, tail, size, properties_span, body_span, first_acquirer,
    )  # fmt: skip


def scan_fields(buf: bytes, quotas: bool = True) -> tuple[Any, ...]:
    """_scan(), its failures translated into SectionError."""
    if type(buf) is not bytes:  # bytearray/memoryview: slices must be hashable bytes
        buf = bytes(buf)
    try:
        return _scan(buf, quotas)
    except SectionError:
        raise
    except _FAILURES as e:
        raise SectionError(f"malformed message: {e}") from e


# _scan's answer, by index: the header's fields (durable, priority, ttl, first-acquirer: as
# header_fields), the properties' (property_values), the message annotations'
# (message_annotations), the tail and the message's size, the spans in the tail of the
# application-properties map and of the body sections, whether the message may be a batch
# envelope (its first body section a data section whose payload starts like an encoded
# message), and, with `pieces`, where in the tail the properties section is.
(HEADER_VALUES, PROPERTY_VALUES, ANNOTATION_VALUES, TAIL, SIZE, PROPERTIES_SPAN, BODY_SPAN,
 MAY_BE_BATCH, PROPERTIES_AT) = range(9)  # fmt: skip
# message_annotations' answer for a message without annotations
_NO_ANNOTATIONS: tuple[Any, ...] = (None, None, None, b"", 0)

# How _scan reads a message, in one pass, each section's bounds known before it is read (so the
# counts and sizes Azure limits are checked first: HeaderTooLarge, TooManySections): the form
# every SDK sends is read inline (_FAST, SHORT_HEADERS, property_values' one-field list), any
# other by sectionfields' readers; the sections stored as sent (properties on) make up the tail,
# kept as runs of `buf` (a run: sections with smallulong descriptors one after the other), each
# a slice, or with `pieces` a span, for the caller to copy a slice at a time (a large message:
# largescan.py). MAY_BE_BATCH keeps a plain message from being split and copied section by
# section (messages._batch_payloads: every batch envelope's payload starts with a section
# descriptor, in any form: sectioncodes.starts_section). Its state: `parts` of the tail (bytes;
# with `pieces`, spans too) and the open run [run_start, run_end) (-1: none), `flushed` bytes in
# `parts`; `seen`, bits of the sections that may appear once; `grown`, bytes a rewritten
# section added (or took) against the message as sent; `head`, bytes of the sections but the
# body (Azure's header quota), summed only in a `big` message; `bodies`, Azure's batch count.


def _scan(buf: bytes, quotas: bool = True, pieces: bool = False) -> tuple[Any, ...]:
    """The fields above (callers translate _FAILURES into SectionError); with `pieces` a tail of
    pieces: bytes it rewrote, (start, end) spans of `buf` it keeps as sent."""
    n = len(buf)
    if n == 0:
        raise SectionError("empty message: no sections")
    header, props, ann = _NO_HEADER, _NO_PROPERTIES, _NO_ANNOTATIONS
    parts: list[Any] = []
    props_span = body_span = props_at = None
    run_start = run_end = -1
    flushed = seen = grown = head = pos = 0
    front = b""  # the kept delivery annotations, put at the front of the tail
    bodies, may_be_batch, fast, big = 1, False, _FAST, quotas and n > MAX_PROPERTY_BYTES
    while pos < n:
        hit = fast.get(buf[pos : pos + 4])
        if hit is not None:  # _section_code and _skip inline for the form every SDK sends
            code, w, bit, structured = hit
            vpos = pos + 3
            if w >= 0:
                end = pos + 4 + w
            elif w == -1:
                end = pos + 5 + buf[pos + 4]
            else:
                end = pos + 8 + _unpack_I(buf, pos + 4)[0]
            if end > n:
                raise DecodeError(f"value at {vpos} runs past the end of the buffer")
        else:
            code, vpos, end, bit, structured = _section(buf, pos)
        if bit:  # a section that may appear once: all but the body's
            if seen & bit or big:  # a duplicate, or Azure's quotas to apply (sectioncodes)
                head = _once(buf, code, pos, vpos, end, head, seen & bit)
            seen |= bit
        if structured and end - vpos > MAX_VALUE_DEPTH and too_deep(buf, vpos, end):
            raise too_deep_error(code)  # (_STRUCTURED; too_deep's first bound inline)
        if code >= PROPERTIES:  # stored as sent, but application-properties with a decimal
            if code == PROPERTIES:
                props = property_values(buf, vpos, end)
            decimals = code == APPLICATION_PROPERTIES and _DECIMAL_BYTES(buf, vpos, end)
            rewritten = service_decimals(buf, vpos, end) if decimals else None  # (None: none)
            if vpos == pos + 3 and rewritten is None and (pos == run_end or run_end < 0):
                run_start = pos if run_end < 0 else run_start
                run_end = end  # the open run, this section added
                at = flushed + pos - run_start  # where this section starts in the tail
            else:
                at, flushed, run_start, run_end = _new_run(
                    buf, pos, vpos, end, rewritten, parts, flushed, run_start, run_end, pieces
                )
            if DATA <= code < FOOTER:  # a body section
                if body_span is None:
                    body_span = (at, at + 3 + end - vpos)
                    p = vpos + (2 if buf[vpos] == 0xA0 else 5)  # a data section's payload
                    if code == DATA and p + 3 <= end and buf[p] == 0x00:  # starts described
                        may_be_batch = starts_section(buf, p, end)
                else:
                    body_span = (body_span[0], at + 3 + end - vpos)
                    bodies += 1
                    if bodies > MAX_BODY_SECTIONS:
                        raise _too_many_sections()
            elif code == APPLICATION_PROPERTIES:
                size = end - vpos if rewritten is None else len(rewritten)
                props_span = (at + 3, at + 3 + size)
                grown += 0 if rewritten is None else 3 + size - (end - pos)
            elif code == PROPERTIES and pieces:
                props_at = (at, at + 3 + end - vpos)
        elif code == HEADER:
            header = SHORT_HEADERS.get(buf[pos:end]) or header_fields(buf, vpos, end)
        elif code == MESSAGE_ANNOTATIONS:
            ann = message_annotations(buf, vpos, end)
        else:  # delivery-annotations (build_message puts them back before the annotations)
            front = kept_delivery_annotations(buf, vpos, end)
            grown += len(front) - (end - pos)
        pos = end
    if parts or front or pieces:
        tail, props_span, body_span, props_at = _tail(
            buf, parts, run_start, run_end, front, pieces, (props_span, body_span, props_at)
        )
    else:  # one run of sections as sent (the common case)
        tail = buf[run_start:run_end] if run_end >= 0 else b""
    return header, props, ann, tail, n + grown, props_span, body_span, may_be_batch, props_at


def _section(buf: bytes, pos: int) -> tuple[int, int, int, int, bool]:
    """A section in any form _FAST does not know: (code, where its value starts, its end, its
    bit if it may appear only once, whether its value is checked for depth)."""
    code, vpos = _section_code(buf, pos)
    end = _skip(buf, vpos)
    return code, vpos, end, (1 << (code - HEADER)) if code in _SINGLE else 0, code in _STRUCTURED


def _once(buf: bytes, code: int, pos: int, vpos: int, end: int, head: int, duplicate: int) -> int:
    """A section that may appear once, [pos, end), in a message large enough to pass Azure's
    quotas, or a `duplicate`: refuses the duplicate, applies the header quota and (for
    application-properties) the property quota; returns the header bytes so far."""
    if duplicate:
        raise SectionError(f"duplicate section {code:#04x}")
    head += end - pos
    if head > MAX_HEADER_BYTES:
        raise header_too_large(head)
    if code == APPLICATION_PROPERTIES and end - vpos > MAX_PROPERTY_BYTES:
        check_property_sizes(buf, vpos, end)
    return head


def _too_many_sections() -> TooManySections:
    return TooManySections(
        f"more than {MAX_BODY_SECTIONS} body sections (a batch of more than "
        f"{MAX_BODY_SECTIONS} messages)"
    )


def _new_run(
    buf: bytes,
    pos: int,
    vpos: int,
    end: int,
    rewritten: bytes | None,
    parts: list[Any],
    flushed: int,
    run_start: int,
    run_end: int,
    pieces: bool,
) -> tuple[int, int, int, int]:
    """A tail section [pos, end) that does not extend the run before it: that run goes into
    `parts` (a span of buf with `pieces`), and the section starts a run of its own, or, rewritten
    (`rewritten`, application-properties) or with a ulong or symbolic descriptor, goes into
    `parts` as well, re-emitted with a smallulong descriptor so the stored tail is deliverable
    to pyamqp as is (contract §1.6). Returns (where the section starts in the tail, the bytes in
    `parts`, the run's start and end: -1 when none is open)."""
    if run_end >= 0:
        parts.append(buf[run_start:run_end] if not pieces else (run_start, run_end))
        flushed += run_end - run_start
    at = flushed
    if rewritten is not None:
        parts.append(b"\x00\x53\x74" + rewritten)
        return at, flushed + 3 + len(rewritten), -1, -1
    if vpos == pos + 3:
        return at, flushed, pos, end
    code = bytes((0x00, 0x53, _section_code(buf, pos)[0]))
    if not pieces:
        parts.append(code + buf[vpos:end])
    else:
        parts += (code, (vpos, end))
    return at, flushed + 3 + end - vpos, -1, -1


def _tail(
    buf: bytes,
    parts: list[Any],
    run_start: int,
    run_end: int,
    front: bytes,
    pieces: bool,
    spans: tuple[tuple[int, int] | None, ...],
) -> tuple[Any, ...]:
    """The message's tail, then `spans` (positions in it) moved behind what goes first:
    `front` (the kept delivery annotations), then the sections in `parts` and the run still
    open; with `pieces` a tuple of them (runs as spans of buf, for the caller to copy), else
    one bytes."""
    if front:
        k = len(front)
        spans = tuple(None if s is None else (s[0] + k, s[1] + k) for s in spans)
    if pieces:  # runs as spans of buf, copied by the caller
        kept = (front,) if front else ()
        return ((*kept, *parts, *([(run_start, run_end)] if run_end >= 0 else [])), *spans)
    if run_end >= 0:
        parts.append(buf[run_start:run_end])
    if front:
        parts.insert(0, front)
    return (b"".join(parts), *spans)
