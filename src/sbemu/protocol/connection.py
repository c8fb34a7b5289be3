"""One AMQP connection: our SASL layer, then the proton engine (sans-IO).

Bytes and `now` (Unix seconds) go in through receive_data(); bytes come out of
data_to_send() (output.py); next_deadline()/handle_timer() drive proton's idle-timeout
heartbeats. The
adapter (listener.py) owns the socket and the clock. Work that completes later (a group
commit confirming a send or a settlement) calls `on_output` so the adapter flushes.

Links are ours to track: proton engine objects never carry partition state (house style); the
`_links` map holds one small object per link, keyed by the proton link.

AmqpConnection is assembled from parts that each own one thing (mixins, each naming what it
uses of the connection under TYPE_CHECKING), as aioquic keeps loss recovery out of its
connection: attach.py (link attach and detach), messageevents.py (the per-message events:
transfers in and their settlement, the client's outcomes on what it received, and flows: the
common case of each on proton's C layer, the rare ones as branches on the wrapped objects),
intake.py (transfers taken over several turns), deliveries.py (messages out on receive
links), requestlinks.py (request/reply links: $cbs put-token, $management), output.py (the
bytes out, and production paused and resumed with the socket). This module keeps the state
machine: bytes in, the timers, the event loop and the dispatch of its other events.

What this module does not own lives beside it: links.py (per-link state and the one link
lifecycle table), messages.py (transfers in, deliveries encoded out), settlement.py
(outcomes and AMQP errors), cbs.py / management.py / transactions.py (the `$cbs`,
`$management` and coordinator nodes, each behind a small Protocol of this connection). The
partitions side is reached through the router's Entity, EntityView and SessionHandle only.

Contract traps honoured here (asb-amqp-contract.md section 0): refused attach = null
source/target + detach(closed, error) (5); echo the client's termini byte-for-byte (4); sender
links get max-message-size, immediate credit, settled dispositions, and tolerance for
transfers beyond credit (6); the delivery tag is the lock token in .NET Guid byte order (7);
settlement echoes the requested outcome with no error (8, 9); drain and credit revocation (12);
annotation types (13).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from cproton_ffi import ffi as _ffi  # the binding's C layer, for raw delivery tags
from cproton_ffi import lib as _lib
from proton import (
    Collector,
    Condition,
    Connection,
    Event,
    Link,
    Transport,
)

from ..errors import (
    EntityNotFound,
    MalformedInput,
    ServiceBusError,
    Unauthorized,
)
from ..partitions import Entity
from . import cbs
from .attach import LinkAttach
from .backpressure import OutputGate
from .channels import EndedChannelFilter
from .deliveries import OutgoingDeliveries
from .detaching import DetachHold
from .frames import FramePadder
from .intake import Intakes
from .links import (
    LinkMap,
    LinkState,
    LinkStateError,
    ReceiveLink,
)
from .messageevents import PN_DELIVERY, PN_LINK_FLOW, MessageEvents
from .output import ConnectionOutput
from .peeropen import PeerOpenFilter
from .replycopies import ReplyCopies, wants_copies
from .requestlinks import RequestLinks
from .sasl import SaslError, SaslServer, SaslState
from .services import NamespaceInfo, Services
from .settlement import error_condition
from .transactions import (
    TransactionCoordinator,
)

log = logging.getLogger("sbemu.connection")

MAX_FRAME_SIZE = 262_144
SESSION_CAPACITY = 1 << 30

# Events nobody handles: popped without building Python wrappers for them (_process).
_PN_IGNORED = frozenset(
    e.number
    for e in (
        Event.TRANSPORT,
        Event.CONNECTION_INIT,
        Event.CONNECTION_BOUND,
        Event.CONNECTION_LOCAL_OPEN,
        Event.CONNECTION_FINAL,
        Event.SESSION_INIT,
        Event.SESSION_LOCAL_OPEN,
        Event.SESSION_FINAL,
        Event.LINK_INIT,
        Event.LINK_LOCAL_OPEN,
        Event.LINK_FINAL,
    )
)
_NULL = _ffi.NULL
# The C functions of the event loop, bound once (`lib.name` is a lookup on cffi's library
# object at every call); those of the events in are messageevents.py's.
_pn_collector_peek = _lib.pn_collector_peek
_pn_collector_pop = _lib.pn_collector_pop
_pn_event_type = _lib.pn_event_type


class AmqpConnection(
    LinkAttach,
    MessageEvents,
    Intakes,
    OutgoingDeliveries,
    RequestLinks,
    ConnectionOutput,
):
    """One client connection."""

    _ids = itertools.count(1)

    def __init__(self, services: Services, now: float) -> None:
        self.services = services
        self.id = next(self._ids)
        self.now = now
        self._sasl = SaslServer(self._check_plain)
        self.peer = "?"  # "addr:port", set by the listener (logged with refused credentials)
        self._transport: Transport | None = None
        self._conn: Connection | None = None
        self._collector: Collector | None = None
        self._out = bytearray()
        self._links: dict[Link, LinkState] = LinkMap()
        self._grants = cbs.Grants()  # SASL PLAIN rights, $cbs tokens, token-watched links
        self.namespace: NamespaceInfo = services.namespace_for(None)
        self.closed = False
        self.on_output: Callable[[], None] = lambda: None
        self._tag_counter = itertools.count(1)
        self._padder = FramePadder()
        self._peer_open: PeerOpenFilter | None = PeerOpenFilter()  # until the peer's open passed
        self.more_output = False  # data_to_send() stopped at its limit: call it again
        self._ended_channels = EndedChannelFilter(self.id)
        self.transactions = TransactionCoordinator(
            self, lambda: self._grants.holds_authorisation(self.now)
        )
        self.opened_ms: int | None = None  # when the AMQP open arrived (for the dashboard)
        # Set by the adapter when the server is over its connection limit: the peer's open is
        # answered with close(resource-limit-exceeded) [limits.py].
        self.refuse_with: ServiceBusError | None = None
        self._remote_links = 0  # links the peer attached and has not detached yet
        self._init_message_events()  # the events of one read (messageevents.py)
        self._init_intakes()  # transfers taken over several turns (intake.py)
        self._detach_hold = DetachHold()  # detach replies waiting for their links' outcomes
        # Whether the peer may be given more (backpressure.py): deliveries and $management
        # answers wait while it is not reading; the adapter pauses and resumes it.
        self.gate = OutputGate()
        self._waiting_requests = deque()
        self._reply_copies = None  # a pyamqp peer's, once its open names it (replycopies.py)

    # ------------------------------------------------------------------ IO surface
    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the socket."""
        self.now = now
        if self.closed:
            return
        if self._transport is None:
            try:
                self._sasl.receive(data)
            except SaslError as exc:
                log.info("connection %d: SASL protocol error: %s", self.id, exc)
                self._out += self._sasl.output
                self._sasl.output.clear()
                self.closed = True
                return
            self._out += self._sasl.output
            self._sasl.output.clear()
            if self._sasl.state == SaslState.FAILED:
                self.closed = True
                return
            if self._sasl.state != SaslState.DONE:
                return
            self._start_amqp()
            # handed over once: kept, it would hold the connection's first AMQP bytes (up to a
            # frame) for the connection's life: memory that grows with idle connections
            data, self._sasl.remainder = self._sasl.remainder, b""
            if not data:
                return
        self._push(data)

    def _start_amqp(self) -> None:
        result = self._sasl.result
        assert result is not None
        self.namespace = self.services.namespace_for(result.hostname)
        if result.mechanism == "PLAIN" and result.username is not None:
            self._grants.plain_rights = self.namespace.rights.get(result.username, frozenset())
        transport = Transport(Transport.SERVER)
        transport.max_frame_size = MAX_FRAME_SIZE
        conn = Connection()
        collector = Collector()
        conn.collect(collector)
        transport.bind(conn)
        self._transport, self._conn, self._collector = transport, conn, collector

    def _push(self, data: bytes) -> None:
        transport = self._transport
        assert transport is not None
        if self._intake is not None:  # a transfer is being taken: after it (intake.py)
            self._hold_input(data)
            return
        peer_open = self._peer_open
        if peer_open is not None:  # its max-frame-size, lowered for the padding (peeropen.py)
            data = peer_open.feed(data)
            if peer_open.done:
                self._padder.limit = peer_open.peer_max_frame
                self._peer_open = None
        data = self._ended_channels.feed(data)  # frames after the peer's own end: dropped
        view = memoryview(data)
        while view:
            capacity = transport.capacity()
            if capacity < 0:
                break  # input side closed (error or close): drop the rest
            if capacity == 0:
                self._process()
                capacity = transport.capacity()
                if capacity <= 0:
                    break
            chunk = view[:capacity]
            transport.push(chunk)  # type: ignore[arg-type]  # a view is fine: proton copies it
            view = view[len(chunk) :]
            self._process()
            if self._intake is not None:  # a transfer taken over turns: the rest waits
                if view:
                    self._hold_input(bytes(view))
                return
        self._process()

    def next_deadline(self) -> float | None:
        """When handle_timer() should run next (Unix seconds), if ever."""
        if self._transport is None or self.closed:
            return None
        deadline = self._transport.tick(self.now) or None
        copies = self._reply_copies.next_deadline() if self._reply_copies is not None else None
        for other in (self._grants.next_expiry(), self._detach_hold.next_deadline(), copies):
            if other is not None:
                deadline = other if deadline is None else min(deadline, other)
        return deadline

    def handle_timer(self, now: float) -> None:
        """Let proton send heartbeats / detect idle peers."""
        self.now = now
        if self._transport is not None and not self.closed:
            self._transport.tick(now)
            self._expire_tokens(now)
            self._release_detaches()
            self._send_reply_copies(now)
            self._process()

    def _expire_tokens(self, now: float) -> None:
        """Detach links whose token expired and was not renewed through $cbs in time."""
        lost = self._grants.expired(now, self.namespace.rights, self._links.__contains__)
        for link, path, expires_at in lost:
            self.close_link(
                link,
                Unauthorized(
                    f"The token authorising '{path}' expired at {int(expires_at)} and was "
                    "not renewed on $cbs; the link is detached."
                ),
            )

    def connection_lost(self) -> None:
        """The socket is gone: forget our links (locks stay until they expire)."""
        self.closed = True
        if self.opened_ms is not None:
            self.services.stats.connection_closed(self.namespace.name)
            self.opened_ms = None
        for state in list(self._links.values()):
            if isinstance(state, ReceiveLink):
                self._end_receiver(state)
        self.transactions.rollback_all()
        self._drop_intake()
        self._links.clear()
        self._detach_hold.clear()
        self._waiting_requests.clear()
        if self._completed:
            self._settle_completed()  # nobody will read them: just let go of the deliveries
        if self._transport is not None:
            self._transport.close_tail()
            self._transport.close_head()
            self._transport.unbind()
            self._transport = None
        # Let go of the engine now: its deliveries' buffers (up to 100 MB a message on
        # Premium) would otherwise wait for the cyclic garbage collector, which counts objects,
        # not bytes, and so may leave several hundred MB held after a few large messages.
        if self._collector is not None:  # its pending events hold the C connection's objects
            self._collector.release()
            self._collector = None
        self._conn = None

    def detach_entity(self, entity: Entity, queue_prefix: str | None) -> int:
        """The entity (or, with a prefix, one subscription of it) was deleted: detach every
        link on it with amqp:not-found. Returns how many links were detached."""
        detached = 0
        for link, state in list(self._links.items()):
            if getattr(state, "entity", None) is not entity:
                continue
            view = getattr(state, "view", None)
            if queue_prefix is not None:
                queue = view.queue if view is not None else None
                if queue is None or not (
                    queue == queue_prefix or queue.startswith(queue_prefix + "/")
                ):
                    continue
            path = view.address if view is not None else entity.name
            self.close_link(link, EntityNotFound(f"The messaging entity '{path}' was deleted."))
            detached += 1
        if detached:
            self.on_output()
        return detached

    @property
    def handshake_done(self) -> bool:
        """True once the peer's AMQP open arrived (SASL, if any, is over)."""
        seen = Connection.REMOTE_ACTIVE | Connection.REMOTE_CLOSED
        return self._conn is not None and bool(self._conn.state & seen)

    @property
    def now_ms(self) -> int:
        """The current time in Unix milliseconds, as last told by the adapter."""
        return int(self.now * 1000)

    # ------------------------------------------------------------------ events
    def _process(self) -> None:
        collector = self._collector
        if collector is None or self._intake is not None:  # (the events wait for it)
            return
        # Raw event loop on proton's C layer: the per-message events (a transfer in, a
        # disposition in, a flow) are handled without proton's Python wrappers; every other
        # event is wrapped and dispatched as before; events nobody handles are just popped.
        impl = collector._impl
        while True:
            ev = _pn_collector_peek(impl)
            if ev == _NULL:
                break
            kind = _pn_event_type(ev)
            if kind == PN_DELIVERY or kind == PN_LINK_FLOW:  # (checked first: the most)
                try:
                    handled = self._message_event(kind, ev)
                except Exception as exc:
                    self._fail(Event.wrap(ev), exc)
                    handled = True
            else:
                handled = kind in _PN_IGNORED
            if not handled:
                if self._sends:  # transfers before this event are sent before it is handled
                    self._send_pending()
                if self._lazy_completes:  # and accepts before it are completed
                    self._complete_lazy()
                if self._flows and kind != PN_DELIVERY:  # and flows served (a disposition
                    self._serve_flows()  # is taken first: it may put a message back in line)
                event = Event.wrap(ev)
                try:
                    self._dispatch(event)
                except Exception as exc:  # one error path per scope: link, else connection
                    self._fail(event, exc)
            _pn_collector_pop(impl)
            if self._intake is not None:  # a transfer taken over turns: the rest after it
                break
        if self._sends:
            self._send_pending()
        if self._lazy_completes:
            self._complete_lazy()
        if self._flows:
            self._serve_flows()

    def _dispatch(self, event: Event) -> None:
        t = event.type
        # proton types an event's context objects as Optional; each is always set for the
        # event types that use it, so the asserts below cannot fire.
        if t == Event.DELIVERY:
            link, delivery = event.link, event.delivery
            assert link is not None and delivery is not None
            self._on_delivery(link, delivery)
        elif t == Event.LINK_FLOW:
            link = event.link
            assert link is not None
            self._on_link_flow(link)
        elif t == Event.LINK_REMOTE_OPEN:
            link = event.link
            assert link is not None
            self._on_link_remote_open(link)
        elif t in (Event.LINK_REMOTE_CLOSE, Event.LINK_REMOTE_DETACH):
            link = event.link
            assert link is not None
            self._remote_links = max(0, self._remote_links - 1)
            self._on_link_remote_close(link)
        elif t == Event.SESSION_REMOTE_OPEN:
            session = event.session
            assert session is not None
            # Keep the incoming window wide: Python's sender stops when it thinks it is shut
            # [contract 1.4].
            session.incoming_capacity = SESSION_CAPACITY
            session.open()
        elif t == Event.SESSION_REMOTE_CLOSE:
            session = event.session
            assert session is not None
            if not self._detach_hold.hold(
                session, self.now, lambda s: s.link.session == session, session.close
            ):
                session.close()
        elif t == Event.CONNECTION_REMOTE_OPEN:
            conn = event.connection
            assert conn is not None
            conn.container = f"sbemu-{self.id}"
            if self.refuse_with is not None:
                conn.open()
                conn.condition = error_condition(self.refuse_with)
                conn.close()
                return
            hostname = conn.remote_hostname
            if hostname and self._sasl.result and self._sasl.result.mechanism is None:
                self.namespace = self.services.namespace_for(hostname)
            if wants_copies(conn.remote_properties):
                self._reply_copies = ReplyCopies()
            conn.open()
            self.opened_ms = self.now_ms
            self.services.stats.connection_opened(self.namespace.name)
        elif t == Event.CONNECTION_REMOTE_CLOSE:
            conn = event.connection
            assert conn is not None
            if not self._detach_hold.hold(conn, self.now, lambda s: True, conn.close):
                conn.close()
        elif t == Event.TRANSPORT_ERROR:
            transport = event.transport
            assert transport is not None
            cond = transport.condition
            log.info("connection %d: transport error: %s", self.id, cond)
        elif t == Event.TRANSPORT_CLOSED:
            self.closed = True

    def _fail(self, event: Event, exc: Exception) -> None:
        link = event.link
        if isinstance(exc, UnicodeDecodeError):
            # proton decodes the peer's strings (host name, addresses, names) lazily: invalid
            # UTF-8 there is the peer's error, not ours.
            exc = MalformedInput(f"Invalid UTF-8 in a string field: {exc.reason}.")
        if isinstance(exc, LinkStateError):
            log.warning("connection %d: %s", self.id, exc.description)  # ours to fix; no traceback
        elif not isinstance(exc, ServiceBusError):
            log.exception("connection %d: unexpected error on %s", self.id, event.type)
            exc = ServiceBusError(f"Internal error: {exc}")
        if link is not None:
            self.close_link(link, exc)
        elif self._conn is not None:
            self._conn.condition = self.condition_for(exc)
            self._conn.close()

    # ------------------------------------------------------------------ operator view
    def condition_for(self, exc: ServiceBusError) -> Condition:
        """error_condition(), counted for /metrics (throttled, server or user error)."""
        self.services.stats.error(self.namespace.name, exc.condition)
        return error_condition(exc)

    def describe(self) -> dict[str, Any]:
        """A read-only picture of this connection for the dashboard: identity and links."""
        result = self._sasl.result
        identities = self._grants.identities(self.now)
        if result is not None and result.mechanism == "PLAIN" and result.username:
            identities.insert(0, result.username)
        links = []
        for link, state in list(self._links.items()):
            kind = type(state).__name__
            entry: dict[str, Any] = {
                "name": link.name,
                "role": "sender" if link.is_receiver else "receiver",  # the client's side
                "kind": kind,
                "address": getattr(state, "address", None) or getattr(state, "node", None),
                "credit": link.credit,
                "unsettled": link.unsettled,
            }
            if isinstance(state, ReceiveLink):
                entry["address"] = state.view.address
                entry["mode"] = "peek-lock" if state.peek_lock else "receive-and-delete"
                entry["unsettled"] = len(state.unsettled)
                if state.session is not None:
                    entry["session_id"] = state.session.session_id
            links.append(entry)
        return {
            "id": self.id,
            "namespace": self.namespace.name,
            "sasl_mechanism": result.mechanism if result is not None else None,
            "identities": identities,
            "container_id": self._conn.remote_container if self._conn is not None else None,
            "opened_ms": self.opened_ms,
            "links": links,
        }

    def close_by_operator(self, description: str) -> None:
        """Close the connection with amqp:connection:forced (the dashboard's close action)."""
        if self._conn is not None and not self.closed:
            self._conn.condition = Condition("amqp:connection:forced", description)
            self._conn.close()
        else:
            self.closed = True
        self.on_output()


__all__ = ["AmqpConnection", "NamespaceInfo", "Services", "EntityNotFound"]
