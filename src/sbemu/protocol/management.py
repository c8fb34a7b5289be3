"""The `$management` node of an entity: request/response operations [contract 6].

Requests arrive as full AMQP messages (decoded with proton: this is not the hot path) and get
a response with `statusCode` (int), `statusDescription` (string), `errorCondition` (symbol) on
failure, the request's message-id as correlation-id (same AMQP type), and an amqp-value map
with string keys. Operations that change state answer after their group commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from proton import UNDESCRIBED as _UNDESCRIBED
from proton import Array, Data, Message, int32, symbol, timestamp

from ..errors import (
    ArgumentError,
    InvalidOperation,
    MessageLockLost,
    NotImplementedOperation,
    ServiceBusError,
    SessionLockLost,
)
from ..partitions import COMPLETE, MessageState, Outcome, join_completions
from . import codec, sections
from .largeanswer import Item, LargeMessages, messages_result
from .largeanswer import answer as large_answer
from .largedelivery import Pieces
from .largescan import COPY_CHUNK, LargeScan, scan_large
from .links import RequestLink
from .managementrules import RULE_OPERATIONS
from .messages import (
    dotnet_ticks,
    encode_delivery_parts,
    lock_token_stamp,
    plain_value,
    to_incoming,
)
from .replycopies import COPIED_OPERATIONS
from .services import NamespaceInfo, Services
from .sizes import message_limit

log = logging.getLogger("sbemu.management")


class ManagementHost(Protocol):
    """What a `$management` request needs of its connection: who is asking (namespace, for
    limits and /metrics), the time, and the reply path back to the client."""

    namespace: NamespaceInfo
    services: Services
    # run a function on a later loop pass (None: all at once): a large scheduled message is
    # scanned over several (largescan.py)
    defer: Callable[[Callable[[], None]], object] | None

    @property
    def now_ms(self) -> int:
        """The current time in Unix milliseconds."""

    def send_reply(
        self,
        state: RequestLink,
        request: Message,
        response: Message | Pieces,
        copy: bool = False,
    ) -> None:
        """Send a response on the client's reply link [contract 6.1] (`copy`: and again
        later, to a peer that may drop it: replycopies.py); a large one comes encoded, as
        its parts (largeanswer.py)."""


Reply = Callable[[int, str, "dict[str, Any] | LargeMessages | None", str | None], None]
# A plain AMQP array has no descriptor: proton's UNDESCRIBED, not None (None encodes a null
# descriptor, which proton-j, the Java SDK's codec, reads as an array of described values).
# proton's stub types the descriptor as data, hence Any.
UNDESCRIBED: Any = _UNDESCRIBED


def handle_request(conn: ManagementHost, state: RequestLink, request: Message) -> None:
    """Run one management request and send its response on the client's reply link.

    Every request is answered, whatever goes wrong: a ServiceBusError with its condition, a
    field of the wrong type or shape with com.microsoft:argument-error, anything else (a bug
    of ours) and a response that cannot be encoded with amqp:internal-error. An unanswered
    request leaves the client waiting until its own deadline, the worst answer [issue 36]."""
    operation = ""
    replied = False

    def send(
        status: int,
        description: str,
        result: dict[str, Any] | LargeMessages | None,
        condition: str | None,
    ) -> None:
        app: dict[str, Any] = {"statusCode": int32(status), "statusDescription": description}
        if condition is not None:
            app["errorCondition"] = symbol(condition)
            conn.services.stats.error(conn.namespace.name, condition)  # for /metrics
        if isinstance(result, LargeMessages):  # the sections before the body are proton's
            head = Message(correlation_id=request.id, properties=app).encode()
            conn.send_reply(state, request, large_answer(head, result.items))
            return
        response = Message(correlation_id=request.id, properties=app, body=result or {})
        conn.send_reply(state, request, response, copy=operation in COPIED_OPERATIONS)

    def reply(
        status: int,
        description: str,
        result: dict[str, Any] | LargeMessages | None = None,
        condition: str | None = None,
    ) -> None:
        nonlocal replied
        if replied:
            return
        replied = True
        try:
            send(status, description, result, condition)
        except Exception as exc:  # noqa: BLE001 - the answer itself failed: still answer
            log.warning(
                "management %s on %s: cannot encode the response: %r", operation, state.node, exc
            )
            send(500, f"The response to '{operation}' could not be encoded.", None, INTERNAL)

    try:
        raw_props: Any = request.properties or {}  # proton leaves properties untyped
        props = {str(k): v for k, v in raw_props.items()} if isinstance(raw_props, dict) else {}
        operation = str(props.get("operation") or "")
        raw_body = request.body if isinstance(request.body, dict) else {}
        body = {str(k): v for k, v in raw_body.items()}
        log.debug("management %s on %s: %r", operation, state.node, body)
        if state.entity is not None and state.view is not None:
            # peeks, rules...: activity (AutoDeleteOnIdle)
            state.entity.note_access(state.view.queue)
        handler = OPERATIONS.get(operation)
        if handler is None:
            raise NotImplementedOperation(
                f"The management operation '{operation}' is not supported."
            )
        if (
            state.view is not None
            and not state.view.receivable
            and operation not in TOPIC_OPERATIONS
        ):
            raise InvalidOperation(
                f"The management operation '{operation}' needs a queue or subscription; "
                f"'{state.node}' is a topic."
            )
        handler(conn, state, body, reply)
    except Exception as exc:  # noqa: BLE001 - every request is answered (see _answer_error)
        _answer_error(reply, operation, state.node, exc)


def _answer_error(reply: Reply, operation: str, node: str, exc: Exception) -> None:
    """Answer a request that raised `exc`: a ServiceBusError with its condition, a field of
    the wrong type or shape with com.microsoft:argument-error, anything else (a bug of ours)
    with amqp:internal-error."""
    if isinstance(exc, ServiceBusError):
        reply(exc.status_code, exc.description, None, exc.condition)
    elif isinstance(
        exc, TypeError | ValueError | OverflowError | KeyError | IndexError | AttributeError
    ):
        # A field of the wrong AMQP type or shape: the caller's error, never an internal one.
        log.info("management %s on %s: invalid request: %r", operation, node, exc)
        error = ArgumentError(f"The request for '{operation}' is invalid: {exc}")
        reply(error.status_code, error.description, None, error.condition)
    else:
        log.warning("management %s on %s failed: %r", operation, node, exc)
        reply(500, f"The request for '{operation}' could not be served: {exc!r}", None, INTERNAL)


def _later(reply: Reply, operation: str, node: str, fn: Callable[..., None]) -> Callable[..., None]:
    """`fn`, to run later (once a large record was read off the loop), its errors answered
    as handle_request answers them."""

    def run(*args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - every request is answered
            _answer_error(reply, operation, node, exc)

    return run


INTERNAL = "amqp:internal-error"


def _reply_error(reply: Reply) -> Callable[[Exception | None], None]:
    """A completion that answers 200, or the error's status and condition."""

    def done(error: Exception | None) -> None:
        if error is None:
            reply(200, "OK", {}, None)
        elif isinstance(error, ServiceBusError):
            reply(error.status_code, error.description, None, error.condition)
        else:
            reply(
                503,
                f"The partition store is unavailable: {error}",
                None,
                "com.microsoft:server-busy",
            )

    return done


def _elements(value: object) -> list[Any]:
    """An AMQP array or list from proton as a Python list."""
    if value is None:
        return []
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def _tokens(body: dict[str, Any]) -> list[uuid.UUID]:
    out = []
    for item in _elements(body.get("lock-tokens")):
        if isinstance(item, uuid.UUID):
            out.append(item)
        elif isinstance(item, bytes | bytearray | memoryview) and len(item) == 16:
            out.append(uuid.UUID(bytes=bytes(item)))
        else:
            raise ArgumentError(f"lock-tokens must be an array of uuid, not {type(item).__name__}.")
    return out


# ------------------------------------------------------------------------ operations
def _renew_lock(conn: ManagementHost, state: RequestLink, body: dict, reply: Reply) -> None:
    assert state.entity is not None
    expirations = [state.entity.renew(t.int, conn.now_ms) for t in _tokens(body)]
    reply(
        200,
        "OK",
        {"expirations": Array(UNDESCRIBED, Data.TIMESTAMP, *[timestamp(ms) for ms in expirations])},
        None,
    )


def _peek(conn: ManagementHost, state: RequestLink, body: dict, reply: Reply) -> None:
    assert state.view is not None
    session_id = body.get("session-id")
    start = int(body.get("from-sequence-number") or 0)
    count = int(body.get("message-count") or 1)
    if count <= 0:
        raise ArgumentError("message-count must be positive.")
    view = state.view
    sid = str(session_id) if session_id is not None else None
    # a large message is read off the loop first (largeread.py): the answer follows
    answer = _later(reply, "com.microsoft:peek-message", state.node, partial(_peeked, reply))
    view.read_peeked(view.peek(start, count, sid, large_later=True), answer)


def _peeked(reply: Reply, found: list[tuple[Any, int | None]]) -> None:
    """Answer a peek with what it found."""
    if not found:
        reply(204, "No messages to peek.", {}, None)
        return
    items: list[Item] = [
        (encode_delivery_parts(rec, pid, None, with_state=True), None) for rec, pid in found
    ]
    reply(200, "OK", messages_result(items), None)


DISPOSITIONS = ("completed", "abandoned", "suspended", "defered", "deferred")


def _update_disposition(conn: ManagementHost, state: RequestLink, body: dict, reply: Reply) -> None:
    entity = state.entity
    assert entity is not None
    status = str(body.get("disposition-status") or "")
    if status not in DISPOSITIONS:
        raise ArgumentError(f"Unknown disposition-status '{status}'.")
    tokens = _tokens(body)
    overrides = None
    modify = body.get("properties-to-modify")
    if isinstance(modify, dict) and modify:
        overrides = {str(k): codec.encode(plain_value(v)) for k, v in modify.items()}
    if not tokens:
        raise ArgumentError("update-disposition needs at least one lock token in lock-tokens.")
    if _session_of(state, body) is not None:
        # A session receiver's settlement: its session lock must still be held, else
        # session-lock-lost (SDKs: SessionLockLost), as the receive link answers [contract 6.4].
        _owned_session(conn, state, str(body["session-id"]))
    one_done = join_completions(len(tokens), _reply_error(reply))

    if status == "completed":
        outcome = COMPLETE
    elif status == "abandoned":
        outcome = Outcome.abandon(overrides)
    elif status == "suspended":
        reason = body.get("deadletter-reason")
        description = body.get("deadletter-description")
        outcome = Outcome.dead_letter(
            str(reason) if reason is not None else None,
            str(description) if description is not None else None,
            overrides,
        )
    else:
        outcome = Outcome.defer(overrides)
    now_ms = conn.now_ms
    for key in [t.int for t in tokens]:  # inside partitions/ a lock is its token's int
        try:
            entity.settle(key, outcome, now_ms, one_done)
        except MessageLockLost as exc:
            one_done(exc)


def _receive_by_sequence_number(
    conn: ManagementHost, state: RequestLink, body: dict, reply: Reply
) -> None:
    entity, view = state.entity, state.view
    assert entity is not None and view is not None
    if _session_of(state, body) is not None:
        _owned_session(conn, state, str(body["session-id"]))
    numbers = _sequence_numbers(body)
    mode = int(body.get("receiver-settle-mode") or 0)
    peek_lock = mode == 1
    # the stored records first, a large one read off the loop (largeread.py): then the locks
    receive = partial(_receive_deferred, conn, state, numbers, peek_lock, reply)
    operation = "com.microsoft:receive-by-sequence-number"
    entity.read_stored(view.queue, numbers, _later(reply, operation, state.node, receive))


def _receive_deferred(
    conn: ManagementHost,
    state: RequestLink,
    numbers: list[int],
    peek_lock: bool,
    reply: Reply,
    read: dict[int, Any],
) -> None:
    """Take the deferred messages (their records as read) and answer with them."""
    entity, view = state.entity, state.view
    assert entity is not None and view is not None
    taken = entity.receive_deferred(view.queue, numbers, conn.now_ms, peek_lock, read)
    items: list[Item] = []
    for rec, lock, pid in taken:
        # azure-servicebus <= 7.14 reads the token from the embedded message's
        # delivery-annotations instead of the map [contract 3.7: x-opt-lock-token].
        parts = encode_delivery_parts(
            rec,
            pid,
            lock.until_ms if lock else None,
            with_state=True,
            delivery_stamps=lock_token_stamp(lock.key) if lock is not None else None,
        )
        items.append((parts, lock.token if lock is not None else None))
    reply(200, "OK", messages_result(items), None)


def _schedule(conn: ManagementHost, state: RequestLink, body: dict, reply: Reply) -> None:
    entity = state.entity
    assert entity is not None
    datas = []
    limit = message_limit(entity, conn.namespace)  # the entity's MaxMessageSizeInKilobytes
    for item in _elements(body.get("messages")):
        if not isinstance(item, dict):
            raise ArgumentError("messages must be a list of maps.")
        item = {str(k): v for k, v in item.items()}
        data = item.get("message")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ArgumentError("Each scheduled message needs an encoded 'message'.")
        if len(data) > limit:
            from ..errors import MessageSizeExceeded

            raise MessageSizeExceeded(
                f"The message (size {len(data)} bytes) exceeds the limit of {limit} bytes."
            )
        datas.append(data)
    for_topic, defer = entity.subscriptions is not None, conn.defer
    # a large message is scanned and its tail copied over several loop passes (largescan.py)
    scans: list[LargeScan | None] = []
    for data in datas:
        job = None
        if defer is not None and len(data) > COPY_CHUNK:
            scanned = scan_large(bytes(data), limit, for_topic, None)
            job = scanned if isinstance(scanned, LargeScan) else None
        scans.append(job)
    send = partial(_schedule_scanned, conn, state, datas, scans, reply)
    if not any(scans):
        send()
        return
    assert defer is not None
    operation = "com.microsoft:schedule-message"

    def step() -> None:
        for job in scans:
            if job is not None and not job.step():
                defer(_later(reply, operation, state.node, step))
                return
        send()

    defer(_later(reply, operation, state.node, step))


def _schedule_scanned(
    conn: ManagementHost,
    state: RequestLink,
    datas: list[Any],
    scans: list[LargeScan | None],
    reply: Reply,
) -> None:
    """Schedule the request's messages, scanned (a large one by its LargeScan)."""
    entity = state.entity
    assert entity is not None
    for_topic = entity.subscriptions is not None
    incoming = []
    for data, job in zip(datas, scans, strict=True):
        if job is not None:
            message = job.message()
        else:
            try:
                scanned = sections.scan_message(bytes(data))
            except sections.SectionError as exc:
                raise ArgumentError(f"A scheduled message could not be decoded: {exc}") from exc
            message = to_incoming(scanned, for_topic)
        if message.scheduled_enqueue_time_ms is None:
            raise ArgumentError("A scheduled message needs x-opt-scheduled-enqueue-time.")
        incoming.append(message)
    numbers: list[int] = []

    def done(error: Exception | None) -> None:
        if error is None:
            reply(200, "OK", {"sequence-numbers": Array(UNDESCRIBED, Data.LONG, *numbers)}, None)
        else:
            _reply_error(reply)(error)

    numbers.extend(entity.send(incoming, conn.now_ms, done))


_LONG_MAX = (1 << 63) - 1


def _sequence_numbers(body: dict) -> list[int]:
    """The request's sequence-numbers: AMQP longs, none negative (a sequence number never is).
    Anything else (a uuid, a string, -1, a number past 63 bits) is the caller's error,
    com.microsoft:argument-error, not ours."""
    numbers = []
    for n in _elements(body.get("sequence-numbers")):
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= _LONG_MAX:
            raise ArgumentError(
                f"sequence-numbers must be an array of non-negative longs, not {n!r}."
            )
        numbers.append(int(n))
    return numbers


def _cancel_scheduled(conn: ManagementHost, state: RequestLink, body: dict, reply: Reply) -> None:
    entity = state.entity
    assert entity is not None
    numbers = _sequence_numbers(body)

    # the stored records first, a large one read off the loop (largeread.py): then the cancel
    def cancel(read: dict[int, Any]) -> None:
        entity.cancel_scheduled(numbers, conn.now_ms, _reply_error(reply), read)

    operation = "com.microsoft:cancel-scheduled-message"
    entity.read_stored(
        entity.scheduled_queue, numbers, _later(reply, operation, state.node, cancel)
    )


# .NET DateTime.MaxValue in Unix ms, as the SDKs send it to mean "list every session" [6.3].
LIST_ALL_SESSIONS_MS = 253_402_300_800_000


def _session_of(state: RequestLink, body: dict) -> object:
    """The request's session-id, None on a dead-letter queue: it has no sessions and Azure
    ignores the session-id the SDKs copy there from a dead-lettered session message (the JS
    SDK settles a deferred one through $management with it)."""
    if state.view is not None and state.view.queue.endswith(DLQ_NAME):
        return None
    return body.get("session-id")


DLQ_NAME = "$deadletterqueue"  # the last segment of a dead-letter queue's path


def _owned_session(conn: ManagementHost, state: RequestLink, session_id: str) -> object:
    """The session's lock owner, which must be a receiver on this connection [contract 6.4]."""
    entity, view = state.entity, state.view
    assert entity is not None and view is not None
    if not view.requires_session:
        raise InvalidOperation(f"The entity '{view.address}' does not require sessions.")
    owner = entity.session_owner(view.queue, session_id, conn.now_ms)
    if owner is None or getattr(owner, "conn", None) is not conn:
        raise SessionLockLost(
            f"The session lock for session '{session_id}' has expired or is not held by this "
            "client. Accept the session first."
        )
    return owner


def _session_id(body: dict) -> str:
    value = body.get("session-id")
    if value is None:
        raise ArgumentError("session-id is required.")
    return str(value)


def _renew_session_lock(conn: ManagementHost, state: RequestLink, body: dict, reply: Reply) -> None:
    entity, view = state.entity, state.view
    assert entity is not None and view is not None
    session_id = _session_id(body)
    owner = _owned_session(conn, state, session_id)
    until = entity.renew_session(view.queue, session_id, owner, conn.now_ms)
    receiver = owner
    if hasattr(receiver, "link"):
        from proton import symbol as _symbol

        receiver.link.properties = {_symbol("com.microsoft:locked-until-utc"): dotnet_ticks(until)}
    reply(200, "OK", {"expiration": timestamp(until)}, None)


def _get_session_state(conn: ManagementHost, state: RequestLink, body: dict, reply: Reply) -> None:
    entity, view = state.entity, state.view
    assert entity is not None and view is not None
    session_id = _session_id(body)
    _owned_session(conn, state, session_id)
    data = entity.get_session_state(view.queue, session_id)
    reply(200, "OK", {"session-state": data}, None)


def _set_session_state(conn: ManagementHost, state: RequestLink, body: dict, reply: Reply) -> None:
    entity, view = state.entity, state.view
    assert entity is not None and view is not None
    session_id = _session_id(body)
    _owned_session(conn, state, session_id)
    data = body.get("session-state")
    if data is not None and not isinstance(data, bytes | bytearray | memoryview):
        raise ArgumentError("session-state must be binary or null.")
    entity.set_session_state(
        view.queue,
        session_id,
        bytes(data) if data is not None else None,
        conn.now_ms,
        _reply_error(reply),
    )


def _get_message_sessions(
    conn: ManagementHost, state: RequestLink, body: dict, reply: Reply
) -> None:
    entity, view = state.entity, state.view
    assert entity is not None and view is not None
    if not view.requires_session:
        raise InvalidOperation(
            f"The entity '{view.address}' does not have sessions enabled (RequiresSession=false)."
        )
    skip = int(body.get("skip") or 0)
    top = int(body.get("top") or 100)
    since = body.get("last-updated-time")
    changed_after = None
    if since is not None and int(since) < LIST_ALL_SESSIONS_MS:
        changed_after = int(since)
    ids = entity.session_ids(view.queue, changed_after)[skip : skip + top]
    if not ids:
        reply(204, "No sessions.", {}, None)
        return
    reply(
        200,
        "OK",
        {"skip": int32(skip + len(ids)), "sessions-ids": Array(UNDESCRIBED, Data.STRING, *ids)},
        None,
    )


# What a topic's own $management node answers (it has no messages of its own to browse or lock).
TOPIC_OPERATIONS = frozenset(
    {"com.microsoft:schedule-message", "com.microsoft:cancel-scheduled-message"}
)

OPERATIONS: dict[str, Callable[[ManagementHost, RequestLink, dict, Reply], None]] = {
    "com.microsoft:renew-lock": _renew_lock,
    "com.microsoft:peek-message": _peek,
    "com.microsoft:update-disposition": _update_disposition,
    "com.microsoft:receive-by-sequence-number": _receive_by_sequence_number,
    "com.microsoft:schedule-message": _schedule,
    "com.microsoft:cancel-scheduled-message": _cancel_scheduled,
    "com.microsoft:get-message-sessions": _get_message_sessions,
    "com.microsoft:renew-session-lock": _renew_session_lock,
    "com.microsoft:get-session-state": _get_session_state,
    "com.microsoft:set-session-state": _set_session_state,
    **RULE_OPERATIONS,
}

__all__ = ["handle_request", "MessageState"]
