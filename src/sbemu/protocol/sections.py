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
from sbemu.protocol.sectionfields import SERVICE_ANNOTATIONS as SERVICE_ANNOTATIONS
from sbemu.protocol.sectionfields import PropertyValueError as PropertyValueError
from sbemu.protocol.sectionfields import (
    _header_fields,
    _property_fields,
    check_property_sizes,
    header_too_large,
    kept_delivery_annotations,
    message_annotations,
    service_decimals,
    too_deep_error,
)

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
_ONE = b"\x00\x00\x00\x01"  # a list32's count of one field
# A byte of a decimal's constructor (decimal64 0x84, decimal128 0x94) in a range: one search
_DECIMAL_BYTES = re.compile(b"[\x84\x94]").search


def scan_message(buf: bytes, quotas: bool = True) -> ScannedMessage:
    """Scan an encoded message, extracting routing fields and opaque byte ranges. `quotas`:
    apply Azure's property quotas (a send); False for a stored message rebuilt with what sbemu
    added to it (dead-letter properties), which must stay movable."""
    fields = scan_fields(buf, quotas)
    return ScannedMessage(*fields[:20], *fields[21:22])  # first-acquirer after the spans


def scan_fields(buf: bytes, quotas: bool = True) -> tuple[Any, ...]:
    """scan_message()'s first 20 fields as a tuple in ScannedMessage's order, a 21st: whether
    the message may be a batch envelope (see _scan), and a 22nd: the header's first-acquirer."""
    if type(buf) is not bytes:  # bytearray/memoryview: slices must be hashable bytes
        buf = bytes(buf)
    try:
        return _scan(buf, quotas)
    except SectionError:
        raise
    except _FAILURES as e:
        raise SectionError(f"malformed message: {e}") from e


def _scan(buf: bytes, quotas: bool = True, pieces: bool = False) -> tuple[Any, ...]:
    """The scan itself (callers translate _FAILURES into SectionError): ScannedMessage's
    fields, then whether the first body section is a data section whose payload starts like an
    encoded message (a section descriptor, in any form: sectioncodes.starts_section), which
    every batch envelope's is (messages._batch_payloads), so a plain message is not split and
    copied section by section. The counts and sizes Azure limits are checked as each section's
    bounds are known, before it is read (HeaderTooLarge, TooManySections).

    With `pieces`, the tail is not copied: the tail field is then a tuple of its pieces, bytes
    (what the scan rewrote) and (start, end) spans of `buf` (what it keeps as sent), for the
    caller to copy a slice at a time (a large message: largescan.py), and a 23rd field says
    where in the tail the properties section is ((start, end); None: it has none)."""
    n = len(buf)
    if n == 0:
        raise SectionError("empty message: no sections")
    durable = first_acquirer = None
    priority = ttl = None
    message_id = to = subject = reply_to = correlation_id = content_type = None
    session_id = reply_to_session_id = None
    partition_key = via_partition_key = None
    scheduled = None
    ann_parts: list[bytes] = []
    ann_count = 0
    tail_parts: list[Any] = []  # bytes (with `pieces`, spans too)
    run_start = run_end = -1  # current contiguous run of tail sections
    flushed = 0  # bytes of tail_parts
    props_span = body_span = None
    delivery_annotations = b""
    seen = 0
    grown = 0  # bytes a rewritten section added (or took) against the message as sent
    # bytes of the sections other than the body (Azure's header quota), counted only in a
    # message large enough to pass a quota (a count per section costs 4% of a small one's scan)
    head = 0
    big = quotas and n > MAX_PROPERTY_BYTES
    bodies = 1  # body sections past the first (Azure's batch count)
    props_at = None  # with `pieces`: the properties section's [start, end) in the tail
    may_be_batch = False
    pos = 0
    fast = _FAST
    while pos < n:
        hit = fast.get(buf[pos : pos + 4])
        if hit is not None:
            # _section_code and _skip inline for the form every SDK sends (see _FAST)
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
            code, vpos = _section_code(buf, pos)
            end = _skip(buf, vpos)
            bit = (1 << (code - HEADER)) if code in _SINGLE else 0
            structured = code in _STRUCTURED
        if bit:  # a section that may appear once: all but the body's
            if seen & bit:
                raise SectionError(f"duplicate section {code:#04x}")
            seen |= bit
            if big:  # Azure's quotas, checked before the section is read (sectioncodes)
                head += end - pos
                if head > MAX_HEADER_BYTES:
                    raise header_too_large(head)
                if code == APPLICATION_PROPERTIES and end - vpos > MAX_PROPERTY_BYTES:
                    check_property_sizes(buf, vpos, end)
        # stored sections that may hold structure (the header is re-built from its fields,
        # delivery-annotations are dropped, data sections are opaque, properties are checked
        # field by field); a value of at most MAX_VALUE_DEPTH bytes cannot nest that deep
        # (too_deep's first bound, inline)
        if structured and end - vpos > MAX_VALUE_DEPTH and too_deep(buf, vpos, end):
            raise too_deep_error(code)
        if code >= PROPERTIES:
            # A section stored as sent (properties, application-properties, the body, the
            # footer): joined to the run of tail sections before it when it follows it with a
            # smallulong descriptor, else a run of its own (re-emitted with one, contract
            # §1.6), or, for application-properties with a decimal in it, rewritten.
            rewritten = None
            if code == PROPERTIES:
                # A list of one str8 field (a message-id alone, as most senders set) is read
                # here; any other list field by field.
                c = buf[vpos]
                if c == 0xC0 and buf[vpos + 2] == 1 and buf[vpos + 3] == 0xA1:
                    if end == vpos + 5 + buf[vpos + 4]:
                        message_id = buf[vpos + 5 : end].decode("utf-8")
                        c = -1
                elif c == 0xD0 and buf[vpos + 5 : vpos + 9] == _ONE and buf[vpos + 9] == 0xA1:
                    if end == vpos + 11 + buf[vpos + 10]:
                        message_id = buf[vpos + 11 : end].decode("utf-8")
                        c = -1
                if c >= 0:
                    (
                        message_id, _, to, subject, reply_to, correlation_id, content_type,
                        _, _, _, session_id, _, reply_to_session_id,
                    ) = _property_fields(buf, vpos, end)  # fmt: skip
            elif code == APPLICATION_PROPERTIES and _DECIMAL_BYTES(buf, vpos, end) is not None:
                # Decimals are written as the service writes them (protocol/decimals.py): only
                # a section with a 0x84 or 0x94 byte in it is walked, and only one holding a
                # decimal is re-encoded.
                rewritten = service_decimals(buf, vpos, end)
            if vpos == pos + 3 and pos == run_end and rewritten is None:
                run_end = end  # contiguous with the previous tail section
                at = flushed + pos - run_start  # where this section starts in the tail
            else:
                if run_end >= 0:
                    tail_parts.append(
                        buf[run_start:run_end] if not pieces else (run_start, run_end)
                    )
                    flushed += run_end - run_start
                at = flushed
                if rewritten is not None:
                    tail_parts.append(b"\x00\x53\x74" + rewritten)
                    flushed += 3 + len(rewritten)
                    grown += 3 + len(rewritten) - (end - pos)
                    run_start = run_end = -1
                    props_span = (at + 3, at + 3 + len(rewritten))
                elif vpos == pos + 3:
                    run_start, run_end = pos, end
                else:
                    # Re-emit a ulong/symbolic descriptor as smallulong so the
                    # stored tail is deliverable to pyamqp as is (contract §1.6).
                    if not pieces:
                        tail_parts.append(bytes((0x00, 0x53, code)) + buf[vpos:end])
                    else:
                        tail_parts += (bytes((0x00, 0x53, code)), (vpos, end))
                    flushed += 3 + end - vpos
                    run_start = run_end = -1
            if pieces and code == PROPERTIES:
                props_at = (at, at + 3 + end - vpos)
            if code >= DATA:
                if code != FOOTER:
                    if body_span is None:
                        body_span = (at, at + 3 + end - vpos)
                        if code == DATA:  # see the docstring
                            p = vpos + (2 if buf[vpos] == 0xA0 else 5)
                            if p + 3 <= end and buf[p] == 0x00:  # a descriptor (in any form)
                                if buf[p + 1] == 0x53:  # smallulong, inline: every SDK's
                                    may_be_batch = 0x70 <= buf[p + 2] <= 0x78
                                else:
                                    may_be_batch = starts_section(buf, p, end)
                    else:
                        body_span = (body_span[0], at + 3 + end - vpos)
                        bodies += 1
                        if bodies > MAX_BODY_SECTIONS:
                            raise TooManySections(
                                f"more than {MAX_BODY_SECTIONS} body sections (a batch of more "
                                f"than {MAX_BODY_SECTIONS} messages)"
                            )
            elif code == APPLICATION_PROPERTIES and rewritten is None:
                props_span = (at + 3, at + 3 + end - vpos)
        elif code == HEADER:
            # A list of one field (durable alone, as most senders set it) is read here; any
            # other list field by field.
            c = buf[vpos]
            if (c == 0xC0 and end == vpos + 4 and buf[vpos + 2] == 1) or (
                c == 0xD0 and end == vpos + 10 and buf[vpos + 5 : vpos + 9] == _ONE
            ):
                c = buf[end - 1]
                if c == 0x41:
                    durable = True
                elif c == 0x42:
                    durable = False  # kept as sent: Azure hands durable=false back
                elif c != 0x40:
                    durable, priority, ttl, first_acquirer = _header_fields(buf, vpos, end)
            else:
                durable, priority, ttl, first_acquirer = _header_fields(buf, vpos, end)
        elif code == MESSAGE_ANNOTATIONS:
            ann_count, partition_key, via_partition_key, scheduled = message_annotations(
                buf, vpos, end, ann_parts
            )
        else:  # delivery-annotations: at the front of the tail whatever their place in the
            # message (pyamqp sends them after the body), put back before the message
            # annotations on the way out (build_message)
            delivery_annotations = kept_delivery_annotations(buf, vpos, end)
            grown += len(delivery_annotations) - (end - pos)
        pos = end
    if delivery_annotations:  # at the front of the tail: the spans move behind them
        shift = len(delivery_annotations)
        if props_span is not None:
            props_span = (props_span[0] + shift, props_span[1] + shift)
        if body_span is not None:
            body_span = (body_span[0] + shift, body_span[1] + shift)
        if props_at is not None:
            props_at = (props_at[0] + shift, props_at[1] + shift)
    tail: Any
    if pieces:  # runs as spans of buf, copied by the caller
        front = [delivery_annotations] if delivery_annotations else []
        tail = (*front, *tail_parts, *([(run_start, run_end)] if run_end >= 0 else []))
    elif tail_parts or delivery_annotations:
        if run_end >= 0:
            tail_parts.append(buf[run_start:run_end])
        if delivery_annotations:
            tail_parts.insert(0, delivery_annotations)
        tail = b"".join(tail_parts)
    else:  # one run of sections as sent (the common case)
        tail = buf[run_start:run_end] if run_end >= 0 else b""
    return (
        durable,
        priority,
        ttl,
        message_id,
        session_id,
        reply_to_session_id,
        correlation_id,
        subject,
        to,
        reply_to,
        content_type,
        partition_key,
        via_partition_key,
        scheduled,
        b"".join(ann_parts) if ann_parts else b"",
        ann_count,
        tail,
        n + grown,
        props_span,
        body_span,
        may_be_batch,
        first_acquirer,
        props_at,
    )
