"""Request/reply links for AmqpConnection: $cbs put-token, $management and the other request
nodes, and the reply links their answers go out on. A mixin of AmqpConnection (connection.py
keeps the state machine and the event loop)."""

from __future__ import annotations

import itertools
import logging
import uuid
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from cproton_ffi import ffi as _ffi  # the binding's C layer: no wrapper per reply
from cproton_ffi import lib as _lib
from proton import (
    Delivery,
    Link,
    Message,
    int32,
    symbol,
    ulong,
)

from ..auth.sas import token_key_name
from ..errors import QuotaExceeded, ServiceBusError
from . import cbs, codec
from .backpressure import OutputGate
from .intake import RequestJob
from .largedelivery import Pieces
from .links import (
    LinkPhase,
    LinkState,
    ReplyLink,
    RequestLink,
    top_up_sender_credit,
)
from .management import handle_request
from .replycopies import EMPTY_FRAME, ReplyCopies
from .services import NamespaceInfo, Services

log = logging.getLogger("sbemu.connection")

# Answers a reply link may hold while its client gives it no credit. An SDK waits for each
# answer before it needs many more (a handful of concurrent lock renewals at most), so only a
# peer that sends requests and never reads reaches it: the link is then closed with
# amqp:resource-limit-exceeded and its answers dropped, at once and with a reason, where
# dropping answers silently would leave an honest client waiting for its timeout.
MAX_PENDING_REPLIES = 1000

# An answer from this size on (a peek of many messages) leaves megabytes of temporaries freed
# in the C heap, which glibc keeps while the connection lives: the server is asked to give
# them back (Services.trim_heap). Lock renewals and the like are far smaller.
LARGE_ANSWER = 4 * 1024 * 1024

# A reply's delivery tag (8 bytes, a counter), passed to pn_delivery by value
_TAG_BYTES = _ffi.new("char[8]")
_TAG_STRUCT = _ffi.new("pn_delivery_tag_t *")
_TAG_STRUCT.size = 8
_TAG_STRUCT.start = _TAG_BYTES
_TAG = _TAG_STRUCT[0]
_OPEN_BOTH_SIDES = _lib.PN_LOCAL_ACTIVE | _lib.PN_REMOTE_ACTIVE  # an endpoint's state bits


class RequestLinks:
    """The part of AmqpConnection this module owns (see the module docstring)."""

    if TYPE_CHECKING:  # what it uses of AmqpConnection
        _grants: cbs.Grants
        _links: dict[Link, LinkState]
        _out: bytearray  # bytes written before what proton frames next (output.py)
        gate: OutputGate
        _tag_counter: itertools.count[int]
        id: int
        namespace: NamespaceInfo
        now: float
        on_output: Callable[[], None]
        defer: Callable[[Callable[[], None]], object] | None

        @property
        def now_ms(self) -> int: ...

        _start_large: Callable[..., None]  # deliveries.OutgoingDeliveries: a slice per pass

        peer: str
        services: Services

        def close_link(self, link: Link, exc: ServiceBusError) -> None: ...

    # $management requests read while the peer was not reading its answers (backpressure.py):
    # answered in order once it drained. At most what one read held: the adapter reads nothing
    # more meanwhile.
    _waiting_requests: deque[tuple[RequestLink, bytes]]
    # Lock renewals' answers sent again a moment later to a pyamqp peer (replycopies.py);
    # None for every other peer.
    _reply_copies: ReplyCopies | None

    def _on_request(self, state: RequestLink, delivery: Delivery, data: bytes) -> None:
        if not delivery.settled:
            delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        gate = self.gate
        if state.node != "$cbs" and (gate.blocked or self._waiting_requests):
            gate.starved = True  # answers can be large (a peek): none until the peer reads
            self._waiting_requests.append((state, data))
            return
        self._answer(state, data)

    def _answer_waiting_requests(self) -> None:
        """Answer the requests that waited for the gate, while it stays open."""
        waiting, gate = self._waiting_requests, self.gate
        while waiting and not gate.blocked:
            state, data = waiting.popleft()
            if state.phase is not LinkPhase.DETACHED:
                self._answer(state, data)
        if waiting:
            gate.starved = True

    def _answer(self, state: RequestLink, data: bytes) -> None:
        request = Message()
        try:
            request.decode(data)
        except Exception as exc:  # noqa: BLE001 - proton raises many types on what it refuses
            log.info("connection %d: undecodable request on %s: %s", self.id, state.node, exc)
            self._refuse_undecodable(state, data, exc)
            return
        if state.node == "$cbs":
            try:
                self._on_put_token(state, request)
            except Exception as exc:  # noqa: BLE001 - a bug of ours: answered, never left hanging
                log.warning("connection %d: $cbs put-token failed: %r", self.id, exc)
                self._cbs_reply(state, request, 500, f"The put-token could not be served: {exc!r}")
        else:
            handle_request(self, state, request)

    def _answer_read(self, state: RequestLink, d: Any, job: RequestJob) -> None:
        """A request read over several passes (largerequest.py): accepted, then answered as
        one read at once is."""
        if not _lib.pn_delivery_settled(d):
            _lib.pn_delivery_update(d, Delivery.ACCEPTED)
        _lib.pn_delivery_settle(d)
        _lib.pn_decref(d)
        top_up_sender_credit(state.link._impl)
        try:
            request = job.request()
        except Exception as exc:  # noqa: BLE001 - what proton or codec refuse: answered
            log.info("connection %d: undecodable request on %s: %s", self.id, state.node, exc)
            self._refuse_undecodable(state, job.data(), exc)
            return
        handle_request(self, state, request)

    def _refuse_undecodable(self, state: RequestLink, data: bytes, exc: Exception) -> None:
        """Answer a request proton cannot decode (a described value it cannot hold, found by
        fuzzing) with amqp:decode-error, to the message-id and reply-to read with our own
        codec; unanswered, the client would wait until its own deadline. A request without
        even those can be answered to no one."""
        found = _request_ids(data)
        if found is None:
            return
        message_id, reply_to = found
        request = Message(id=message_id, reply_to=reply_to)
        description = f"The request could not be decoded: {exc}"
        if state.node == "$cbs":
            self._cbs_reply(state, request, 400, description)
            return
        response = Message(
            correlation_id=message_id,
            properties={
                "statusCode": int32(400),
                "statusDescription": description,
                "errorCondition": symbol("amqp:decode-error"),
            },
            body={},
        )
        self.send_reply(state, request, response)

    def _check_plain(self, hostname: str | None, username: str, password: str) -> bool:
        """SASL PLAIN (key name, key); a refusal is logged (rate-limited) with the peer."""
        if self.services.check_plain(hostname, username, password):
            return True
        ns = self.services.namespace_for(hostname)
        why = "wrong key" if username in ns.keys else f"no such key name in namespace {ns.name}"
        self.services.rejections.rejected(username, f"SASL PLAIN: {why}", self.peer, self.now)
        return False

    def _on_put_token(self, state: RequestLink, request: Message) -> None:
        props: dict[Any, Any] = request.properties or {}
        ns, services = self.namespace.name, self.services
        status, description, grant = cbs.put_token(
            props,
            request.body,
            self.namespace.keys,
            self.now,
            entity_of=lambda path: services.entity_name(ns, path),
            rules_of=lambda entity: services.entity_rules(ns, entity),
        )
        if grant is not None:
            self._grants.add(grant, self.now)
        elif status == 404:  # the key may be right: the audience names no entity
            audience = props.get("name")
            self.services.rejections.entity_not_found(str(audience), self.peer, self.now)
        else:
            self.services.rejections.rejected(
                token_key_name(request.body),
                f"$cbs put-token: {description}",
                self.peer,
                self.now,
            )
        self._cbs_reply(state, request, status, description)

    def _cbs_reply(
        self, state: RequestLink, request: Message, status: int, description: str
    ) -> None:
        response = Message(
            correlation_id=request.id,
            properties={"status-code": int32(status), "status-description": description},
            body=None,
        )
        self.send_reply(state, request, response)

    def send_reply(
        self,
        state: RequestLink,
        request: Message,
        response: Message | Pieces,
        copy: bool = False,
    ) -> None:
        """Route a response to the client's reply link in this connection [contract 6.1];
        `copy`: send it again later to a peer that may drop it (replycopies.py). A large
        answer comes encoded as its parts (largeanswer.py) and goes a slice per loop pass."""
        reply = self._find_reply_link(state, request.reply_to)
        if reply is None:
            self.services.unanswered.log(
                self.now, "connection %d: no reply link for %s", self.id, state.node
            )
            return
        if len(reply.pending) >= MAX_PENDING_REPLIES:
            reply.pending.clear()
            log.info(
                "connection %d: reply link on %s closed: %d answers wait for credit",
                self.id,
                reply.node,
                MAX_PENDING_REPLIES,
            )
            self.close_link(
                reply.link,
                QuotaExceeded(
                    f"More than {MAX_PENDING_REPLIES} answers waited for credit on this reply "
                    f"link ({reply.node}), so it was closed: attach one and give it credit."
                ),
            )
            self.on_output()
            return
        data = response if isinstance(response, Pieces) else response.encode()
        reply.pending.append(data)
        self._flush_replies(reply)
        if reply.pending and self._reply_copies is not None:
            self._reply_copies.answer_waits(self.now)  # no credit yet: nudge (replycopies.py)
        self.on_output()
        if len(data) >= LARGE_ANSWER:
            self.services.trim_heap()  # (the server trims on a later pass: temporaries freed)
        if copy and self._reply_copies is not None and not isinstance(data, Pieces):
            self._reply_copies.add(self.now, reply, data, _lib.pn_link_credit(reply.link._impl))

    def _send_reply_copies(self, now: float) -> None:
        """Send the answer copies due by `now` that the reply link has room for."""
        copies = self._reply_copies
        if copies is None:
            return
        if copies.nudge_due(now, self._answers_wait):
            # after whole frames only: data_to_send hands out nothing but complete frames
            self._out += EMPTY_FRAME
            self.on_output()
        for reply, data in copies.take_due(now):
            link = reply.link._impl
            if (
                not self.gate.blocked  # the peer is not reading: no more for it
                and reply.phase is LinkPhase.ATTACHED
                # pyamqp ends a session before it detaches its $management links
                and _lib.pn_session_state(_lib.pn_link_session(link)) == _OPEN_BOTH_SIDES
                and not reply.pending
                and _lib.pn_link_credit(link) > (reply.copy_floor or 1)  # kept for answers
            ):
                reply.pending.append(data)
                self._flush_replies(reply)

    def _answers_wait(self) -> bool:
        """Whether answers wait for the peer's credit (and the peer reads what it has)."""
        return not self.gate.blocked and any(
            isinstance(state, ReplyLink) and state.pending for state in self._links.values()
        )

    def _find_reply_link(self, state: RequestLink, reply_to: str | None) -> ReplyLink | None:
        candidates = [s for s in self._links.values() if isinstance(s, ReplyLink)]
        if reply_to:
            matches = [s for s in candidates if (s.link.remote_target.address or "") == reply_to]
            if len(matches) == 1:
                return matches[0]
            if matches:
                candidates = matches
        same_node = [s for s in candidates if s.node == state.node]
        same_session = [s for s in same_node if s.link.session == state.link.session]
        for group in (same_session, same_node):
            if group:
                return group[0]
        return None

    def _flush_replies(self, reply: ReplyLink) -> None:
        # On proton's C layer, as deliveries.py sends: a Python Delivery wrapper lives until
        # the cyclic garbage collector finds it, and with it the C delivery and its buffer (a
        # 20 MB peek answer each: twelve answers read by a client left 316 MB held).
        link = reply.link._impl
        while reply.pending and reply.sending is None and _lib.pn_link_credit(link) > 0:
            data = reply.pending.popleft()
            tag = next(self._tag_counter).to_bytes(8, "big")
            _ffi.memmove(_TAG_BYTES, tag, 8)  # proton copies the tag
            delivery = _lib.pn_delivery(link, _TAG)
            if type(data) is Pieces:  # a slice per loop pass; the answers after it follow
                self._start_large(reply, delivery, data, True, partial(self._flush_replies, reply))
                return
            _lib.pn_link_send(link, _ffi.from_buffer(data), len(data))  # bytes or bytearray
            _lib.pn_link_advance(link)
            _lib.pn_delivery_settle(delivery)  # pre-settled [contract 6.1]
            self.gate.produced(len(data))


_PROPERTIES = 0x73  # the properties section's descriptor [AMQP 1.0 3.2.4]


def _request_ids(data: bytes) -> tuple[object, str] | None:
    """(message-id, reply-to) of an encoded message, read section by section with
    sbemu.protocol.codec (the message-id in a type proton encodes back as sent); None without
    a properties section or a reply-to, or when even that cannot be read."""
    pos = 0
    try:
        while pos < len(data):
            if data[pos] != 0x00:
                return None
            descriptor, at = codec.decode(data, pos + 1)
            if descriptor != _PROPERTIES:
                pos = codec.skip(data, at)
                continue
            fields, _ = codec.decode(data, at)
            if not isinstance(fields, list) or len(fields) < 5 or not isinstance(fields[4], str):
                return None
            message_id = fields[0]
            if type(message_id) is int:  # a ulong message-id (the only integer kind allowed)
                message_id = ulong(message_id)
            elif not isinstance(message_id, str | bytes | uuid.UUID):
                message_id = None
            return message_id, fields[4]
    except codec.DecodeError:
        return None
    return None
