"""msgpack schema of what a partition stores: messages and the partition log.

This is the contract between the broker, the store and sparkjobs/. Every record starts with its
schema version so readers can refuse what they do not understand.

Message record (value in a queue's LMDB database, key = 8-byte big-endian sequence number):
    [version=1, sequence_number, enqueued_time_ms, state, delivery_count, message_id, session_id,
     partition_key, ttl_ms, expires_at_ms, durable, priority, annotation_count, annotations,
     tail, size, scheduled_enqueue_time_ms, dead_letter_reason, dead_letter_description,
     dead_letter_source, property_overrides, original_sequence_number, properties_span,
     body_span, transfer_hops, first_acquirer]
The two trailing spans, `transfer_hops` and `first_acquirer` are optional (records written
before them have 22, 24 or 25 fields). `durable` and `first_acquirer` are the header's as the
sender set them, null when it did not (records written before first_acquirer existed hold
false for a durable the sender left null). The spans are [start, end) in `tail` of the encoded application-properties map
and of the body sections; `transfer_hops` counts the auto-forwarding hops a message made (0:
none) and `original_sequence_number` is its sequence number at the entity it was first sent to
(set on forwarded messages only).
`annotations` and `tail` are the client's encoded message-annotation entries and the encoded
properties/application-properties/body sections, opaque to this package (the protocol side
scans and rebuilds them). `property_overrides` maps application property names to encoded
AMQP values applied on delivery (dead-letter reason, abandon's properties-to-modify).

Log record (value in the partition's `log` database, key = 8-byte big-endian dense offset):
a map of the keys LOG_FIELDS declares, in its order ("v": 1, the version, first).
Still version 1: "properties" and "body" are optional keys (absent in records written before
they existed; readers treat absent as null). "properties" is the message's application
properties as the raw encoded AMQP map (bytes, decoded by readers with sbemu.protocol.codec),
null without any; "body" is the raw encoded body sections (AMQP data / amqp-sequence /
amqp-value with their descriptors), only when the server runs with --log-bodies, else null.

Run record (version 2, same database; key = the offset of its first event): one event of
several messages of one sub-queue at once (a run of deliveries or of completions), which
would otherwise be as many version-1 records at consecutive offsets:
    [version=2, count (always msgpack uint32), ns, entity, queue, partition, offset, event,
     event_ms, reason, [[seq, message_id, session_id, partition_key, enqueued_ms, size,
     delivery_count, properties, body], ...count items]]
It takes the offsets [offset, offset + count). Readers never see one: `expand_log` turns it
into the version-1 records it stands for, the very bytes encode_log writes for each (the
store's read_log and the log readers of sbemu.logs expand what they read); `log_extent`
says how many offsets a stored value takes.
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import msgspec

from .writebatch import LARGE_RECORD, LargeRecord

MESSAGE_SCHEMA_VERSION = 1
LOG_SCHEMA_VERSION = 1
LOG_RUN_VERSION = 2

# The log record's keys, in the order encode_log writes them, each with its value's type as
# Arrow names it: the one place they are spelled. The first five are fixed per sub-queue and
# partition (log_prefix packs them once), LogPairs is made of the rest; the log readers
# (sbemu.logs.events), the segment files (sbemu.logs.segments) and the Spark source
# (sparkjobs/source.py) build their schemas from it. A new key is a new line here.
LOG_FIELDS: tuple[tuple[str, str], ...] = (
    ("v", "int32"),
    ("ns", "string"),
    ("entity", "string"),
    ("queue", "string"),
    ("partition", "int32"),
    ("offset", "int64"),
    ("event", "string"),
    ("seq", "int64"),
    ("message_id", "string"),
    ("session_id", "string"),
    ("partition_key", "string"),
    ("enqueued_ms", "int64"),
    ("event_ms", "int64"),
    ("size", "int64"),
    ("delivery_count", "int32"),
    ("reason", "string"),
    ("properties", "binary"),  # the encoded application-properties map
    ("body", "binary"),  # the encoded body sections (serve --log-bodies)
)
_SITE_KEYS = tuple(name for name, _kind in LOG_FIELDS[:5])  # v, ns, entity, queue, partition


_BASES: tuple[Any, ...] = (int, float, str, bytes, list, tuple, dict)


def _as_base(obj: object) -> object:
    """What a subclass of a type msgspec encodes (the codec's Timestamp, an int, or Symbol, a
    str) is written as: its base type's value, as msgpack's Packer wrote it."""
    for base in _BASES:
        if isinstance(obj, base):
            return base(obj)
    raise TypeError(f"can not serialize {type(obj).__name__!r} object")


# Records are written with msgspec's MessagePack encoder: the same bytes as msgpack's
# Packer(use_bin_type=True) for every type a record holds (smallest int, str and bin forms,
# float64, arrays for lists and tuples, maps in insertion order), so msgpack reads them back,
# at about 40% of the Packer's cost per item (~130 against ~330 instructions): the two
# records of every send cost ~7k instructions this way, ~17k with the Packer.
_ENCODE = msgspec.msgpack.Encoder(enc_hook=_as_base).encode


class MessageState(enum.IntEnum):
    """x-opt-message-state values [contract 3.7]."""

    ACTIVE = 0
    DEFERRED = 1
    SCHEDULED = 2


class LogEvent(str, enum.Enum):
    """What happened to a message, as written to the partition log."""

    ENQUEUED = "enqueued"
    DELIVERED = "delivered"
    COMPLETED = "completed"
    ABANDONED = "abandoned"
    RELEASED = "released"
    DEFERRED = "deferred"
    DEADLETTERED = "deadlettered"
    EXPIRED = "expired"
    LOCK_EXPIRED = "lock_expired"
    SCHEDULED = "scheduled"
    ACTIVATED = "activated"
    CANCELLED = "cancelled"
    PURGED = "purged"  # removed by a purge (admin API, sbemu purge)


class IncomingMessage(msgspec.Struct):
    """What the protocol side hands over for one message to enqueue: routing fields + bytes.

    A msgspec Struct (slots, mutable, built in C: one is built per message sent)."""

    message_id: str | None
    session_id: str | None
    partition_key: str | None
    ttl_ms: int | None
    durable: bool | None  # the header's, as sent (None: not sent)
    priority: int | None
    annotation_count: int
    annotations: bytes
    tail: bytes
    size: int
    scheduled_enqueue_time_ms: int | None = None
    via_partition_key: str | None = None
    # [start, end) in `tail` of the encoded application-properties map / of the body sections
    properties_span: tuple[int, int] | None = None
    body_span: tuple[int, int] | None = None
    # auto-forwarding: the sequence number at the first entity and the hops made so far
    original_sequence_number: int | None = None
    transfer_hops: int = 0
    # Lazily decodes the properties for topic filters (a sbemu.filters.MessageView).
    view: Callable[[], object] | None = None
    # message_id was given by the broker (the sender set none): it is no partition key [P6]
    message_id_assigned: bool = False
    first_acquirer: bool | None = None  # the header's, as sent (None: not sent)


class MessageRecord(msgspec.Struct, array_like=True, tag=MESSAGE_SCHEMA_VERSION):
    """One stored message of one sub-queue of one partition.

    A msgspec Struct (slots, mutable, compared field by field): built in C, about a third of
    a dataclass's cost for its 24 fields, and written by _ENCODE as the schema's array above,
    its tag (the schema version) first, its fields in order, the state as its int
    (encode_message)."""

    sequence_number: int
    enqueued_time_ms: int
    state: MessageState
    delivery_count: int
    message_id: str | None
    session_id: str | None
    partition_key: str | None
    ttl_ms: int | None
    expires_at_ms: int | None
    durable: bool | None  # the header's, as sent (None: not sent)
    priority: int | None
    annotation_count: int
    annotations: bytes
    tail: bytes
    size: int
    scheduled_enqueue_time_ms: int | None = None
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    dead_letter_source: str | None = None
    property_overrides: dict[str, bytes] | None = None
    original_sequence_number: int | None = None
    properties_span: tuple[int, int] | None = None
    body_span: tuple[int, int] | None = None
    transfer_hops: int = 0
    first_acquirer: bool | None = None  # the header's, as sent (None: not sent)

    def copy(self) -> MessageRecord:
        """A shallow copy (bytes are immutable, overrides dict is copied)."""
        return MessageRecord(
            self.sequence_number,
            self.enqueued_time_ms,
            self.state,
            self.delivery_count,
            self.message_id,
            self.session_id,
            self.partition_key,
            self.ttl_ms,
            self.expires_at_ms,
            self.durable,
            self.priority,
            self.annotation_count,
            self.annotations,
            self.tail,
            self.size,
            self.scheduled_enqueue_time_ms,
            self.dead_letter_reason,
            self.dead_letter_description,
            self.dead_letter_source,
            dict(self.property_overrides) if self.property_overrides else None,
            self.original_sequence_number,
            self.properties_span,
            self.body_span,
            self.transfer_hops,
            self.first_acquirer,
        )


LARGE_TAIL = 1 << 20  # bytes: a record with a larger tail is packed by _encode_large


def encode_message(r: MessageRecord) -> bytes:
    """Serialise a message record (schema version 1)."""
    if len(r.tail) > LARGE_TAIL:
        return _encode_large(r)
    return _ENCODE(r)  # [version (the Struct's tag), the 24 fields in order]


def encode_staged(r: MessageRecord) -> bytes | LargeRecord:
    """encode_message() for a record staged for a commit: a large one as its parts, joined on
    the commit's thread (writebatch.LargeRecord)."""
    if len(r.tail) > LARGE_TAIL:
        return LargeRecord(_large_parts(r), r.session_id)
    return _ENCODE(r)


def _encode_large(r: MessageRecord) -> bytes:
    """encode_message()'s bytes for a large message (up to 100 MB on Premium), with the tail
    copied once, into the result: encoded whole, it would go through a buffer grown to twice
    its size."""
    return b"".join(_large_parts(r))


def _large_parts(r: MessageRecord) -> tuple[bytes, ...]:
    """The parts of a large record's bytes, in order (the tail is one of them, not copied)."""
    head = _ENCODE(
        [
            MESSAGE_SCHEMA_VERSION, r.sequence_number, r.enqueued_time_ms, int(r.state),
            r.delivery_count, r.message_id, r.session_id, r.partition_key, r.ttl_ms,
            r.expires_at_ms, r.durable, r.priority, r.annotation_count, r.annotations,
        ]
    )  # fmt: skip
    rest = _ENCODE(
        [
            r.size, r.scheduled_enqueue_time_ms, r.dead_letter_reason,
            r.dead_letter_description, r.dead_letter_source, r.property_overrides,
            r.original_sequence_number, r.properties_span, r.body_span, r.transfer_hops,
            r.first_acquirer,
        ]
    )  # fmt: skip
    # array16 of the 26 fields; the parts' own fixarray headers (14 and 11 items) dropped;
    # the tail as bin32 (msgpack's form for more than 65535 bytes)
    return (b"\xdc\x00\x1a", head[1:], b"\xc6", len(r.tail).to_bytes(4, "big"), r.tail, rest[1:])


_MESSAGE_FIELDS = 26  # version + the 25 fields of a current record
_DECODE = msgspec.msgpack.Decoder(MessageRecord).decode
_STATES = {s.value: s for s in MessageState}


# A stored value of LARGE_RECORD bytes or more (a large message, up to 100 MB on Premium) ends
# a read-ahead: decoding it copies its body, so one read decodes one of them at most.


def decode_ahead(
    data: bytes, _decode: Callable[[Any], MessageRecord] = _DECODE, _large: int = LARGE_RECORD
) -> MessageRecord:
    """decode_message for the read-ahead (PartitionStore.read_ahead): a value of LARGE_RECORD
    bytes or more is not decoded here but ends the read (StopIteration ends the map that calls
    this; the store then decodes that value alone)."""
    if len(data) >= _large:
        raise StopIteration
    try:
        return _decode(data)
    except msgspec.MsgspecError:
        return decode_message(data)


def decode_message(data: bytes) -> MessageRecord:
    """Deserialise a message record; refuses unknown schema versions.

    A current record (every one read for delivery) is decoded by msgspec straight into the
    Struct, in C, its tag (the version) and field types checked; anything it does not take
    (an older layout, a span stored empty, an unknown version, bad bytes) goes the general
    way below, which reads every layout and says what is wrong."""
    try:
        return _DECODE(data)
    except msgspec.MsgspecError:
        pass
    f = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=False)
    if not f or f[0] != MESSAGE_SCHEMA_VERSION:
        raise ValueError(f"unknown message record version {f[0] if f else None!r}")
    if len(f) == _MESSAGE_FIELDS:
        # Every record read for delivery: the fields in MessageRecord's order (spans unpack
        # as tuples, as use_list=False gives), then the state as the enum.
        rec = MessageRecord(*f[1:])
        state = _STATES.get(rec.state)
        rec.state = state if state is not None else MessageState(rec.state)
        if not rec.properties_span:
            rec.properties_span = None
        if not rec.body_span:
            rec.body_span = None
        if not rec.transfer_hops:
            rec.transfer_hops = 0
        return rec
    return MessageRecord(
        f[1],
        f[2],
        MessageState(f[3]),
        f[4],
        f[5],
        f[6],
        f[7],
        f[8],
        f[9],
        f[10],
        f[11],
        f[12],
        f[13],
        f[14],
        f[15],
        f[16],
        f[17],
        f[18],
        f[19],
        f[20],
        f[21],
        _span(f, 22),
        _span(f, 23),
        int(f[24]) if len(f) > 24 and f[24] else 0,
        f[25] if len(f) > 25 else None,
    )


def _span(fields: list, i: int) -> tuple[int, int] | None:
    """An optional trailing [start, end) field (absent in records written before it existed)."""
    v = fields[i] if len(fields) > i else None
    return (int(v[0]), int(v[1])) if v else None


def encode_log(
    *,
    namespace: str,
    entity: str,
    queue: str,
    partition: int,
    offset: int,
    event: LogEvent,
    record: MessageRecord,
    event_ms: int,
    reason: str | None = None,
    with_body: bool = False,
) -> bytes:
    """Serialise one partition-log record (schema version 1).

    `properties`: the message's encoded application-properties map (None without one);
    `body`: its encoded body sections, only `with_body` (else None).
    """
    return encode_log_after(
        log_prefix(namespace, entity, queue, partition),
        offset,
        event,
        record,
        event_ms,
        reason,
        with_body,
    )


_PYTHON_TYPES = {"int32": int, "int64": int, "string": str | None, "binary": bytes | None}
# The pairs of a log record after its log_prefix(), in order (encode_log_after and expand_log
# both write through it).
#
# _ENCODE writes a Struct as a map of its fields in order (every field, None as nil), the
# bytes of packing the whole record's map, keys in LOG_FIELDS' order: the map header and the
# five pairs fixed per sub-queue and partition are packed once (the prefix), these pairs as a
# map whose header is dropped. A Struct is built in C: no Python call on the send path.
LogPairs = msgspec.defstruct(
    "LogPairs",
    [(name, _PYTHON_TYPES[kind]) for name, kind in LOG_FIELDS[len(_SITE_KEYS) :]],
    gc=False,
    module=__name__,
)


def encode_log_after(
    prefix: bytes,
    offset: int,
    event: LogEvent,
    record: MessageRecord,
    event_ms: int,
    reason: str | None,
    with_body: bool,
) -> bytes:
    """encode_log() with the sub-queue's log_prefix() at hand (the broker's send path)."""
    ps, bs = record.properties_span, record.body_span
    pairs = LogPairs(
        offset, _EVENT_VALUES[event], record.sequence_number, record.message_id,
        record.session_id, record.partition_key, record.enqueued_time_ms, event_ms,
        record.size, record.delivery_count, reason,
        record.tail[ps[0] : ps[1]] if ps else None,
        record.tail[bs[0] : min(bs[1], bs[0] + LOG_BODY_MAX)] if with_body and bs else None,
    )  # fmt: skip
    return prefix + _ENCODE(pairs)[_FIXMAP_HEADER:]


_EVENT_VALUES = {e: e.value for e in LogEvent}
# serve --log-bodies: the first 256 KiB (Standard's largest message) of a body's encoded
# sections; a larger (Premium) body is cut there, `size` keeps the message's whole size
LOG_BODY_MAX = 256 * 1024
_LOG_KEYS = len(LOG_FIELDS)  # pairs in a log record's map (18)
# the header of LogPairs' map, dropped: fixmap (0x8d for 13 pairs) up to 15, then map16
_FIXMAP_HEADER = 1 if len(LogPairs.__struct_fields__) <= 15 else 3


@functools.lru_cache(maxsize=4096)
def log_prefix(namespace: str, entity: str, queue: str, partition: int) -> bytes:
    """The packed map header and first five pairs of a log record of one sub-queue."""
    values = (LOG_SCHEMA_VERSION, namespace, entity, queue, partition)
    head = _ENCODE([item for pair in zip(_SITE_KEYS, values, strict=True) for item in pair])
    return b"\xde" + _LOG_KEYS.to_bytes(2, "big") + head[1:]  # map16 header; fixarray(10) dropped


# A run record's first bytes: fixarray of its 11 fields, the version, uint32 (its count follows)
_RUN_HEAD = bytes((0x9B, LOG_RUN_VERSION, 0xCE))
_RUN_COUNT = struct.Struct(">I")


@functools.lru_cache(maxsize=4096)
def _run_site(namespace: str, entity: str, queue: str, partition: int) -> bytes:
    """A run record's ns, entity, queue and partition, packed (no array header)."""
    return _ENCODE([namespace, entity, queue, partition])[1:]


def encode_log_run(
    site: tuple[str, str, str, int],
    offset: int,
    event: LogEvent,
    records: Sequence[MessageRecord],
    event_ms: int,
    reason: str | None,
    with_body: bool,
) -> bytes:
    """One run record (version 2) for `event` of each of `records` (messages of the sub-queue
    `site` names: namespace, entity, queue, partition) at offsets from `offset` on: what
    encode_log would write for each, in one value (see the schema above)."""
    items = [
        (
            r.sequence_number, r.message_id, r.session_id, r.partition_key,
            r.enqueued_time_ms, r.size, r.delivery_count,
            r.tail[ps[0] : ps[1]] if (ps := r.properties_span) else None,
            r.tail[bs[0] : min(bs[1], bs[0] + LOG_BODY_MAX)]
            if with_body and (bs := r.body_span) else None,
        )
        for r in records
    ]  # fmt: skip
    rest = _ENCODE([offset, _EVENT_VALUES[event], event_ms, reason, items])
    return b"".join(
        (_RUN_HEAD, _RUN_COUNT.pack(len(items)), _run_site(*site), rest[1:])  # fixarray(5) dropped
    )


def log_extent(value: bytes) -> int:
    """How many offsets a stored log value takes: a run record's count, else 1."""
    if value[:3] == _RUN_HEAD:
        return int(_RUN_COUNT.unpack_from(value, 3)[0])
    return 1


def expand_log(value: bytes) -> list[bytes]:
    """The version-1 records a stored log value stands for: a run record's, each as encode_log
    writes it, at consecutive offsets; any other value as it is (a list of one)."""
    if value[:3] != _RUN_HEAD:
        return [value]
    f = msgpack.unpackb(value, raw=False)
    if len(f) != 11 or not isinstance(f[10], list) or len(f[10]) != f[1]:
        raise ValueError("malformed log run record")
    _v, _n, ns, entity, queue, partition, offset, event, event_ms, reason, items = f
    prefix = log_prefix(ns, entity, queue, partition)
    pack = _ENCODE
    return [
        prefix
        + pack(
            LogPairs(
                offset + i, event, seq, mid, sid, pk, enqueued, event_ms, size, count, reason,
                props, body,
            )
        )[_FIXMAP_HEADER:]
        for i, (seq, mid, sid, pk, enqueued, size, count, props, body) in enumerate(items)
    ]  # fmt: skip


def decode_log(data: bytes) -> dict:
    """Deserialise one partition-log record (version 1: a stored run record is read through
    expand_log first)."""
    d = msgpack.unpackb(data, raw=False)
    if not isinstance(d, dict):
        raise ValueError("not a version-1 log record (a run record is read with expand_log)")
    if d.get("v") != LOG_SCHEMA_VERSION:
        raise ValueError(f"unknown log record version {d.get('v')!r}")
    return d
