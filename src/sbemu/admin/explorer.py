"""Message explorer: peek, test sends, resubmit and purge, as plain functions over the router.

Reads go through the same code as the AMQP `$management` peek: EntityView.peek() for the
records and the peek's encoder (WireCodec.encode_peeked) for the bytes a client would get, which
we then decode like a client (proton) to show system properties, application properties and the
body. Peeking never locks a message nor changes its delivery count.

Writes go through the router's normal send path (Entity.send, the same scan -> IncomingMessage
conversion an AMQP sender's transfer gets, WireCodec.to_incoming), so a test message is routed,
partitioned, filtered and acknowledged after its group commit like any other. No clock here:
callers pass `now_ms`.

The wire format is handed in, not imported: admin/ and protocol/ are independent rooms, and the
server (above both) passes a WireCodec built on protocol.messages and protocol.sections.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import math
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from proton import Message, symbol, timestamp

from ..errors import ArgumentError, MessageSizeExceeded, ServiceBusError
from ..partitions import (
    DLQ_SUFFIX,
    MAIN,
    SEQUENCE_BITS,
    TRANSFER_DLQ_SUFFIX,
    Entity,
    EntityView,
    IncomingMessage,
    MessageRecord,
    MessageState,
    PurgeJob,
    locked_until,
    purge_state,
)
from .bounded import INT64_MAX, INT64_MIN, int_field
from .msgsearch import MessageSearch

MAX_PEEK = 100  # messages per explorer page
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
SCAN_LIMIT = 5_000  # records looked at per page when filtering by state
# ... and when searching, where each one is decoded on the event loop (50-100 us; a search by
# message id alone reads the properties section first, ~10x cheaper): the page then ends early
# with `next` set, and the explorer asks on from there
SEARCH_SCAN_LIMIT = 500
BODY_PREVIEW = 64 * 1024  # bytes of body shown (text or hex)
LARGE_RECORD = 4 * BODY_PREVIEW  # bytes of tail beyond which a body is cut before decoding

DEAD_LETTERED = "dead-lettered"  # a message's State on the dead-letter tabs

# Explorer "state" tabs -> (sub-queue suffix, record state wanted or None for all)
STATES: dict[str, tuple[str, MessageState | None]] = {
    "active": ("", MessageState.ACTIVE),
    "deferred": ("", MessageState.DEFERRED),
    "scheduled": ("", MessageState.SCHEDULED),
    "deadletter": (DLQ_SUFFIX, None),
    "transferdeadletter": (TRANSFER_DLQ_SUFFIX, None),
}


class WireCodec(Protocol):
    """The AMQP wire format, as the explorer needs it (sbemu.runtime.server.WIRE_CODEC implements it
    over protocol.messages and protocol.sections)."""

    def encode_peeked(self, rec: MessageRecord, partition_id: int | None) -> bytes:
        """A stored message as a peek sends it to a client (with its state annotation)."""
        ...

    def encode_record(self, rec: MessageRecord) -> bytes:
        """A stored message rebuilt as a plain message (no service annotations stamped on)."""
        ...

    def read_properties(self, data: bytes) -> dict[str, object]:
        """The properties section of an encoded message: {AMQP field name: value}, no nulls."""
        ...

    def to_incoming(self, data: bytes, for_topic: bool) -> IncomingMessage:
        """An encoded message as the send path takes it (as an AMQP transfer's bytes are);
        raises ValueError when the bytes are not a well-formed message."""
        ...


def sub_queue(entity: Entity, subscription: str | None, state: str) -> EntityView:
    """The view a tab reads: the queue (or a subscription) or one of its dead-letter queues."""
    if state not in STATES:
        raise ArgumentError(f"state must be one of {', '.join(STATES)}, not '{state}'.")
    base = MAIN if not subscription else f"subscriptions/{subscription.lower()}"
    view = entity.views.get(base + STATES[state][0])
    if view is None or not view.receivable:
        what = f"subscription '{subscription}'" if subscription else "a receivable queue"
        raise ArgumentError(f"'{entity.name}' has no {what}; pick a subscription of the topic.")
    return view


def _partition_of(entity: Entity, seq: int) -> int | None:
    return (seq >> SEQUENCE_BITS) if entity.partitioned else None


def peek(
    codec: WireCodec,
    entity: Entity,
    subscription: str | None,
    state: str,
    from_seq: int,
    count: int,
    now_ms: int,
    search: MessageSearch | None = None,
) -> dict[str, Any]:
    """One page of messages of a tab, oldest first, without locking; `next` pages on.
    With `search`, only the matching messages (admin/msgsearch.py)."""
    view = sub_queue(entity, subscription, state)
    wanted = STATES[state][1]
    count = max(1, min(count, MAX_PEEK))
    found: list[dict[str, Any]] = []
    cursor = max(0, from_seq)
    scanned = 0
    exhausted = False
    limit = SCAN_LIMIT if search is None else SEARCH_SCAN_LIMIT
    while len(found) < count and scanned < limit:
        page = view.peek(cursor, min(MAX_PEEK, limit - scanned))
        if not page:
            exhausted = True
            break
        scanned += len(page)
        for rec, pid in page:
            cursor = rec.sequence_number + 1
            if wanted is not None and rec.state != wanted:
                continue
            if search is not None and search.message_id is not None:
                # the id from the properties section alone (~1/10 of describe's decoding)
                props = codec.read_properties(codec.encode_peeked(rec, pid))
                if not search.id_matches(_json_value(props.get("message-id"))):
                    continue
            until = locked_until(entity, view.queue, rec.sequence_number)
            try:
                message = describe(codec, rec, pid, until, now_ms)
            except (RecursionError, ValueError, TypeError) as exc:
                # stored before sbemu refused such messages at send (sections nesting beyond
                # protocol/nesting.py's limit): shown as undecodable, the page still works
                message = _undecodable(rec, pid, exc)
            if wanted is None:  # a dead-letter tab: the record is active in its sub-queue
                message["state"] = DEAD_LETTERED
            if search is not None and not search.matches(message):
                continue
            found.append(message)
            if len(found) >= count:
                break
    return {
        "entity": entity.name,
        "path": view.address,
        "state": state,
        "messages": found,
        "next": None if exhausted and len(found) < count else cursor,
        "scanned": scanned,
        # EntityView.peek skips partitions out of service, as the AMQP peek does
        "offline_partitions": [b.partition_id for b in entity.partitions if not b.health.serving],
    }


def _undecodable(rec: MessageRecord, pid: int | None, exc: BaseException) -> dict[str, Any]:
    seq = rec.sequence_number
    return {
        "sequence_number": seq,
        "partition": pid,
        "partition_sequence": seq & ((1 << SEQUENCE_BITS) - 1),
        "state": MessageState(rec.state).name.lower(),
        "enqueued_ms": rec.enqueued_time_ms,
        "delivery_count": rec.delivery_count,
        "locked_until_ms": None,
        "locked": False,
        "message_id": None,
        "correlation_id": None,
        "session_id": None,
        "reply_to_session_id": None,
        "partition_key": None,
        "subject": None,
        "to": None,
        "reply_to": None,
        "content_type": None,
        "ttl_ms": rec.ttl_ms,
        "expires_ms": rec.expires_at_ms,
        "scheduled_ms": rec.scheduled_enqueue_time_ms,
        "dead_letter_reason": rec.dead_letter_reason,
        "dead_letter_description": rec.dead_letter_description,
        "dead_letter_source": rec.dead_letter_source,
        "size": rec.size,
        "annotations": {},
        "application_properties": {},
        "body": _text_body(f"(the message cannot be decoded here: {type(exc).__name__})", 0),
        "error": f"the message cannot be decoded here: {type(exc).__name__}",
    }


# ------------------------------------------------------------------------ decoding
def describe(
    codec: WireCodec,
    rec: MessageRecord,
    pid: int | None,
    locked_until_ms: int | None,
    now_ms: int,
) -> dict[str, Any]:
    """A message as the explorer shows it: decoded from the bytes a peek sends (a large
    message's body cut to its first BODY_PREVIEW bytes first: large_preview)."""
    shown, body_size = large_preview(rec)
    data = codec.encode_peeked(shown, pid)
    msg = Message()
    msg.decode(data)
    annotations = {str(k): v for k, v in (msg.annotations or {}).items()}
    app_props: dict[Any, Any] = msg.properties or {}  # proton leaves these untyped
    app = {str(k): _json_value(v) for k, v in app_props.items()}
    seq = rec.sequence_number
    return {
        "sequence_number": seq,
        "partition": pid,
        "partition_sequence": seq & ((1 << SEQUENCE_BITS) - 1),
        "state": MessageState(rec.state).name.lower(),
        "enqueued_ms": rec.enqueued_time_ms,
        "delivery_count": rec.delivery_count,
        "locked_until_ms": locked_until_ms,
        "locked": locked_until_ms is not None and locked_until_ms > now_ms,
        "message_id": _json_value(msg.id),
        "correlation_id": _json_value(msg.correlation_id),
        "session_id": msg.group_id,
        "reply_to_session_id": msg.reply_to_group_id,
        "partition_key": _json_value(annotations.get("x-opt-partition-key")),
        "subject": msg.subject,
        "to": msg.address,
        "reply_to": msg.reply_to,
        "content_type": _content_type(codec, data),
        "ttl_ms": rec.ttl_ms,
        "expires_ms": rec.expires_at_ms,
        "scheduled_ms": rec.scheduled_enqueue_time_ms,
        "dead_letter_reason": rec.dead_letter_reason,
        "dead_letter_description": rec.dead_letter_description,
        "dead_letter_source": rec.dead_letter_source,
        "size": rec.size,
        "annotations": {k: _json_value(v) for k, v in annotations.items()},
        "application_properties": app,
        "body": _cut(render_body(msg.body, msg.content_type), body_size),
    }


def large_preview(rec: MessageRecord) -> tuple[MessageRecord, int | None]:
    """A record whose body (up to 100 MB on Premium) is cut for showing: its properties kept,
    its body replaced by one data section of the first BODY_PREVIEW bytes of the original's
    first section (nothing of a non-data body: it cannot be decoded in part), and the body's
    real size in bytes. Small records are returned as they are (size None): a page of large
    messages costs a few preview copies, never the messages themselves."""
    span = rec.body_span
    tail = rec.tail
    if span is None or len(tail) <= LARGE_RECORD:
        return rec, None
    start, end = span
    shown = rec.copy()
    preview = b""
    size = end - start
    if tail[start + 2] == 0x75:  # a data section: 0x00 0x53 0x75, then vbin8 / vbin32
        width = 1 if tail[start + 3] == 0xA0 else 4
        length = int.from_bytes(tail[start + 4 : start + 4 + width], "big")
        at = start + 4 + width
        preview = bytes(tail[at : at + min(length, BODY_PREVIEW)])
        if at + length == end:
            size = length  # one data section: the body's bytes
    section = b"\x00\x53\x75\xb0" + len(preview).to_bytes(4, "big") + preview
    shown.tail = bytes(tail[:start]) + section
    shown.body_span = (start, len(shown.tail))
    return shown, size


def _cut(body: dict[str, Any], size: int | None) -> dict[str, Any]:
    """render_body()'s view of a cut body (large_preview), with the body's real size."""
    if size is None:
        return body
    return body | {"size": size, "truncated": True}


def _content_type(codec: WireCodec, data: bytes) -> str | None:
    # proton's getter turns a missing content-type into symbol('None'): read the field itself
    value = codec.read_properties(data).get("content-type")
    return str(value) if value is not None else None


def _json_value(value: Any) -> Any:
    """A decoded AMQP value as something JSON can carry (and a person can read)."""
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, timestamp):
            return _iso(int(value))
        return value if not isinstance(value, symbol) else str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return str(value)


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def render_body(body: Any, content_type: object = None) -> dict[str, Any]:
    """Text, pretty-printed JSON, or hex for binary: the first BODY_PREVIEW bytes."""
    if isinstance(body, bytes | bytearray | memoryview):
        raw = bytes(body)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return {
                "kind": "binary",
                "size": len(raw),
                "hex": raw[:BODY_PREVIEW].hex(" "),
                "truncated": len(raw) > BODY_PREVIEW,
            }
        return _text_body(text, len(raw))
    if isinstance(body, str):
        return _text_body(body, len(body.encode("utf-8")))
    if body is None:
        return {"kind": "empty", "size": 0, "text": ""}
    value = _json_value(body)
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return {"kind": "amqp-value", "size": len(text), "text": text[:BODY_PREVIEW]}


def _text_body(text: str, size: int) -> dict[str, Any]:
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and len(text) <= 4 * BODY_PREVIEW:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            return {"kind": "json", "size": size, "text": pretty[:BODY_PREVIEW]}
        except ValueError:
            pass
    return {
        "kind": "text",
        "size": size,
        "text": text[:BODY_PREVIEW],
        "truncated": len(text) > BODY_PREVIEW,
    }


# ------------------------------------------------------------------------ sending
def build_test_message(form: dict[str, Any], now_ms: int) -> bytes:
    """Encode the explorer's send form as an AMQP message, as an SDK would."""
    body = form.get("body", "")
    if not isinstance(body, str):
        raise ArgumentError("body must be text.")
    msg = Message()
    encoding = form.get("body_encoding") or "text"
    if encoding == "base64":
        try:
            msg.body = base64.b64decode(body, validate=True)
        except ValueError as exc:
            raise ArgumentError(f"body is not valid base64: {exc}") from exc
    else:
        msg.body = body.encode("utf-8")  # one data section, like ServiceBusMessage(str)
    msg.inferred = True
    msg.durable = True
    msg.id = str(form.get("message_id") or uuid.uuid4())
    for key, attr in (
        ("content_type", "content_type"),
        ("subject", "subject"),
        ("correlation_id", "correlation_id"),
        ("session_id", "group_id"),
        ("to", "address"),
        ("reply_to", "reply_to"),
    ):
        value = form.get(key)
        if value not in (None, ""):
            setattr(msg, attr, symbol(value) if key == "content_type" else str(value))
    props = form.get("properties") or {}
    if not isinstance(props, dict):
        raise ArgumentError("properties must be an object of name: value.")
    msg.properties = {  # type: ignore[assignment]  # proton's stub types this as None
        str(k): v
        for k, v in props.items()
        if isinstance(v, str | int | float | bool)
        and (not isinstance(v, int) or INT64_MIN <= v <= INT64_MAX)
        and (not isinstance(v, float) or math.isfinite(v))
    }
    annotations: dict[symbol, Any] = {}
    if form.get("partition_key") not in (None, ""):
        annotations[symbol("x-opt-partition-key")] = str(form["partition_key"])
    if form.get("scheduled_ms") not in (None, ""):
        try:  # Unix milliseconds up to the end of year 9999, as .NET's DateTime
            scheduled = int_field(form, "scheduled_ms", 0, MAX_TIMESTAMP_MS)
        except ValueError as exc:
            raise ArgumentError(f"scheduled_ms must be Unix milliseconds: {exc}.") from exc
        annotations[symbol("x-opt-scheduled-enqueue-time")] = timestamp(scheduled)
    if form.get("ttl_ms") not in (None, ""):
        try:  # the AMQP header's ttl is a uint of milliseconds
            msg.ttl = int_field(form, "ttl_ms", 0, 2**32 - 1) / 1000
        except ValueError as exc:
            raise ArgumentError(f"ttl_ms: {exc}.") from exc
    if annotations:
        msg.annotations = annotations  # type: ignore[assignment]  # symbol keys, as the SDKs send
    return msg.encode()


def send_bytes(
    codec: WireCodec,
    entity: Entity,
    data: bytes,
    max_size: int,
    now_ms: int,
    done: Callable[[Exception | None], None],
) -> list[int]:
    """Send one encoded message through the entity's normal send path; `done` after commit."""
    if len(data) > max_size:
        raise MessageSizeExceeded(
            f"The message (size {len(data)} bytes) exceeds the limit of {max_size} bytes."
        )
    try:
        incoming = codec.to_incoming(data, entity.subscriptions is not None)
    except ValueError as exc:
        raise ArgumentError(f"The message could not be encoded: {exc}") from exc
    return entity.send([incoming], now_ms, done)


async def step_through(job: PurgeJob, now_ms: Callable[[], int]) -> None:
    """Step a purge to its end, letting the event loop serve everyone else between slices
    (partitions/purging.py: one piece held it 340 ms for 54,000 messages)."""
    while not job.step(now_ms()):
        # (a large message is read by its partition's next commit: a turn or a few)
        await asyncio.sleep(0.001 if job.waiting else 0)


def completion() -> tuple[Callable[[Exception | None], None], Awaitable[None]]:
    """A router `done` callback and an awaitable that finishes (or raises) with it."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(error: Exception | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    return done, future


def resubmit_bytes(codec: WireCodec, rec: MessageRecord) -> bytes:
    """A dead letter as a fresh message for its source: same body and properties, without the
    dead-letter reason/description stamps (as Service Bus Explorer's resubmit does)."""
    copy = rec.copy()
    copy.dead_letter_reason = None
    copy.dead_letter_description = None
    copy.dead_letter_source = None
    copy.scheduled_enqueue_time_ms = None
    copy.delivery_count = 0
    return codec.encode_record(copy)


async def resubmit(
    codec: WireCodec,
    entity: Entity,
    subscription: str | None,
    numbers: list[int],
    max_size: int,
    now: Callable[[], int],
) -> list[dict[str, Any]]:
    """Send each dead letter back to its entity, then remove it from the dead-letter queue.

    The copy is sent (and committed) first, so a failure never loses the message: at worst it
    is in both places. A dead letter that is locked by a receiver meanwhile stays put.
    """
    view = sub_queue(entity, subscription, "deadletter")
    results: list[dict[str, Any]] = []
    for seq in numbers:
        try:
            broker = entity.partition_of_sequence(seq)
            page = broker.peek(view.queue, seq, 1)
            if not page or page[0].sequence_number != seq:
                raise ArgumentError(f"No dead-lettered message with sequence number {seq}.")
            if locked_until(entity, view.queue, seq) is not None:
                raise ArgumentError(f"Message {seq} is locked by a receiver; try again later.")
            done, sent = completion()
            new_numbers = send_bytes(
                codec, entity, resubmit_bytes(codec, page[0]), max_size, now(), done
            )
            await sent
            removed = broker.remove(view.queue, seq, now())
            if removed is not None:
                done2, committed = completion()
                broker.after_commit(done2)
                await committed
            results.append(
                {
                    "sequence_number": seq,
                    "ok": True,
                    "new_sequence_numbers": new_numbers,
                    "removed": removed is not None,
                }
            )
        except ServiceBusError as exc:
            results.append({"sequence_number": seq, "ok": False, "error": exc.description})
    return results


async def purge(
    entity: Entity, subscription: str | None, state: str, now: Callable[[], int]
) -> dict[str, Any]:
    """Empty one explorer tab on every partition in service.

    A dead-letter tab is a whole sub-queue: it is purged like the admin API purges (locks end,
    each message logged as purged). The active, deferred and scheduled tabs share the queue:
    only messages in that state go, and a message locked by a receiver stays with its receiver.
    """
    view = sub_queue(entity, subscription, state)
    done, committed = completion()
    removed, kept = purge_state(entity, view.queue, STATES[state][1], now(), done)
    await committed
    return {
        "path": view.address,
        "removed": removed,
        "locked_kept": kept,
        "offline_partitions_skipped": [
            b.partition_id for b in entity.partitions if not b.health.serving
        ],
    }
