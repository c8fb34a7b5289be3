"""What the section scan (sections.py) reads in each kind of section, and the quotas and
rewrites it applies to them: the header's fields, the properties the partitions side routes
on, the message annotations it extracts (partition keys, the scheduled time) and those the
service owns, the delivery annotations it keeps, the application properties' size quotas and
decimals. Each reader takes the section's value at `vpos` (its bounds already checked, ending at
`end`); the common forms every SDK sends are read inline by the walk (sections._scan), the
others here field by field.
"""

from __future__ import annotations

import uuid
from typing import Any

from sbemu.protocol.codec import _decode, _skip, enc_map_body, enc_string
from sbemu.protocol.decimals import DecimalRangeError, rewrite_decimals
from sbemu.protocol.nesting import MAX_VALUE_DEPTH, OPENERS, too_deep
from sbemu.protocol.sectioncodes import (
    _DELIVERY_ANNOTATIONS_PREFIX,
    AMQP_SEQUENCE,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    FOOTER,
    HEADER,
    MAX_HEADER_BYTES,
    MAX_PROPERTY_BYTES,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    HeaderTooLarge,
    SectionError,
    SectionTooDeep,
    _map_entries,
    _unpack_I,
)

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

# Annotations the scan extracts; value = their slot in message_annotations.
_PARTITION_KEY = 1
_VIA_PARTITION_KEY = 2
_SCHEDULED = 3
_WANTED = {
    b"x-opt-partition-key": _PARTITION_KEY,
    b"x-opt-via-partition-key": _VIA_PARTITION_KEY,
    b"x-opt-scheduled-enqueue-time": _SCHEDULED,
}

_SECTION_NAMES = {
    HEADER: "header",
    MESSAGE_ANNOTATIONS: "message-annotations",
    PROPERTIES: "properties",
    APPLICATION_PROPERTIES: "application-properties",
    AMQP_SEQUENCE: "amqp-sequence",
    AMQP_VALUE: "amqp-value",
    FOOTER: "footer",
}


class PropertyValueError(SectionError):
    """An application property value the service cannot hold (e.g. a decimal beyond .NET's)."""


def too_deep_error(code: int) -> SectionTooDeep:
    return SectionTooDeep(
        f"section {_SECTION_NAMES.get(code, hex(code))} nests more than "
        f"{MAX_VALUE_DEPTH} levels of lists, maps, arrays or described values"
    )


# ------------------------------------------------------------------------------------ header
_ONE = b"\x00\x00\x00\x01"  # a list32's count of one field
_NO_HEADER: tuple[Any, ...] = (None, None, None, None)  # a message without a header
# Headers of one field, durable alone (true, false or null), as most senders write them, as
# sent (section descriptor and all) -> (durable, priority, ttl, first-acquirer): the scan reads
# them with one lookup, any other header with header_fields(). Durable is kept as sent: Azure
# hands durable=false back.
SHORT_HEADERS = {
    prefix + value: (durable, None, None, None)
    for prefix in (b"\x00\x53\x70\xc0\x02\x01", b"\x00\x53\x70\xd0\x00\x00\x00\x05" + _ONE)
    for value, durable in ((b"\x41", True), (b"\x42", False), (b"\x40", None))
}


def header_fields(
    buf: bytes, vpos: int, end: int
) -> tuple[bool | None, int | None, int | None, bool | None]:
    """Return (durable, priority, ttl, first-acquirer) from the header list at vpos; durable
    and first-acquirer as sent (None: not sent), as Azure hands them back."""
    c = buf[vpos]
    if c == 0xC0:
        count, p = buf[vpos + 2], vpos + 3
    elif c == 0xD0:
        count, p = _unpack_I(buf, vpos + 5)[0], vpos + 9
    else:  # list0 or null: all defaults
        return None, None, None, None
    fields: list[Any] = [None, None, None, None]
    for i in range(count):
        if i < 4:
            fields[i], p = _decode(buf, p)
        else:
            p = _skip(buf, p)
    if p != end:
        raise SectionError("header fields do not match the list size")
    durable, priority, ttl, first_acquirer = fields
    if not (priority is None or type(priority) is int) or not (ttl is None or type(ttl) is int):
        raise SectionError("header priority/ttl must be integers")
    return (
        durable if type(durable) is bool else None,
        priority,
        ttl,
        first_acquirer if type(first_acquirer) is bool else None,
    )


# -------------------------------------------------------------------------------- properties
# properties fields the scan needs: message-id, to, subject, reply-to,
# correlation-id, content-type, group-id, reply-to-group-id (bit i = field i)
_PROPERTY_MASK = sum(1 << i for i in (0, 2, 3, 4, 5, 6, 10, 12))
_NO_PROPERTIES: tuple[Any, ...] = (
    None,
) * 8  # property_values' answer for a message without properties


def property_values(buf: bytes, vpos: int, end: int) -> tuple[str | None, ...]:
    """The properties the scan keeps, as text, in ScannedMessage's order: message-id,
    session-id (group-id), reply-to-session-id (reply-to-group-id), correlation-id, subject,
    to, reply-to, content-type. A list of one str8 field (a message-id alone, as most senders
    set) is read at once; any other list field by field, unwanted fields skipped, not decoded,
    and the common str8 case decoded inline: this is the costliest part of a scan."""
    c = buf[vpos]
    if c == 0xC0 and buf[vpos + 2] == 1 and buf[vpos + 3] == 0xA1:
        if end == vpos + 5 + buf[vpos + 4]:
            return (buf[vpos + 5 : end].decode("utf-8"), None, None, None, None, None, None, None)
    elif c == 0xD0 and buf[vpos + 5 : vpos + 9] == _ONE and buf[vpos + 9] == 0xA1:
        if end == vpos + 11 + buf[vpos + 10]:
            return (buf[vpos + 11 : end].decode("utf-8"), None, None, None, None, None, None, None)
    out: list[str | None] = [None] * 13
    if c == 0xC0:
        count, p = buf[vpos + 2], vpos + 3
    elif c == 0xD0:
        count, p = _unpack_I(buf, vpos + 5)[0], vpos + 9
    else:  # list0 or null: every field absent
        return _NO_PROPERTIES
    n = len(buf)
    mask = _PROPERTY_MASK
    for i in range(count):
        c = buf[p]
        if c == 0x40:  # null: by far the most common field value
            p += 1
        elif not (mask >> i) & 1:  # also skips fields beyond the 13 we know
            if c in OPENERS:  # the list's depth check, field by field (see sections._scan)
                _field_depth(buf, p)
            p = _skip(buf, p)
        elif c == 0xA1:
            q = p + 2 + buf[p + 1]
            if q > n:
                raise SectionError("truncated string field")
            out[i] = buf[p + 2 : q].decode("utf-8")
            p = q
        else:
            if c in OPENERS:
                _field_depth(buf, p)
            v, p = _decode(buf, p)
            out[i] = _render(v)
    if p != end:
        raise SectionError("properties fields do not match the list size")
    return (out[0], out[10], out[12], out[5], out[3], out[2], out[4], out[6])


def _field_depth(buf: bytes, p: int) -> None:
    """Refuse a properties field nesting deeper than its level (2) leaves room for."""
    if too_deep(buf, p, _skip(buf, p), MAX_VALUE_DEPTH - 1):
        raise too_deep_error(PROPERTIES)


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


# ----------------------------------------------------------------------- message annotations
def message_annotations(
    buf: bytes, vpos: int, end: int
) -> tuple[str | None, str | None, int | None, bytes, int]:
    """Read the message-annotations map at vpos: returns (partition key, via-partition key,
    scheduled enqueue time, the entries but the service's, as sent (a partition key given as
    binary re-encoded as its string), how many they are), in ScannedMessage's order."""
    partition_key = via_partition_key = scheduled = None
    kept: list[bytes] = []
    c = buf[vpos]
    if c == 0xC1:
        count, p = buf[vpos + 2], vpos + 3
    elif c == 0xD1:
        count, p = _unpack_I(buf, vpos + 5)[0], vpos + 9
    else:  # null
        count, p = 0, end
    if count & 1:
        raise SectionError("message-annotations map has an odd element count")
    kept_count = 0
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
                kept.append(buf[keep_from:kpos])
            keep_from = p
            continue
        kept_count += 1
        slot = _WANTED.get(key) if key is not None else None
        if slot is None:
            continue
        value = _decode(buf, kend)[0]
        if slot == _SCHEDULED:
            scheduled = _scheduled_time(value)
            continue
        text = _partition_key_text(value)
        if slot == _PARTITION_KEY:
            partition_key = text
        else:
            via_partition_key = text
        if text is not None and type(value) is not str:
            # stored (and echoed) as the string the service keys on: .NET reads it with a
            # (string) cast [contract 3.7]
            if keep_from < kpos:
                kept.append(buf[keep_from:kpos])
            kept.append(buf[kpos:kend] + enc_string(text))
            keep_from = p
    if p != end:
        raise SectionError("message-annotations entries do not match the map size")
    if keep_from < p:
        kept.append(buf[keep_from:p])
    return partition_key, via_partition_key, scheduled, b"".join(kept), kept_count


def _scheduled_time(value: Any) -> int | None:
    if value is not None and (not isinstance(value, int) or value is True or value is False):
        raise SectionError("x-opt-scheduled-enqueue-time must be a timestamp or long")
    return None if value is None else int(value)


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


# ---------------------------------------------------------------------- delivery annotations
def kept_delivery_annotations(buf: bytes, vpos: int, end: int) -> bytes:
    """The delivery-annotations section at vpos as it is stored (at the front of the tail,
    descriptor included): kept, as the service keeps them (they reach the receiver beside its
    x-opt-lock-token), but for a lock token of the client's."""
    value = buf[vpos:end]
    if buf.find(b"x-opt-lock-token", vpos, end) >= 0:  # a received message sent again
        value = _without_lock_token(buf, vpos, end) or value
    return _DELIVERY_ANNOTATIONS_PREFIX + value


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


# -------------------------------------------------------------------- application properties
def header_too_large(size: int) -> HeaderTooLarge:
    return HeaderTooLarge(
        f"the message's properties and headers take more than {MAX_HEADER_BYTES} bytes "
        f"(at least {size}): the size quota for the message header ({MAX_HEADER_BYTES}) has "
        "been exceeded"
    )


def check_property_sizes(buf: bytes, vpos: int, end: int) -> None:
    """Refuse an application property whose encoded key and value pass MAX_PROPERTY_BYTES
    (only called for a section larger than that: at most MAX_HEADER_BYTES to walk)."""
    entries, count = _map_entries(buf, vpos, end)
    p = 0
    for _ in range(count):
        q = _skip(entries, _skip(entries, p))
        if q - p > MAX_PROPERTY_BYTES:
            raise HeaderTooLarge(
                f"an application property takes {q - p} bytes: the size quota for one "
                f"property ({MAX_PROPERTY_BYTES}) has been exceeded"
            )
        p = q


def service_decimals(buf: bytes, vpos: int, end: int) -> bytes | None:
    """The application-properties value at vpos with its decimals in the service's encoding,
    or None when it holds none."""
    try:
        value_end, rewritten = rewrite_decimals(buf, vpos)
    except DecimalRangeError as e:
        raise PropertyValueError(f"an application property cannot be stored: {e}") from None
    if value_end != end:
        raise SectionError("application-properties: the value does not match the section")
    return rewritten
