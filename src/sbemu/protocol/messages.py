"""Messages as they cross the wire: incoming transfers scanned into IncomingMessage, stored
records encoded as delivered to a client (with the service annotations of [contract 3.7]).

Neutral on purpose: the connection, `$management`, the admin explorer and the server's
topic fan-out all use it, and it imports nothing of the connection. Hot path: scan_transfer
and encode_delivery run once per message; they never fully decode one.
"""

from __future__ import annotations

from typing import Literal, overload

from ..errors import (
    ArgumentError,
    ArgumentOutOfRange,
    InvalidOperation,
    MessageSizeExceeded,
    QuotaExceeded,
    ServiceBusError,
)
from ..filters import MessageView
from ..partitions import IncomingMessage, MessageRecord, MessageState
from . import codec, sections
from .sectioncodes import _FAILURES, _section_code
from .sections import MAY_BE_BATCH
from .views import message_view

# Pre-encoded annotation keys (contract 3.7): the delivery path only encodes values.
K_SEQUENCE = codec.enc_symbol("x-opt-sequence-number")
K_ENQUEUED = codec.enc_symbol("x-opt-enqueued-time")
K_LOCKED_UNTIL = codec.enc_symbol("x-opt-locked-until")
K_PARTITION_ID = codec.enc_symbol("x-opt-partition-id")
K_MESSAGE_STATE = codec.enc_symbol("x-opt-message-state")
K_DEADLETTER_SOURCE = codec.enc_symbol("x-opt-deadletter-source")
K_SCHEDULED = codec.enc_symbol("x-opt-scheduled-enqueue-time")
K_ENQUEUE_SEQUENCE = codec.enc_symbol("x-opt-enqueue-sequence-number")
K_LOCK_TOKEN = codec.enc_symbol("x-opt-lock-token")  # delivery-annotations


def _batch_payloads(data: bytes) -> list[bytes] | None:
    """The inner messages if `data` is a batch envelope, else None.

    A batch is marked by message-format 0x80013700 on the transfer [contract 3.4], but the
    python-qpid-proton binding does not expose a delivery's message-format. So an envelope is
    recognised by its shape: a body of data sections that each hold a whole encoded message
    (starting with a section descriptor, smallulong, ulong or symbolic) and scan cleanly.
    """
    try:
        parts = sections.split_batch(data)
    except sections.SectionError:
        return None
    for part in parts:
        if not sections.starts_section(part, 0, len(part)):
            return None
    return parts


def _batch_shaped(data: bytes) -> bool:
    """Whether the first body section of `data` is a data section holding an encoded message
    (as a batch envelope's are), read from the sections before it only: the check a transfer
    larger than the batch limit gets before any other work (at most one of each non-body
    section precedes the body, so this reads a handful of descriptors whatever the size)."""
    pos, n = 0, len(data)
    try:
        for _ in range(6):  # header, the two annotations, properties, application-properties
            if pos >= n:
                return False
            code, vpos = _section_code(data, pos)
            end = codec._skip(data, vpos)
            if code >= sections.DATA:
                offset = 2 if data[vpos] == 0xA0 else 5
                return code == sections.DATA and sections.starts_section(data, vpos + offset, end)
            pos = end
    except _SCAN_ERRORS:
        return False
    return False


# what a scan of a transfer that is not a message raises (sections.scan_fields translates the
# second kind into SectionError; scan_transfer only needs to know the scan failed)
_SCAN_ERRORS = (sections.SectionError, *_FAILURES)
# a well-formed message the service refuses: raised as soon as it is seen, never re-scanned
_REFUSALS = (
    sections.SectionTooDeep,
    sections.PropertyValueError,
    sections.HeaderTooLarge,
    sections.TooManySections,
)

TICKS_AT_UNIX_EPOCH = 621_355_968_000_000_000


def dotnet_ticks(unix_ms: int) -> int:
    """.NET ticks (100 ns since 0001-01-01 UTC) for com.microsoft:locked-until-utc [contract 4.4]."""
    return unix_ms * 10_000 + TICKS_AT_UNIX_EPOCH


def to_incoming(
    scanned: sections.ScannedMessage, for_topic: bool = False, assigned: bool = False
) -> IncomingMessage:
    """The message to store; `assigned`: its id was given by sbemu already (largescan)."""
    # Azure gives a message whose sender set no MessageId one at enqueue (the JS SDK's lock
    # renewer keys on it); stamped into the stored bytes so every reader sees the same id.
    if scanned.message_id is None:
        assigned = True
        scanned = sections.assign_message_id(scanned, sections.new_message_id())
    return IncomingMessage(  # positional: a keyword call builds a dict per message
        scanned.message_id,
        scanned.session_id,
        scanned.partition_key,
        scanned.ttl_ms,
        scanned.durable,
        scanned.priority,
        scanned.annotation_count,
        scanned.annotations,
        scanned.tail,
        scanned.size,
        scanned.scheduled_enqueue_time_ms,
        scanned.via_partition_key,
        scanned.properties_span,
        scanned.body_span,
        None,  # original_sequence_number
        0,  # transfer_hops
        (lambda: message_view(scanned)) if for_topic else None,
        assigned,
        scanned.first_acquirer,
    )


def encode_delivery(
    rec: MessageRecord,
    partition_id: int | None,
    locked_until_ms: int | None,
    with_state: bool = False,
    delivery_stamps: list[tuple[bytes, bytes]] | None = None,
) -> bytes:
    """A stored message as sent to a client (delivery, peek, receive-by-sequence-number),
    with the service annotations of [contract 3.7] in their required AMQP types.
    `delivery_stamps` go into the delivery-annotations (see sections.build_message)."""
    return b"".join(
        encode_delivery_parts(rec, partition_id, locked_until_ms, with_state, delivery_stamps)
    )


def encode_delivery_parts(
    rec: MessageRecord,
    partition_id: int | None,
    locked_until_ms: int | None,
    with_state: bool = False,
    delivery_stamps: list[tuple[bytes, bytes]] | None = None,
) -> list[bytes | memoryview]:
    """encode_delivery's message as its parts, not joined (its stored tail, or a view of it,
    last: a large message is not copied)."""
    stamps = [
        (K_SEQUENCE, codec.enc_long(rec.sequence_number)),
        (K_ENQUEUED, codec.enc_timestamp(rec.enqueued_time_ms)),
    ]
    if locked_until_ms is not None:
        stamps.append((K_LOCKED_UNTIL, codec.enc_timestamp(locked_until_ms)))
    if partition_id is not None:
        stamps.append((K_PARTITION_ID, codec.enc_short(partition_id)))
    state = rec.state
    if rec.scheduled_enqueue_time_ms is not None and state == MessageState.ACTIVE:
        # A scheduled message stays "scheduled" once active: Azure says so on its deliveries
        # and peeks (Microsoft's sendAndSchedule.spec "Schedule single message"), so every
        # delivery of one carries the state, not only peeks and receive-by-sequence-number.
        state, with_state = MessageState.SCHEDULED, True
    if with_state:
        stamps.append((K_MESSAGE_STATE, codec.enc_int(int(state))))
    if rec.original_sequence_number is not None:  # auto-forwarded: its first sequence number
        stamps.append((K_ENQUEUE_SEQUENCE, codec.enc_long(rec.original_sequence_number)))
    return encode_record_parts(rec, stamps, delivery_stamps)


def lock_token_stamp(key: int) -> list[tuple[bytes, bytes]]:
    """The delivery-annotations of a peek-locked delivery: x-opt-lock-token, the lock token
    (Lock.key) as an AMQP uuid, network order [contract 3.7]."""
    return [(K_LOCK_TOKEN, b"\x98" + key.to_bytes(16, "big"))]


def encode_record(
    rec: MessageRecord,
    stamps: list[tuple[bytes, bytes]],
    delivery_stamps: list[tuple[bytes, bytes]] | None = None,
) -> bytes:
    """Rebuild a stored message for the wire with service annotations stamped on."""
    return b"".join(encode_record_parts(rec, stamps, delivery_stamps))


def encode_record_parts(
    rec: MessageRecord,
    stamps: list[tuple[bytes, bytes]],
    delivery_stamps: list[tuple[bytes, bytes]] | None = None,
) -> list[bytes | memoryview]:
    """encode_record's message as its parts (sections.build_message_parts)."""
    overrides = rec.property_overrides
    if rec.dead_letter_reason is not None or rec.dead_letter_description is not None:
        overrides = dict(overrides or {})
        if rec.dead_letter_reason is not None:
            overrides["DeadLetterReason"] = codec.enc_string(rec.dead_letter_reason)
        if rec.dead_letter_description is not None:
            overrides["DeadLetterErrorDescription"] = codec.enc_string(rec.dead_letter_description)
    if rec.dead_letter_source is not None:
        stamps = stamps + [(K_DEADLETTER_SOURCE, codec.enc_string(rec.dead_letter_source))]
    if rec.scheduled_enqueue_time_ms is not None:
        stamps = stamps + [(K_SCHEDULED, codec.enc_timestamp(rec.scheduled_enqueue_time_ms))]
    return sections.build_message_parts(
        durable=rec.durable,
        first_acquirer=rec.first_acquirer,
        priority=rec.priority,
        ttl_ms=rec.ttl_ms,
        delivery_count=rec.delivery_count,
        annotations=rec.annotations,
        annotation_count=rec.annotation_count,
        stamps=stamps,
        tail=rec.tail,
        property_overrides=overrides,
        delivery_stamps=delivery_stamps,
    )


@overload
def scan_transfer(
    data: bytes,
    limit: int,
    for_topic: bool = False,
    batch_limit: int | None = None,
    split: Literal[False] = False,
) -> list[IncomingMessage]: ...


@overload
def scan_transfer(
    data: bytes, limit: int, for_topic: bool, batch_limit: int | None, split: bool
) -> list[IncomingMessage] | BatchScan: ...


def scan_transfer(
    data: bytes,
    limit: int,
    for_topic: bool = False,
    batch_limit: int | None = None,
    split: bool = False,
) -> list[IncomingMessage] | BatchScan:
    """Scan a transfer into messages: a batch envelope is unpacked [contract 3.4].

    `limit` is the entity's maximum message size in bytes, `batch_limit` the largest batch
    envelope (the tier's batch size: sbemu.protocol.sizes; None: `limit`); `for_topic`
    attaches a lazy filter view to each message (only topics evaluate rules). With `split`, a
    batch of more than SCAN_CHUNK messages comes back as a BatchScan for the caller to step
    (one turn of the event loop each), not as its messages; without, the list always."""
    if len(data) > limit:
        raise MessageSizeExceeded(
            f"The received message (size {len(data)} bytes) exceeds the limit "
            f"({limit} bytes) currently allowed on the link."
        )
    if type(data) is not bytes:
        data = bytes(data)
    if batch_limit is not None and len(data) > batch_limit and _batch_shaped(data):
        raise _batch_too_large(len(data), batch_limit)  # before any section is split or scanned
    try:
        fields = sections._scan(data)  # (scan_fields without its call and error translation)
    except _REFUSALS as exc:
        raise _refusal(exc) from exc
    except _SCAN_ERRORS:
        fields = None
    if fields is not None and not fields[MAY_BE_BATCH]:  # not a batch: one scan, no split
        header, props, ann, tail, size, properties_span, body_span, _, _ = fields
        if props[0] is None or for_topic:  # an id to assign, or a filter view to attach
            return [to_incoming(sections.scanned(fields), for_topic)]
        durable, priority, ttl, first_acquirer = header
        message_id, session_id, _, _, _, _, _, _ = props
        partition_key, via_partition_key, scheduled, annotations, annotation_count = ann
        return [
            IncomingMessage(  # to_incoming() without the ScannedMessage
                message_id,
                session_id,
                partition_key,
                ttl,
                durable,
                priority,
                annotation_count,
                annotations,
                tail,
                size,
                scheduled,
                via_partition_key,
                properties_span,
                body_span,
                None,
                0,
                None,
                False,
                first_acquirer,
            )  # fmt: skip
        ]
    inner = _batch_payloads(data)
    if inner is None:
        return _scan_one(data, for_topic)
    if batch_limit is not None and len(data) > batch_limit:
        raise _batch_too_large(len(data), batch_limit)
    batch = BatchScan(data, inner, for_topic)
    if split and len(inner) > SCAN_CHUNK:
        return batch
    while not batch.step():
        pass
    return batch.messages


# Messages of a batch scanned per step of a BatchScan: a batch of 4,500 tiny messages (the
# most Azure takes) held the event loop 45-53 ms scanned at once; a step of 500 takes about
# 5 ms on a developer machine (docs/performance.md, "One request, one turn").
SCAN_CHUNK = 500


class BatchScan:
    """A batch envelope's messages scanned SCAN_CHUNK at a time: `step()` scans the next
    ones and says whether all are (then in `messages`); it raises what scan_transfer raises.
    Nothing is stored meanwhile: the caller stores the batch whole once the last step is done
    (one send, one commit: all or none)."""

    __slots__ = ("data", "parts", "for_topic", "messages", "_next")

    def __init__(self, data: bytes, parts: list[bytes], for_topic: bool) -> None:
        self.data = data
        self.parts = parts
        self.for_topic = for_topic
        self.messages: list[IncomingMessage] = []
        self._next = 0

    def step(self) -> bool:
        """Scan the next SCAN_CHUNK messages; True once all are scanned."""
        start, for_topic = self._next, self.for_topic
        end = self._next = start + SCAN_CHUNK
        try:
            self.messages += [
                to_incoming(sections.scan_message(p), for_topic) for p in self.parts[start:end]
            ]
        except _REFUSALS as exc:  # a batch whose message cannot be stored is refused whole
            raise _refusal(exc) from exc
        except sections.SectionError:
            # not an envelope after all: a message whose body looks like one
            self.messages = _scan_one(self.data, for_topic)
            return True
        return end >= len(self.parts)


def _scan_one(data: bytes, for_topic: bool) -> list[IncomingMessage]:
    """A transfer scanned as one message, with the errors a client sees."""
    try:
        return [to_incoming(sections.scan_message(data), for_topic)]
    except _REFUSALS as exc:
        raise _refusal(exc) from exc
    except sections.SectionError as exc:
        raise InvalidOperation(f"The message could not be decoded: {exc}") from exc


def _batch_too_large(size: int, limit: int) -> MessageSizeExceeded:
    return MessageSizeExceeded(
        f"The received batch (size {size} bytes) exceeds the limit "
        f"({limit} bytes) allowed for a batch on the link."
    )


def _refusal(exc: sections.SectionError) -> ServiceBusError:
    """The error a client sees for a well-formed message the service does not take."""
    if isinstance(exc, sections.SectionTooDeep):
        return ArgumentError(f"The message was refused: {exc} (sbemu's limit).")
    if isinstance(exc, sections.HeaderTooLarge):  # SDKs: MessageSizeExceeded(Error)
        return MessageSizeExceeded(f"The message was refused: {exc}.")
    if isinstance(exc, sections.TooManySections):
        return QuotaExceeded(f"The message was refused: {exc}.")
    return ArgumentOutOfRange(f"The message was refused: {exc}")  # PropertyValueError


def plain_value(value: object) -> object:
    """proton's decoded value as a plain Python value the codec can encode."""
    from proton import symbol, timestamp

    if isinstance(value, timestamp):
        return codec.Timestamp(int(value))
    if isinstance(value, symbol):
        return codec.Symbol(str(value))
    return value


def view_of_record(rec: object) -> MessageView:
    """The filter view of a stored message (a topic's scheduled or forwarded message, routed
    when it fires): rebuilt and scanned like a new send. Only for subscriptions with rules."""
    # (quotas=False: what sbemu added, dead-letter properties, must not make it unroutable)
    return message_view(sections.scan_message(encode_record(rec, []), quotas=False))  # type: ignore[arg-type]
