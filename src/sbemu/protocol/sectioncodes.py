"""What the section scanner and the message rebuilder share [AMQP 1.0 3.2]: the section codes,
the errors, ScannedMessage (the routing fields plus the opaque byte ranges), and the primitives
that read a section's descriptor and a map's entries."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sbemu.protocol.codec import (
    DecodeError,
)

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

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

_unpack_I = struct.Struct(">I").unpack_from
_unpack_Q = struct.Struct(">Q").unpack_from

_FAILURES = (DecodeError, IndexError, struct.error, ValueError, TypeError, RecursionError)


class SectionError(ValueError):
    """Raised when a message's section structure is malformed or truncated."""


class SectionTooDeep(SectionError):
    """A section nests deeper than MAX_VALUE_DEPTH (sbemu.protocol.nesting): refused at send."""


class HeaderTooLarge(SectionError):
    """The message's header sections (or one application property) pass Azure's size quota:
    refused at send before the sections are read (MAX_HEADER_BYTES, MAX_PROPERTY_BYTES)."""


class TooManySections(SectionError):
    """More body sections (a batch's messages) than MAX_BODY_SECTIONS: refused at send."""


# Azure's quotas on what a message carries besides its body ("Message property size for a
# queue, topic, or subscription entity", Service Bus quotas, common to all tiers): "Maximum
# message property size for each property is 32 KB. Cumulative size of all properties can't
# exceed 64 KB. This limit applies to the entire header of the brokered message". sbemu counts
# the encoded header, delivery-annotations, message-annotations, properties,
# application-properties and footer sections against the 64 KB, and an application property's
# encoded key and value against the 32 KB.
MAX_HEADER_BYTES = 64 * 1024
MAX_PROPERTY_BYTES = 32 * 1024
# Azure refuses a batch of more than 4,500 messages (azure-service-bus#397; the .NET SDK
# hard-codes the limit in CreateMessageBatchOptions, azure-sdk-for-net#44916; Premium takes
# about 15,885, not reproduced: 4,500 keeps one transfer's scan well inside the event loop's
# budget). The same cap bounds the body sections of any one message.
MAX_BODY_SECTIONS = 4500


@dataclass(slots=True)
class ScannedMessage:
    """The routing-relevant fields of a message plus its opaque byte ranges."""

    durable: bool | None  # the header's, as sent (None: not sent)
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
    first_acquirer: bool | None = None  # the header's, as sent (None: not sent)


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


def starts_section(buf: bytes, p: int, end: int) -> bool:
    """Whether ``buf[p:end]`` starts with a message section's descriptor in any of its three
    forms [AMQP 1.0 1.5]: smallulong ``00 53 <code>``, ulong ``00 80 <8 bytes>`` or symbolic
    (``00 a3``/``00 b3`` and the section's name). How a batch envelope's data sections are
    recognised: each holds a whole encoded message [contract 3.4]."""
    if end - p < 3 or buf[p] != 0x00:
        return False
    d = buf[p + 1]
    if d == 0x53:
        return HEADER <= buf[p + 2] <= FOOTER
    if d == 0x80:
        return (
            end - p >= 10 and buf[p + 2 : p + 9] == _SEVEN_ZEROS and HEADER <= buf[p + 9] <= FOOTER
        )
    if d == 0xA3:
        return buf[p + 3 : min(p + 3 + buf[p + 2], end)] in _SYMBOLIC
    if d == 0xB3 and end - p >= 6:
        return buf[p + 6 : min(p + 6 + _unpack_I(buf, p + 2)[0], end)] in _SYMBOLIC
    return False


_SEVEN_ZEROS = bytes(7)


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


_DELIVERY_ANNOTATIONS_PREFIX = b"\x00\x53\x71"
