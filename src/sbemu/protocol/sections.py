"""Scan and rebuild AMQP messages section by section, without a full decode.

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

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sbemu.protocol.codec import (
    DecodeError,
    _decode,
    _skip,
    enc_list,
    enc_map_body,
    enc_string,
    enc_symbol,
    enc_uint,
)
from sbemu.protocol.decimals import DecimalRangeError, rewrite_decimals

__all__ = [
    "SERVICE_ANNOTATIONS",
    "PROPERTY_FIELDS",
    "PropertyValueError",
    "ScannedMessage",
    "SectionError",
    "assign_message_id",
    "build_message",
    "new_message_id",
    "read_application_properties",
    "read_properties",
    "scan_message",
    "split_batch",
    "stamp",
]

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

# Keys the service owns (contract §3.5, §3.7): "Client-supplied service
# annotations ... must be ignored/overwritten on enqueue".
SERVICE_ANNOTATIONS: frozenset[str] = frozenset(
    {
        "x-opt-sequence-number",
        "x-opt-enqueued-time",
        "x-opt-locked-until",
        "x-opt-partition-id",
        "x-opt-message-state",
        "x-opt-deadletter-source",
        "x-opt-enqueue-sequence-number",
        "x-opt-lock-token",
    }
)
_SERVICE_B = frozenset(k.encode("ascii") for k in SERVICE_ANNOTATIONS)

# Annotations the scan extracts; value = slot number used in scan_message.
_PARTITION_KEY = 1
_VIA_PARTITION_KEY = 2
_SCHEDULED = 3
_WANTED = {
    b"x-opt-partition-key": _PARTITION_KEY,
    b"x-opt-via-partition-key": _VIA_PARTITION_KEY,
    b"x-opt-scheduled-enqueue-time": _SCHEDULED,
}

# [AMQP 1.0 3.2.4] properties list field order
PROPERTY_FIELDS: tuple[str, ...] = (
    "message-id",
    "user-id",
    "to",
    "subject",
    "reply-to",
    "correlation-id",
    "content-type",
    "content-encoding",
    "absolute-expiry-time",
    "creation-time",
    "group-id",
    "group-sequence",
    "reply-to-group-id",
)

# [AMQP 1.0 3.2] symbolic descriptors of the message sections
_SYMBOLIC = {
    b"amqp:header:list": HEADER,
    b"amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    b"amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    b"amqp:properties:list": PROPERTIES,
    b"amqp:application-properties:map": APPLICATION_PROPERTIES,
    b"amqp:data:binary": DATA,
    b"amqp:amqp-sequence:list": AMQP_SEQUENCE,
    b"amqp:amqp-value:*": AMQP_VALUE,
    b"amqp:footer:map": FOOTER,
}

# Constructors allowed as the value of each section. null is tolerated for the
# list/map sections (an absent composite); garbage is not.
_LISTS = frozenset({0x40, 0x45, 0xC0, 0xD0})
_MAPS = frozenset({0x40, 0xC1, 0xD1})
_BINARY = frozenset({0xA0, 0xB0})
_ALLOWED: dict[int, frozenset[int] | None] = {
    HEADER: _LISTS,
    DELIVERY_ANNOTATIONS: _MAPS,
    MESSAGE_ANNOTATIONS: _MAPS,
    PROPERTIES: _LISTS,
    APPLICATION_PROPERTIES: _MAPS,
    DATA: _BINARY,
    AMQP_SEQUENCE: frozenset({0x45, 0xC0, 0xD0}),
    AMQP_VALUE: None,  # any value
    FOOTER: _MAPS,
}
# Sections that may appear at most once [AMQP 1.0 3.2]; data and amqp-sequence repeat.
_SINGLE = frozenset(
    {HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, FOOTER}
)

_unpack_I = struct.Struct(">I").unpack_from
_unpack_Q = struct.Struct(">Q").unpack_from

_FAILURES = (DecodeError, IndexError, struct.error, ValueError, TypeError, RecursionError)


class SectionError(ValueError):
    """Raised when a message's section structure is malformed or truncated."""


@dataclass(slots=True)
class ScannedMessage:
    """The routing-relevant fields of a message plus its opaque byte ranges."""

    durable: bool
    priority: int | None
    ttl_ms: int | None
    message_id: str | None
    session_id: str | None
    reply_to_session_id: str | None
    correlation_id: str | None
    subject: str | None
    to: str | None
    reply_to: str | None
    content_type: str | None
    partition_key: str | None
    via_partition_key: str | None
    scheduled_enqueue_time_ms: int | None
    # client message-annotation map entries (no map header) minus SERVICE_ANNOTATIONS
    annotations: bytes
    annotation_count: int
    # properties, application-properties, body sections and footer, byte-for-byte
    # as received; only a ulong/symbolic section descriptor is rewritten to
    # 0x00 0x53 <code> (contract §1.6), so the tail can be delivered as is
    tail: bytes
    size: int
    # [start, end) in `tail` of the application-properties map value (the encoded map), and
    # of the body sections (data / amqp-sequence / amqp-value, encoded with descriptors)
    properties_span: tuple[int, int] | None = None
    body_span: tuple[int, int] | None = None


def _section_code(buf: bytes, pos: int) -> tuple[int, int]:
    """Return (section code, value position) for the section starting at pos."""
    if buf[pos] != 0x00:
        raise SectionError(f"expected a described section at {pos}, got {buf[pos]:#04x}")
    d = buf[pos + 1]
    if d == 0x53:  # smallulong, the form every SDK sends
        code, vpos = buf[pos + 2], pos + 3
    elif d == 0x80:  # ulong: domain 0x00000000, code in the low bits
        code, vpos = _unpack_Q(buf, pos + 2)[0], pos + 10
    elif d == 0xA3 or d == 0xB3:  # sym8 / sym32
        if d == 0xA3:
            start = pos + 3
            vpos = start + buf[pos + 2]
        else:
            start = pos + 6
            vpos = start + _unpack_I(buf, pos + 2)[0]
        if vpos > len(buf):
            raise SectionError("truncated section descriptor")
        code = _SYMBOLIC.get(bytes(buf[start:vpos]), -1)
    else:
        raise SectionError(f"unsupported section descriptor constructor {d:#04x} at {pos}")
    if not HEADER <= code <= FOOTER:
        raise SectionError(f"unknown section descriptor {code:#x} at {pos}")
    allowed = _ALLOWED[code]
    if allowed is not None and buf[vpos] not in allowed:
        raise SectionError(f"section {code:#04x} has a value of type {buf[vpos]:#04x}")
    return code, vpos


# properties fields the scan needs: message-id, to, subject, reply-to,
# correlation-id, content-type, group-id, reply-to-group-id (bit i = field i)
_PROPERTY_MASK = sum(1 << i for i in (0, 2, 3, 4, 5, 6, 10, 12))


def _property_fields(buf: bytes, vpos: int, end: int) -> list[str | None]:
    """Render the properties fields in _PROPERTY_MASK as text; 13 slots, others None.

    Unwanted fields are skipped, not decoded, and the common str8 case is
    decoded inline: this is the costliest part of a scan.
    """
    out: list[str | None] = [None] * 13
    c = buf[vpos]
    if c == 0xC0:
        count, p = buf[vpos + 2], vpos + 3
    elif c == 0xD0:
        count, p = _unpack_I(buf, vpos + 5)[0], vpos + 9
    else:  # list0 or null: every field absent
        return out
    n = len(buf)
    mask = _PROPERTY_MASK
    for i in range(count):
        c = buf[p]
        if c == 0x40:  # null: by far the most common field value
            p += 1
        elif not (mask >> i) & 1:  # also skips fields beyond the 13 we know
            p = _skip(buf, p)
        elif c == 0xA1:
            q = p + 2 + buf[p + 1]
            if q > n:
                raise SectionError("truncated string field")
            out[i] = buf[p + 2 : q].decode("utf-8")
            p = q
        else:
            v, p = _decode(buf, p)
            out[i] = _render(v)
    if p != end:
        raise SectionError("properties fields do not match the list size")
    return out


def _header_fields(buf: bytes, vpos: int, end: int) -> tuple[bool, int | None, int | None]:
    """Return (durable, priority, ttl) from the header list at vpos."""
    c = buf[vpos]
    if c == 0xC0:
        count, p = buf[vpos + 2], vpos + 3
    elif c == 0xD0:
        count, p = _unpack_I(buf, vpos + 5)[0], vpos + 9
    else:  # list0 or null: all defaults
        return False, None, None
    fields: list[Any] = [None, None, None]
    for i in range(count):
        if i < 3:
            fields[i], p = _decode(buf, p)
        else:
            p = _skip(buf, p)
    if p != end:
        raise SectionError("header fields do not match the list size")
    durable, priority, ttl = fields
    if not (priority is None or type(priority) is int) or not (ttl is None or type(ttl) is int):
        raise SectionError("header priority/ttl must be integers")
    return durable is True, priority, ttl


def _render(v: Any) -> str | None:
    """Render a message-id-like value as text (uuid -> str, int -> str, binary -> hex)."""
    if v is None or type(v) is str:
        return v
    if isinstance(v, str):  # Symbol
        return str(v)
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, int):
        return str(int(v))
    return str(v)


def _partition_key_text(v: Any) -> str | None:
    """A partition key as text. A received message sent again carries it as AMQP binary
    (pyamqp decodes the string the service sent into bytes and encodes bytes back as binary):
    its UTF-8 text is the key the sender set, and what is compared with the SessionId [P6]."""
    if type(v) is bytes:
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            raise SectionError("x-opt-partition-key must be a string (or UTF-8 binary)") from None
    return _render(v)


def scan_message(buf: bytes) -> ScannedMessage:
    """Scan an encoded message, extracting routing fields and opaque byte ranges."""
    if type(buf) is not bytes:  # bytearray/memoryview: slices must be hashable bytes
        buf = bytes(buf)
    try:
        return _scan(buf)
    except SectionError:
        raise
    except _FAILURES as e:
        raise SectionError(f"malformed message: {e}") from e


def _scan(buf: bytes) -> ScannedMessage:
    n = len(buf)
    if n == 0:
        raise SectionError("empty message: no sections")
    durable = False
    priority = ttl = None
    props: list[str | None] | None = None
    partition_key = via_partition_key = None
    scheduled = None
    ann_parts: list[bytes] = []
    ann_count = 0
    tail_parts: list[bytes] = []
    run_start = run_end = -1  # current contiguous run of tail sections
    flushed = 0  # bytes of tail_parts
    props_span = body_span = None
    delivery_annotations = b""
    seen = 0
    grown = 0  # bytes a rewritten section added (or took) against the message as sent
    pos = 0
    while pos < n:
        code, vpos = _section_code(buf, pos)
        end = _skip(buf, vpos)
        if code in _SINGLE:
            bit = 1 << (code - HEADER)
            if seen & bit:
                raise SectionError(f"duplicate section {code:#04x}")
            seen |= bit
        if code == DELIVERY_ANNOTATIONS:
            # Kept, as the service keeps them (they reach the receiver beside its
            # x-opt-lock-token): stored at the front of the tail whatever their place in the
            # message (pyamqp sends them after the body), and put back before the message
            # annotations on the way out (build_message).
            value = buf[vpos:end]
            if buf.find(b"x-opt-lock-token", vpos, end) >= 0:  # a received message sent again
                value = _without_lock_token(buf, vpos, end) or value
            delivery_annotations = _DELIVERY_ANNOTATIONS_PREFIX + value
            grown += len(delivery_annotations) - (end - pos)
        elif code >= PROPERTIES:
            if code == PROPERTIES:
                props = _property_fields(buf, vpos, end)
            rewritten = None
            # Decimals are written as the service writes them (protocol/decimals.py). The
            # check costs two byte searches; only a section with a 0x84 or 0x94 byte in it
            # is walked, and only one holding a decimal is re-encoded.
            if code == APPLICATION_PROPERTIES and (
                buf.find(b"\x94", vpos, end) >= 0 or buf.find(b"\x84", vpos, end) >= 0
            ):
                rewritten = _service_decimals(buf, vpos, end)
            if rewritten is not None:
                if run_end >= 0:
                    tail_parts.append(buf[run_start:run_end])
                    flushed += run_end - run_start
                at = flushed
                tail_parts.append(b"\x00\x53\x74" + rewritten)
                flushed += 3 + len(rewritten)
                grown += 3 + len(rewritten) - (end - pos)
                run_start = run_end = -1
                props_span = (at + 3, at + 3 + len(rewritten))
            elif vpos == pos + 3 and pos == run_end:
                run_end = end  # contiguous with the previous tail section
                at = flushed + pos - run_start  # where this section starts in the tail
            else:
                if run_end >= 0:
                    tail_parts.append(buf[run_start:run_end])
                    flushed += run_end - run_start
                at = flushed
                if vpos == pos + 3:
                    run_start, run_end = pos, end
                else:
                    # Re-emit a ulong/symbolic descriptor as smallulong so the
                    # stored tail is deliverable to pyamqp as is (contract §1.6).
                    tail_parts.append(bytes((0x00, 0x53, code)) + buf[vpos:end])
                    flushed += 3 + end - vpos
                    run_start = run_end = -1
            if code == APPLICATION_PROPERTIES:
                if rewritten is None:
                    props_span = (at + 3, at + 3 + end - vpos)
            elif DATA <= code <= AMQP_VALUE:
                body_span = (body_span[0] if body_span else at, at + 3 + end - vpos)
        elif code == MESSAGE_ANNOTATIONS:
            c = buf[vpos]
            if c == 0xC1:
                count, p = buf[vpos + 2], vpos + 3
            elif c == 0xD1:
                count, p = _unpack_I(buf, vpos + 5)[0], vpos + 9
            else:  # null
                count, p = 0, end
            if count & 1:
                raise SectionError("message-annotations map has an odd element count")
            keep_from = p
            for _ in range(count >> 1):
                kpos = p
                if buf[p] == 0xA3:  # sym8 key: compare raw bytes, no decode
                    kend = p + 2 + buf[p + 1]
                    key: Any = buf[p + 2 : kend]
                else:  # sym32, a (non-conforming) string, or a ulong key
                    kv, kend = _decode(buf, p)
                    key = kv.encode("utf-8") if isinstance(kv, str) else None
                p = _skip(buf, kend)
                if key in _SERVICE_B:
                    if keep_from < kpos:
                        ann_parts.append(buf[keep_from:kpos])
                    keep_from = p
                    continue
                ann_count += 1
                slot = _WANTED.get(key) if key is not None else None
                if slot is not None:
                    value = _decode(buf, kend)[0]
                    if slot == _SCHEDULED:
                        if value is not None and (
                            not isinstance(value, int) or value is True or value is False
                        ):
                            raise SectionError(
                                "x-opt-scheduled-enqueue-time must be a timestamp or long"
                            )
                        scheduled = None if value is None else int(value)
                    else:
                        text = _partition_key_text(value)
                        if slot == _PARTITION_KEY:
                            partition_key = text
                        else:
                            via_partition_key = text
                        if text is not None and type(value) is not str:
                            # stored (and echoed) as the string the service keys on: .NET
                            # reads it with a (string) cast [contract 3.7]
                            if keep_from < kpos:
                                ann_parts.append(buf[keep_from:kpos])
                            ann_parts.append(buf[kpos:kend] + enc_string(text))
                            keep_from = p
            if p != end:
                raise SectionError("message-annotations entries do not match the map size")
            if keep_from < p:
                ann_parts.append(buf[keep_from:p])
        elif code == HEADER:
            durable, priority, ttl = _header_fields(buf, vpos, end)
        pos = end
    if run_end >= 0:
        tail_parts.append(buf[run_start:run_end])
    if delivery_annotations:
        tail_parts.insert(0, delivery_annotations)
        shift = len(delivery_annotations)
        if props_span is not None:
            props_span = (props_span[0] + shift, props_span[1] + shift)
        if body_span is not None:
            body_span = (body_span[0] + shift, body_span[1] + shift)

    if props is not None:
        message_id = props[0]
        to = props[2]
        subject = props[3]
        reply_to = props[4]
        correlation_id = props[5]
        content_type = props[6]
        session_id = props[10]
        reply_to_session_id = props[12]
    else:
        message_id = to = subject = reply_to = correlation_id = content_type = None
        session_id = reply_to_session_id = None

    return ScannedMessage(
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
        b"".join(ann_parts),
        ann_count,
        b"".join(tail_parts),
        n + grown,
        props_span,
        body_span,
    )


class PropertyValueError(SectionError):
    """An application property value the service cannot hold (e.g. a decimal beyond .NET's)."""


def _service_decimals(buf: bytes, vpos: int, end: int) -> bytes | None:
    """The application-properties value at vpos with its decimals in the service's encoding,
    or None when it holds none."""
    try:
        value_end, rewritten = rewrite_decimals(buf, vpos)
    except DecimalRangeError as e:
        raise PropertyValueError(f"an application property cannot be stored: {e}") from None
    if value_end != end:
        raise SectionError("application-properties: the value does not match the section")
    return rewritten


def _map_entries(buf: bytes, vpos: int, end: int) -> tuple[bytes, int]:
    """(the encoded key/value entries, the pair count) of the map (or null) at vpos."""
    c = buf[vpos]
    if c == 0xC1:
        return buf[vpos + 3 : end], buf[vpos + 2] >> 1
    if c == 0xD1:
        return buf[vpos + 9 : end], _unpack_I(buf, vpos + 5)[0] >> 1
    if c == 0x40:
        return b"", 0
    raise SectionError(f"annotations must be a map, not constructor {c:#04x}")


def _without_lock_token(buf: bytes, vpos: int, end: int) -> bytes | None:
    """The delivery-annotations map at vpos without an x-opt-lock-token entry (the service
    stamps its own on delivery); None when it has none."""
    entries, count = _map_entries(buf, vpos, end)
    kept: list[bytes] = []
    p, dropped = 0, False
    for _ in range(count):
        k_end = _skip(entries, p)
        v_end = _skip(entries, k_end)
        key = _decode(entries, p)[0]
        if key == "x-opt-lock-token":
            dropped = True
        else:
            kept.append(entries[p:v_end])
        p = v_end
    if p != len(entries):
        raise SectionError("delivery-annotations entries do not match the map size")
    return enc_map_body(b"".join(kept), len(kept)) if dropped else None


def new_message_id() -> str:
    """A service-assigned MessageId in Azure's form: a GUID as 32 lower-case hex digits, no
    dashes (what the service gives a message whose sender set none; the same form as the
    Track 1 .NET client's `Guid.NewGuid().ToString("N")`)."""
    return uuid.uuid4().hex


def assign_message_id(scanned: ScannedMessage, message_id: str) -> ScannedMessage:
    """Return `scanned` with properties.message-id set to `message_id` (an AMQP string).

    Only the properties section is rebuilt (its other fields keep their encodings; a section
    is created at the front of the tail when the message had none); application properties
    and body stay byte-for-byte, and their spans move by the size difference.
    """
    tail = scanned.tail
    try:
        start, end, fields = _properties_fields(tail)
    except SectionError:
        raise
    except _FAILURES as e:
        raise SectionError(f"malformed tail: {e}") from e
    if fields:
        fields[0] = enc_string(message_id)
    else:
        fields = [enc_string(message_id)]
    section = b"\x00\x53\x73" + enc_list(fields)
    delta = len(section) - (end - start)

    def moved(span: tuple[int, int] | None) -> tuple[int, int] | None:
        if span is None or span[0] < end:
            return span
        return (span[0] + delta, span[1] + delta)

    out = ScannedMessage(
        scanned.durable,
        scanned.priority,
        scanned.ttl_ms,
        message_id,
        scanned.session_id,
        scanned.reply_to_session_id,
        scanned.correlation_id,
        scanned.subject,
        scanned.to,
        scanned.reply_to,
        scanned.content_type,
        scanned.partition_key,
        scanned.via_partition_key,
        scanned.scheduled_enqueue_time_ms,
        scanned.annotations,
        scanned.annotation_count,
        tail[:start] + section + tail[end:],
        scanned.size + delta,
        moved(scanned.properties_span),
        moved(scanned.body_span),
    )
    return out


def split_batch(buf: bytes) -> list[bytes]:
    """Return the payload of each data section of a batch envelope (contract §3.4)."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    try:
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n:
            code, vpos = _section_code(buf, pos)
            end = _skip(buf, vpos)
            if code == DATA:
                out.append(buf[vpos + (2 if buf[vpos] == 0xA0 else 5) : end])
            pos = end
    except SectionError:
        raise
    except _FAILURES as e:
        raise SectionError(f"malformed batch envelope: {e}") from e
    if not out:
        raise SectionError("batch envelope has no data section")
    return out


def stamp(key: str, encoded_value: bytes) -> tuple[bytes, bytes]:
    """Return a pre-encoded (symbol key, value) message-annotation pair."""
    return enc_symbol(key), encoded_value


_NULL = b"\x40"
_TRUE = b"\x41"
_FALSE = b"\x42"
_HEADER_PREFIX = b"\x00\x53\x70\xc0"
_DELIVERY_ANNOTATIONS_PREFIX = b"\x00\x53\x71"
_ANNOTATIONS_PREFIX = b"\x00\x53\x72"
_APP_PROPS_PREFIX = b"\x00\x53\x74"
_UINT_MAX = 0xFFFFFFFF


def build_message(
    *,
    durable: bool,
    priority: int | None,
    ttl_ms: int | None,
    delivery_count: int,
    annotations: bytes,
    annotation_count: int,
    stamps: list[tuple[bytes, bytes]],
    tail: bytes,
    property_overrides: Mapping[str, bytes] | None = None,
    delivery_stamps: list[tuple[bytes, bytes]] | None = None,
) -> bytes:
    """Emit header, delivery-annotations, message-annotations (client entries + stamps) and
    tail as one message.

    The message-annotations section is omitted only when there are neither
    client entries nor stamps. The delivery-annotations section holds the client's entries
    (stored at the front of the tail) and `delivery_stamps`; it is omitted when the client
    sent none and delivery_stamps is None (an empty list gives an empty map, as the service
    sends on a receive-and-delete delivery). property_overrides maps application-property
    names to pre-encoded values: existing keys are replaced in place, new ones
    appended, and the section is created before the body if the tail had none.
    """
    # contract §1.6: full 5-field header list with explicit values, never list0.
    hdr = b"".join(
        (
            # durable only when the sender said so, first-acquirer never: the service leaves
            # both null (pyamqp re-encodes a received message by its fields, and the SDK suite
            # counts the bytes) [issue 23]
            _TRUE if durable else _NULL,
            _NULL if priority is None else bytes((0x50, priority)),
            # header.ttl is a uint [AMQP 1.0 3.2.1]; a TTL beyond it cannot be
            # expressed and is effectively unbounded, so it travels as null.
            _NULL if ttl_ms is None or ttl_ms > _UINT_MAX else enc_uint(ttl_ms),
            _NULL,  # first-acquirer
            enc_uint(delivery_count),
        )
    )
    parts = [_HEADER_PREFIX, bytes((len(hdr) + 1, 5)), hdr]
    if tail[:3] == _DELIVERY_ANNOTATIONS_PREFIX:  # the client's, stored first in the tail
        da_end = _skip(tail, 3)
        entries, count = _map_entries(tail, 3, da_end)
        tail = tail[da_end:]
        if delivery_stamps:
            entries += b"".join([k + v for k, v in delivery_stamps])
            count += len(delivery_stamps)
        parts.append(_DELIVERY_ANNOTATIONS_PREFIX + enc_map_body(entries, count))
    elif delivery_stamps is not None:
        parts.append(
            _DELIVERY_ANNOTATIONS_PREFIX
            + enc_map_body(b"".join([k + v for k, v in delivery_stamps]), len(delivery_stamps))
        )
    if stamps or annotations:
        body = annotations + b"".join([k + v for k, v in stamps]) if stamps else annotations
        parts.append(_ANNOTATIONS_PREFIX)
        parts.append(enc_map_body(body, annotation_count + len(stamps)))
    if property_overrides:
        if type(tail) is not bytes:
            tail = bytes(tail)
        try:
            tail = _apply_overrides(tail, property_overrides)
        except SectionError:
            raise
        except _FAILURES as e:
            raise SectionError(f"malformed tail: {e}") from e
    parts.append(tail)
    return b"".join(parts)


# property_overrides keys with this prefix name a properties-section field (set by a rule
# action's `SET sys.To = ...`); an empty value removes an application property (REMOVE).
SYSTEM_OVERRIDE_PREFIX = "\x00sys."
REMOVE = b""
_SYSTEM_FIELDS = {
    "MessageId": 0, "To": 2, "Label": 3, "Subject": 3, "ReplyTo": 4, "CorrelationId": 5,
    "ContentType": 6, "SessionId": 10, "ReplyToSessionId": 12,
}


def _apply_overrides(tail: bytes, overrides: Mapping[str, bytes]) -> bytes:
    """Apply application-property and system-property overrides to tail."""
    system = {k: v for k, v in overrides.items() if k.startswith(SYSTEM_OVERRIDE_PREFIX)}
    if system:
        tail = _apply_system_overrides(tail, system)
        overrides = {k: v for k, v in overrides.items() if k not in system}
        if not overrides:
            return tail
    return _apply_user_overrides(tail, overrides)


def _properties_fields(tail: bytes) -> tuple[int, int, list[bytes]]:
    """(start, end, encoded fields) of the tail's properties section; (p, p, []) when it has
    none, so a new section goes at the front of the tail (after delivery annotations)."""
    pos, n = 0, len(tail)
    front = 0
    while pos < n:
        code, vpos = _section_code(tail, pos)
        end = _skip(tail, vpos)
        if code == PROPERTIES:
            c = tail[vpos]
            if c == 0xC0:
                count, p = tail[vpos + 2], vpos + 3
            elif c == 0xD0:
                count, p = _unpack_I(tail, vpos + 5)[0], vpos + 9
            else:  # list0 / null: every field absent
                count, p = 0, end
            fields: list[bytes] = []
            for _ in range(count):
                q = _skip(tail, p)
                fields.append(tail[p:q])
                p = q
            return pos, end, fields
        if code == DELIVERY_ANNOTATIONS:
            front = end
        pos = end
    return front, front, []


def _apply_system_overrides(tail: bytes, system: Mapping[str, bytes]) -> bytes:
    """Rewrite properties-section fields; other fields keep their original encodings."""
    start, end, fields = _properties_fields(tail)
    for key, value in system.items():
        index = _SYSTEM_FIELDS.get(key[len(SYSTEM_OVERRIDE_PREFIX):])
        if index is None:
            continue
        while len(fields) <= index:
            fields.append(_NULL)
        fields[index] = value if value != REMOVE else _NULL
    section = b"\x00\x53\x73" + enc_list(fields)
    return tail[:start] + section + tail[end:]


def _apply_user_overrides(tail: bytes, overrides: Mapping[str, bytes]) -> bytes:
    """Replace/append application properties in tail, leaving other bytes untouched."""
    pos, n = 0, len(tail)
    insert_at = n
    while pos < n:
        code, vpos = _section_code(tail, pos)
        end = _skip(tail, vpos)
        if code == APPLICATION_PROPERTIES:
            return tail[:pos] + _rewrite_app_props(tail, vpos, end, overrides) + tail[end:]
        if code >= DATA and insert_at == n:
            insert_at = pos  # application-properties precede the body [AMQP 1.0 3.2]
        pos = end
    kept = {k: v for k, v in overrides.items() if v != REMOVE}
    if not kept:
        return tail
    entries = b"".join([enc_string(k) + v for k, v in kept.items()])
    section = _APP_PROPS_PREFIX + enc_map_body(entries, len(kept))
    return tail[:insert_at] + section + tail[insert_at:]


def _rewrite_app_props(buf: bytes, vpos: int, end: int, overrides: Mapping[str, bytes]) -> bytes:
    c = buf[vpos]
    if c == 0xC1:
        count, p = buf[vpos + 2], vpos + 3
    elif c == 0xD1:
        count, p = _unpack_I(buf, vpos + 5)[0], vpos + 9
    else:  # null map
        count, p = 0, end
    parts: list[bytes] = []
    pairs = count >> 1
    used: set[str] = set()
    for _ in range(pairs):
        key, kend = _decode(buf, p)
        vend = _skip(buf, kend)
        if key in overrides:
            used.add(key)
            if overrides[key] == REMOVE:
                pairs -= 1
            else:
                parts.append(buf[p:kend])  # keep the key's original encoding
                parts.append(overrides[key])
        else:
            parts.append(buf[p:vend])
        p = vend
    if p != end:
        raise SectionError("application-properties entries do not match the map size")
    for k, v in overrides.items():
        if k not in used and v != REMOVE:
            parts.append(enc_string(k))
            parts.append(v)
            pairs += 1
    return _APP_PROPS_PREFIX + enc_map_body(b"".join(parts), pairs)


def _find_section(buf: bytes, want: int) -> Any:
    """Decode and return the value of section `want` in buf, or None if absent."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    try:
        pos, n = 0, len(buf)
        while pos < n:
            code, vpos = _section_code(buf, pos)
            end = _skip(buf, vpos)
            if code == want:
                return _decode(buf, vpos)[0]
            pos = end
    except SectionError:
        raise
    except _FAILURES as e:
        raise SectionError(f"malformed sections: {e}") from e
    return None


def read_application_properties(tail: bytes) -> dict[str, object]:
    """Decode the application-properties section of tail ({} when absent)."""
    return dict(_find_section(tail, APPLICATION_PROPERTIES) or {})


def read_properties(tail: bytes) -> dict[str, object]:
    """Decode the properties section of tail into {AMQP field name: value}, omitting nulls."""
    fields = _find_section(tail, PROPERTIES) or ()
    return {name: v for name, v in zip(PROPERTY_FIELDS, fields, strict=False) if v is not None}
