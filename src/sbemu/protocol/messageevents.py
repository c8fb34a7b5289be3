"""The per-message events of AmqpConnection: transfers in (read, scanned and stored per link
once per read, settled after their commit), the client's outcomes on what it received (an
accept completes a peek-locked message: pre-settled ones lazily per read, unsettled ones
answered after their commit, in the client's order) and flows (a sender's credit topped up; a
receiver's credit served after the read's dispositions). A mixin of AmqpConnection:
connection.py's event loop (_process) hands these events to _message_event and calls
_send_pending, _complete_lazy and _serve_flows when a read is done (or before an event that
must see their effects).

This module owns each of these events whole. The common case of each runs on proton's C
layer, and speed is the reason (bench/hotpath.py, docs/performance.md): no proton Python
wrapper is built per message, and the C functions are bound once as module-level names
(`lib.name` is a lookup on cffi's library object at every call). The rare cases (a partial,
aborted or transactional transfer; an outcome other than accepted; a flow or transfer on a
request, reply or coordinator link; an untracked link) make _message_event return False, and
the connection, once the read's gathered work is done, hands the wrapped event back to the
branches at the end of this module (_on_delivery, _on_link_flow, _on_disposition).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cproton_ffi import ffi as _ffi  # the binding's C layer
from cproton_ffi import lib as _lib
from proton import (
    Condition,
    Delivery,
    Event,
    Link,
    Message,
)

from ..errors import InvalidOperation, MessageSizeExceeded, ServiceBusError
from ..partitions import COMPLETE, IncomingMessage, token_of
from .backpressure import OutputGate
from .deliveries import raw_tag
from .detaching import DetachHold
from .intake import READ_CHUNK, Acknowledgement, accept_all
from .largerequest import RequestRead
from .links import (
    CoordinatorLink,
    LinkPhase,
    LinkState,
    ReceiveLink,
    ReplyLink,
    RequestLink,
    SendLink,
    top_up_sender_credit,
)
from .messages import BatchScan, scan_transfer
from .services import NamespaceInfo
from .settlement import error_condition, settle_delivery, storage_error
from .sizes import batch_limit, message_limit
from .transactions import (
    TRANSACTIONAL_STATE,
    TransactionCoordinator,
    transactional_outcome,
)

if TYPE_CHECKING:
    from .intake import IntakeJob, RequestJob

log = logging.getLogger("sbemu.connection")

# proton's C event types handled here (connection._process checks for them first)
PN_DELIVERY = Event.DELIVERY.number
PN_LINK_FLOW = Event.LINK_FLOW.number
_PN_ACCEPTED = Delivery.ACCEPTED
_MISSING = object()
# The C functions of the per-message paths, bound once (`lib.name` is a lookup on cffi's
# library object at every call).
_pn_event_link = _lib.pn_event_link
_pn_event_delivery = _lib.pn_event_delivery
_pn_delivery_partial = _lib.pn_delivery_partial
_pn_delivery_aborted = _lib.pn_delivery_aborted
_pn_delivery_readable = _lib.pn_delivery_readable
_pn_delivery_remote_state = _lib.pn_delivery_remote_state
_pn_delivery_pending = _lib.pn_delivery_pending
_pn_delivery_settle = _lib.pn_delivery_settle
_pn_delivery_settled = _lib.pn_delivery_settled
_pn_delivery_tag = _lib.pn_delivery_tag
_pn_link_recv = _lib.pn_link_recv
_pn_link_advance = _lib.pn_link_advance
_pn_incref = _lib.pn_incref
_pn_decref = _lib.pn_decref
_unpack = _ffi.unpack
# Where a transfer of up to _RECV_SIZE bytes is read before it is copied into its bytes: one
# buffer for the loop's thread (read and copied at once, never held), not a bytearray and a
# cffi view of it per message.
_RECV_SIZE = 65_536
_RECV_BUF = _ffi.new("char[]", _RECV_SIZE)
_WAITING = LinkPhase.WAITING
_DETACHED = LinkPhase.DETACHED


class MessageEvents:
    """The part of AmqpConnection this module owns (see the module docstring)."""

    if TYPE_CHECKING:  # what it uses of AmqpConnection
        _detach_hold: DetachHold
        _links: dict[Link, LinkState]
        closed: bool
        gate: OutputGate
        id: int
        namespace: NamespaceInfo

        @property
        def now_ms(self) -> int: ...

        on_output: Callable[[], None]

        def close_link(self, link: Link, exc: ServiceBusError) -> None: ...
        def condition_for(self, exc: ServiceBusError) -> Condition: ...
        def _flush_replies(self, reply: ReplyLink) -> None: ...
        def _on_request(self, state: RequestLink, delivery: Delivery, data: bytes) -> None: ...

        transactions: TransactionCoordinator

        defer: Callable[[Callable[[], None]], object] | None

        def _begin_intake(
            self, state: SendLink | RequestLink, d: Any, job: IntakeJob | RequestJob
        ) -> None: ...
        def _large_transfer(self, state: SendLink, link: Any, d: Any, size: int) -> None: ...

    def _init_message_events(self) -> None:
        """The state of the events of one read, gathered by _message_event (called by __init__)."""
        self._accepts = 0  # accepts taken on the fast path: their order, for _settle_completed
        # Completes confirmed by their commits, answered at the next flush in the order the
        # client accepted them (order, C delivery): proton coalesces contiguous ranges.
        self._completed: list[tuple[int, Any]] = []
        # Transfers read but not yet sent, by link: (their messages, their C deliveries, the
        # C link, whose credit is topped up once per read)
        self._sends: dict[SendLink, tuple[list[list[IncomingMessage]], list[Any], Any]] = {}
        # Lock tokens (their ints) of pre-settled accepts read but not yet completed, by link
        self._lazy_completes: dict[ReceiveLink, list[int]] = {}
        # Receive links whose flow arrived in this read (their C links): served once the read's
        # dispositions are in, so a message the peer released in the same read goes out again
        # before the messages behind it (sequence order, as Azure serves it)
        self._flows: dict[ReceiveLink, Any] = {}

    def _serve_flows(self) -> None:
        """Serve the receive links whose credit arrived in this read (gathered by _message_event),
        after the read's dispositions: a client that releases a message and asks for the next
        one in the same breath gets the released one again, not the one behind it."""
        pending, self._flows = self._flows, {}
        now_ms, lib = self.now_ms, _lib
        for state, link in pending.items():
            if state.phase is _WAITING or state.phase is _DETACHED:
                continue  # (detached: by a disposition of this read that failed)
            try:
                state.view.dispatch(now_ms)
            except Exception as exc:  # not the peer's fault: the link ends, the server stays
                log.exception("connection %d: unexpected error serving a flow", self.id)
                self.close_link(state.link, ServiceBusError(f"Internal error: {exc}"))
                continue
            if lib.pn_link_get_drain(link):
                if self.gate.blocked:  # no messages were offered: drained once it opens
                    self.gate.starved = True
                else:
                    lib.pn_link_drained(link)  # [AMQP 2.6.7] give back unused credit

    def _send_pending(self) -> None:
        """Send the transfers _message_event gathered, one Entity.send_many per link: each is
        its own send, but those bound for one partition are staged and committed together,
        and each group is acknowledged at once after its commit."""
        pending, self._sends = self._sends, {}
        now_ms = self.now_ms
        for state, (sends, deliveries, link) in pending.items():
            # the credit the link's transfers of this read took, topped up once for them all
            # (the flow goes out with this turn's output, as it did topped up per transfer)
            top_up_sender_credit(link)
            if not sends:  # every transfer of the read was refused at its scan
                continue
            try:
                state.entity.send_many(sends, now_ms, Acknowledgement(self, deliveries))
            except Exception as exc:  # not the peer's fault: the link ends, the server stays
                log.exception("connection %d: unexpected error storing transfers", self.id)
                self.close_link(state.link, ServiceBusError(f"Internal error: {exc}"))

    def _complete_lazy(self) -> None:
        """Complete the pre-settled accepts _message_event gathered: one Entity.complete_lazy
        per link (nobody waits for these outcomes; see _message_event)."""
        pending, self._lazy_completes = self._lazy_completes, {}
        now_ms = self.now_ms
        for state, tokens in pending.items():
            try:
                state.entity.complete_lazy(tokens, now_ms)
            except Exception as exc:  # not the peer's fault: the link ends, the server stays
                log.exception("connection %d: unexpected error completing messages", self.id)
                self.close_link(state.link, ServiceBusError(f"Internal error: {exc}"))

    def _refuse_many(self, deliveries: list[Any], error: Exception) -> None:
        """Refuse incoming transfers held by _message_event with `error` (and drop our
        references); accepted ones are settled by intake.Acknowledgement."""
        try:
            for d in deliveries:
                self._settle_incoming(Delivery.wrap(d), error)
        finally:
            decref = _pn_decref
            for d in deliveries:
                decref(d)

    def _state_of(self, link: Any) -> Any:
        """Our state for a C link pointer (cached; None for links we do not track)."""
        links = self._links
        cache: dict[Any, Any] = links.by_ptr  # type: ignore[attr-defined]
        state = cache.get(link, _MISSING)  # cffi pointers hash and compare by address
        if state is _MISSING:
            state = links.get(Link.wrap(link))
            cache[link] = state
        return state

    def _message_event(self, kind: int, ev: Any) -> bool:
        """The hot events on the C layer; False hands the event to the wrapped path."""
        link = _pn_event_link(ev)
        state = self._links.by_ptr.get(link, _MISSING)  # type: ignore[attr-defined]
        if state is _MISSING:
            state = self._state_of(link)
        cls = type(state)
        if kind == PN_LINK_FLOW:
            return self._flow_event(cls, state, link)
        if cls is SendLink:
            return self._transfer_event(state, link, _pn_event_delivery(ev))
        if cls is not ReceiveLink:
            return False
        # A client's accept (complete) of a peek-locked message [contract 5.1]: inline, the
        # settle path's cost per message is mostly calls (hotpath.py)
        d = _pn_event_delivery(ev)
        if _pn_delivery_remote_state(d) != _PN_ACCEPTED:
            return False
        tag = _pn_delivery_tag(d)
        key = state.unsettled.pop(_ffi.unpack(tag.start, tag.size), None)
        if key is None:
            if _pn_delivery_settled(d):
                _pn_delivery_settle(d)
            return True
        if _pn_delivery_settled(d):
            # A pre-settled accept (rhea's auto-accept): the client waits for no outcome,
            # so there is nothing to answer, now or after the commit. Let go of the
            # delivery at once; the deletion is lazy (rides with the partition's next
            # commit). A lost lock is nobody's to hear of: the message comes back. The
            # accepts of one read are completed together, per partition.
            _pn_delivery_settle(d)
            lazy = self._lazy_completes.get(state)
            if lazy is None:
                self._lazy_completes[state] = [key]  # completed by _complete_lazy
            else:
                lazy.append(key)
            return True
        # An unsettled accept (the SDKs): answered after the commit of the deletion.
        self._accepts += 1
        order = self._accepts
        _pn_incref(d)
        hold = self._detach_hold
        hold.started(state)

        def done(error: Exception | None) -> None:
            hold.answered(state)
            if error is None and not self.closed:
                if not self._completed:
                    self.on_output()  # one flush request per batch: the flush empties it
                self._completed.append((order, d))
            else:
                self._complete_raw(d, error)

        try:
            state.entity.settle(key, COMPLETE, self.now_ms, done)
        except ServiceBusError as exc:
            done(exc)
        return True

    def _flow_event(self, cls: type, state: Any, link: Any) -> bool:
        """A flow on a link: a receiver's credit (served after the read's dispositions), a
        sender's credit topped up once it falls below half."""
        if cls is ReceiveLink:
            if state.phase is _WAITING:
                return True
            if state.session is not None:  # a receive request on the session
                state.session.touch(self.now_ms)
            self._flows[state] = link  # served after the read's dispositions
            return True
        if cls is SendLink:
            top_up_sender_credit(link)
            return True
        return False

    def _transfer_event(self, state: SendLink, link: Any, d: Any) -> bool:
        """A whole, plain (non-transactional) transfer: read it, store it (its credit is
        topped up with the link's other transfers of this read: _send_pending)."""
        if (
            _pn_delivery_partial(d)
            or not _pn_delivery_readable(d)
            or _pn_delivery_remote_state(d) != 0
        ):
            return False
        pending = _pn_delivery_pending(d)
        # (proton gives an aborted delivery a pending of 1, so only then is it asked)
        if pending <= 0 or (pending == 1 and _pn_delivery_aborted(d)):
            return False
        if pending > READ_CHUNK and self.defer is not None:
            _pn_incref(d)  # held until the commit settles it
            self._large_transfer(state, link, d, pending)  # over several turns (intake.py)
            return True
        sends = self._sends.get(state)
        if sends is None:
            sends = self._sends[state] = ([], [], link)
        if pending <= _RECV_SIZE:
            got = _pn_link_recv(link, _RECV_BUF, pending)
            _pn_link_advance(link)
            data = _unpack(_RECV_BUF, got) if got > 0 else b""
        else:
            buf = bytearray(pending)
            got = _pn_link_recv(link, _ffi.from_buffer(buf), pending)
            _pn_link_advance(link)
            data = bytes(buf) if got == pending else bytes(buf[: max(got, 0)])
            del buf  # not held beside its copy while the message is stored (up to 100 MB)
        _pn_incref(d)  # held until the commit settles it
        entity, tier = state.entity, self.namespace.max_message_size
        try:  # sizes.message_limit / batch_limit, inline on the hot path
            messages = scan_transfer(
                data,
                entity.spec.max_message_size or tier,
                entity.subscriptions is not None,
                tier,
                self.defer is not None,
            )
        except ServiceBusError as exc:
            self._refuse_many([d], exc)
            return True
        if isinstance(messages, BatchScan):  # a batch scanned over several turns (intake.py)
            self._begin_intake(state, d, messages)
            return True
        # Stored with the link's other transfers of this read (_send_pending).
        sends[0].append(messages)
        sends[1].append(d)
        return True

    def _settle_completed(self) -> None:
        """Answer the completes whose commits landed: accepted and settled, in the order the
        client accepted them (its delivery order, for a client accepting in turn), so that
        proton coalesces them into ranges: one disposition frame per run of deliveries, not
        one per message (a partitioned entity's commits confirm its messages out of order,
        partition by partition)."""
        completed, self._completed = self._completed, []
        completed.sort()
        accept_all([d for _, d in completed])

    def _complete_raw(self, d: Any, error: Exception | None) -> None:
        """Answer an unsettled accept taken by _message_event now [contract 5.2] (its commit
        failed, or the connection is closing), and drop our reference."""
        try:
            if error is None:
                _lib.pn_delivery_update(d, _PN_ACCEPTED)
                _lib.pn_delivery_settle(d)
            else:
                delivery = Delivery.wrap(d)
                err = error if isinstance(error, ServiceBusError) else storage_error(error)
                delivery.local.condition = error_condition(err)
                delivery.update(Delivery.REJECTED)
                delivery.settle()
            self.on_output()
        finally:
            _lib.pn_decref(d)

    # ---------------------------------------------- the wrapped path: the rare cases
    # (connection._dispatch hands them here when _message_event returned False)

    def _on_link_flow(self, link: Link) -> None:
        # (a receive link's or a send link's flow never gets here: messageevents takes them on
        # the C layer, a receive link's served after the read's dispositions)
        state = self._links.get(link)
        if isinstance(state, ReplyLink):
            self._flush_replies(state)
        elif isinstance(state, SendLink | RequestLink):
            top_up_sender_credit(link._impl)

    # ------------------------------------------------------------------ deliveries in
    def _on_delivery(self, link: Link, delivery: Delivery) -> None:
        state = self._links.get(link)
        if state is None:
            if link.is_receiver and delivery.readable and not delivery.partial:
                link.recv(delivery.pending)
                link.advance()
            delivery.settle()
            return
        if isinstance(state, ReceiveLink):
            self._on_disposition(state, delivery)
            return
        if isinstance(state, ReplyLink):
            if delivery.settled:
                delivery.settle()
            return
        if delivery.aborted:
            delivery.settle()
            return
        if delivery.partial:
            limit = message_limit(getattr(state, "entity", None), self.namespace)
            if isinstance(state, SendLink) and delivery.pending > limit + 64 * 1024:
                # A message far beyond the limit: do not buffer it; close the link.
                self.close_link(
                    link,
                    MessageSizeExceeded(
                        f"The received message exceeds the maximum message size of {limit} bytes."
                    ),
                )
            return
        current = link.current
        if current is None or current._impl != delivery._impl:
            # An update on a transfer already read and advanced past (the fuzz found one under
            # load): nothing to read, and proton refuses a recv (PN_STATE_ERR) that was a
            # traceback; the transfer was answered when it was read.
            return
        if (
            isinstance(state, RequestLink)
            and delivery.pending > READ_CHUNK
            and self.defer is not None
            and state.node != "$cbs"
        ):  # a message scheduled whole inside it: read over several passes (largerequest.py)
            _pn_incref(delivery._impl)  # held until it is answered
            self._begin_intake(state, delivery._impl, RequestRead(link._impl, delivery.pending))
            return
        data = link.recv(delivery.pending) or b""  # an empty transfer payload comes back as None
        link.advance()
        top_up_sender_credit(link._impl)
        if isinstance(state, CoordinatorLink):
            control = Message()
            try:
                control.decode(data)
            except Exception:
                control.body = None
            self.transactions.on_control(delivery, control.body)
            return
        if isinstance(state, SendLink):
            self._on_message(state, delivery, data)
        else:
            self._on_request(state, delivery, data)

    def _on_message(self, state: SendLink, delivery: Delivery, data: bytes) -> None:
        if delivery.remote_state == TRANSACTIONAL_STATE:
            self._on_transactional_message(state, delivery, data)
            return
        try:
            messages = scan_transfer(
                data,
                message_limit(state.entity, self.namespace),
                state.entity.subscriptions is not None,
                batch_limit(self.namespace),
            )
            state.entity.send(
                messages, self.now_ms, lambda error: self._settle_incoming(delivery, error)
            )
        except ServiceBusError as exc:
            self._settle_incoming(delivery, exc)

    def _on_transactional_message(self, state: SendLink, delivery: Delivery, data: bytes) -> None:
        """A send inside a transaction: staged, answered transactional-state{accepted}."""
        data_fields = list(delivery.remote.data or []) + [None]
        txn = None
        try:
            txn = self.transactions.transaction(data_fields[0])
            messages = scan_transfer(
                data,
                message_limit(state.entity, self.namespace),
                state.entity.subscriptions is not None,
                batch_limit(self.namespace),
            )
            if state.entity.spec.requires_session:
                for msg in messages:
                    if msg.session_id is None:
                        raise InvalidOperation(
                            "A transactional message to a session-enabled entity must have a "
                            "SessionId [P16]."
                        )
            self.transactions.stage_send(txn, state.entity, messages)
        except ServiceBusError as exc:
            if txn is not None:
                self.transactions.fail(txn, exc.description)
            self._settle_incoming(delivery, exc)
            return
        delivery.local.data = transactional_outcome(txn.txn_id, Delivery.ACCEPTED)
        delivery.update(TRANSACTIONAL_STATE)
        delivery.settle()
        self.on_output()

    def _settle_incoming(self, delivery: Delivery, error: Exception | None) -> None:
        if error is None:
            delivery.update(Delivery.ACCEPTED)
        else:
            if not isinstance(error, ServiceBusError):
                error = storage_error(error)
            delivery.local.condition = self.condition_for(error)
            delivery.update(Delivery.REJECTED)
        delivery.settle()
        self.on_output()

    def _on_disposition(self, state: ReceiveLink, delivery: Delivery) -> None:
        key = state.unsettled.pop(raw_tag(delivery), None)
        outcome = delivery.remote_state
        if key is None or outcome is None:
            if delivery.settled:
                delivery.settle()
            return
        token = token_of(key)
        if outcome == TRANSACTIONAL_STATE:
            self.transactions.on_disposition(state.entity, token, delivery)
        else:
            # Only an unsettled outcome is answered, so only it may hold a detach: one the client
            # settled itself (proton's reject(), release()) may be committed lazily, later.
            answered = None
            if not delivery.settled:
                self._detach_hold.started(state)
                answered = lambda: self._detach_hold.answered(state)  # noqa: E731
            settle_delivery(
                self, state.entity, token, delivery, outcome, state.session, answered=answered
            )
