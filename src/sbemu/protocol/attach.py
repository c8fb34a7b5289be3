"""Link attach and detach for AmqpConnection: the checks an attach passes (limits, rights,
entity, session), the link state it creates, refusals with their AMQP condition, and what a
detach releases. A mixin of AmqpConnection (connection.py keeps the state machine and the
event loop), as aioquic keeps loss recovery out of its connection."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from proton import (
    Condition,
    Connection,
    Link,
    Terminus,
    symbol,
)

from ..errors import (
    InvalidOperation,
    OperationTimeout,
    QuotaExceeded,
    ServiceBusError,
)
from ..partitions import Delivered, SessionHandle, Taken
from . import cbs
from .backpressure import OutputGate
from .detaching import DetachHold
from .links import (
    SENDER_CREDIT,
    CoordinatorLink,
    LinkPhase,
    LinkState,
    LinkStateError,
    ReceiveLink,
    ReplyLink,
    RequestLink,
    SendLink,
    advance,
    session_filter,
    session_filter_reply,
)
from .messages import dotnet_ticks
from .services import NamespaceInfo, Services
from .settlement import error_condition
from .sizes import BATCH_SIZE_PROPERTY, batch_limit, message_limit
from .transactions import (
    TransactionCoordinator,
)

_DETACHED = LinkPhase.DETACHED
_WAITING = LinkPhase.WAITING
# How long a next-available-session attach waits when the client names no com.microsoft:timeout:
# the service's operation timeout ("within the allotted timeout of 00:01:05")
NEXT_SESSION_WAIT_MS = 65_000
log = logging.getLogger("sbemu.connection")


class LinkAttach:
    """The part of AmqpConnection this module owns (see the module docstring)."""

    if TYPE_CHECKING:  # what it uses of AmqpConnection
        _conn: Connection | None
        _detach_hold: DetachHold
        _grants: cbs.Grants
        _links: dict[Link, LinkState]
        _remote_links: int
        gate: OutputGate

        def condition_for(self, exc: ServiceBusError) -> Condition: ...

        id: int
        namespace: NamespaceInfo
        now: float

        @property
        def now_ms(self) -> int: ...

        on_output: Callable[[], None]
        services: Services

        def send_delivery(self, state: ReceiveLink, delivered: Delivered) -> None: ...
        def send_deliveries(
            self, state: ReceiveLink, taken: Taken, partition_id: int | None
        ) -> None: ...

        transactions: TransactionCoordinator

    def _on_link_remote_open(self, link: Link) -> None:
        """The peer attached a link: within the connection's link limit, a coordinator, a
        request or reply link, a sender or a receiver is checked and opened, or refused with
        its AMQP condition; a session receiver may wait for a session first."""
        if not self._within_link_limit(link):
            return
        if link.remote_target.type == Terminus.COORDINATOR:
            self._attach_coordinator(link)
            return
        address = (
            link.remote_target.address if link.is_receiver else link.remote_source.address
        ) or ""
        path = cbs.normalize_entity_path(address)
        try:
            if path == "$cbs" or address.lower().rstrip("/").endswith("$management"):
                state: LinkState = self._request_link_state(link, path)
            elif link.is_receiver:
                state = self._send_link_state(link, address, path)
            else:
                receiver, is_session, session_id = self._receive_link_state(link, path)
                if is_session:
                    self._attach_session_receiver(link, receiver, session_id)
                    return
                state = receiver
        except ServiceBusError as exc:
            self._refuse(link, exc)
            return
        self._open_link(link, state)

    def _within_link_limit(self, link: Link) -> bool:
        """Count the attach; past the connection's link limit refuse it (False), and past
        twice the limit close the connection of a peer that ignores the refusals."""
        self._remote_links += 1
        limit = self.services.limits.max_links_per_connection
        if self._remote_links <= limit:
            return True
        exc = QuotaExceeded(
            f"Cannot attach more than {limit} links on one connection "
            "(SBEMU_MAX_LINKS_PER_CONNECTION)."
        )
        if self._remote_links > 2 * limit and self._conn is not None:
            # The peer ignores the refusals and keeps attaching: drop the connection.
            self._conn.condition = error_condition(exc)
            self._conn.close()
            return False
        self._refuse(link, exc)
        return False

    def _attach_coordinator(self, link: Link) -> None:
        """A transaction coordinator link: attached at once, with credit for its declares and
        discharges."""
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.rcv_settle_mode = Link.RCV_FIRST
        coordinator = CoordinatorLink(link)
        advance(coordinator, LinkPhase.ATTACHED)
        self._links[link] = coordinator
        link.open()
        link.flow(SENDER_CREDIT)

    def _request_link_state(self, link: Link, path: str) -> LinkState:
        """A request (client to service) or reply link of `$cbs` or an entity's `$management`."""
        if path == "$cbs":
            return RequestLink(link, "$cbs") if link.is_receiver else ReplyLink(link, "$cbs")
        entity, view = self.services.router.lookup(self.namespace.name, path)
        self._authorize_link(link, path, ("Manage", "Listen", "Send"))
        return RequestLink(link, path, entity, view) if link.is_receiver else ReplyLink(link, path)

    def _send_link_state(self, link: Link, address: str, path: str) -> SendLink:
        """A link the client sends messages on: only to an entity itself, with Send rights."""
        entity, view = self.services.router.lookup(self.namespace.name, path)
        if view.queue != "main":
            raise InvalidOperation(
                f"Cannot send to '{address}': sub-queues and subscriptions are receive-only."
            )
        self._authorize_link(link, path, ("Send",))
        entity.check_sendable()
        return SendLink(link, entity, path)

    def _receive_link_state(self, link: Link, path: str) -> tuple[ReceiveLink, bool, str | None]:
        """A link the client receives on, with Listen rights, and whether it asks for a message
        session (and which one: None for the next available)."""
        entity, view = self.services.router.lookup(self.namespace.name, path)
        self._authorize_link(link, path, ("Listen",))
        if not view.receivable:
            raise InvalidOperation(
                f"Cannot receive from topic '{path}': receive from one of its "
                "subscriptions ('<topic>/Subscriptions/<name>')."
            )
        entity.check_receive(view.queue)
        is_session, session_id = session_filter(link.remote_source.filter)
        peek_lock = link.remote_snd_settle_mode != Link.SND_SETTLED
        state = ReceiveLink(self, link, entity, view, peek_lock)
        if view.requires_session != is_session:
            raise InvalidOperation(
                f"It is not possible for an entity that requires sessions to create a "
                f"non-sessionful message receiver ('{path}')."
                if view.requires_session
                else f"The entity '{path}' does not require sessions; a session "
                "receiver cannot be created on it."
            )
        return state, is_session, session_id

    def _open_link(self, link: Link, state: LinkState) -> None:
        """Answer an accepted attach: the client's termini echoed as given [contract 3.1, 4.4],
        the settle modes and size limit, credit for a link the client sends on."""
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        if link.is_receiver:
            link.snd_settle_mode = link.remote_snd_settle_mode
            link.rcv_settle_mode = Link.RCV_FIRST
            link.max_message_size = message_limit(getattr(state, "entity", None), self.namespace)
            if isinstance(state, SendLink):  # the SDKs size their batches from it
                link.properties = {symbol(BATCH_SIZE_PROPERTY): batch_limit(self.namespace)}
        else:
            link.snd_settle_mode = link.remote_snd_settle_mode
            link.rcv_settle_mode = link.remote_rcv_settle_mode
            link.max_message_size = message_limit(getattr(state, "entity", None), self.namespace)
        advance(state, LinkPhase.ATTACHED)
        self._links[link] = state
        link.open()
        if link.is_receiver:
            link.flow(SENDER_CREDIT)
        if isinstance(state, ReceiveLink):
            state.view.attach(state)

    def _attach_session_receiver(
        self, link: Link, state: ReceiveLink, session_id: str | None
    ) -> None:
        """Accept a named session, or wait (up to com.microsoft:timeout) for any free one."""
        accepted = state.view.accept_session(session_id, state, self.now_ms)
        if accepted is not None:
            self._open_session_link(link, state, accepted)
            return
        props = link.remote_properties or {}
        timeout = next((v for k, v in props.items() if str(k) == "com.microsoft:timeout"), None)
        wait_ms = int(timeout) if isinstance(timeout, int) and timeout > 0 else NEXT_SESSION_WAIT_MS
        advance(state, LinkPhase.WAITING)
        self._links[link] = state

        def on_session(result: SessionHandle | None) -> None:
            if state.phase is _DETACHED:
                if result is not None:
                    result.release(self.now_ms)
                return
            self._links.pop(link, None)
            try:
                if result is None:
                    advance(state, LinkPhase.DETACHED)
                    self._refuse(
                        link,
                        OperationTimeout(
                            "The operation did not complete within the allotted timeout of "
                            f"{timespan(wait_ms)}: no session with messages became available."
                        ),
                    )
                else:
                    self._open_session_link(link, state, result)
            except LinkStateError as exc:  # called by the router: never raise into it
                log.warning("connection %d: %s", self.id, exc.description)
                self._refuse(link, exc)
            self.on_output()

        state.view.wait_for_session(state, self.now_ms + wait_ms, on_session)

    def _open_session_link(self, link: Link, state: ReceiveLink, session: SessionHandle) -> None:
        state.session = session
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        # The reply names the session granted (never null) [contract 4.4].
        reply = session_filter_reply(link.remote_source.filter, session.session_id)
        link.source.filter.clear()
        link.source.filter.put_dict({symbol("com.microsoft:session-filter"): reply})
        link.properties = {symbol("com.microsoft:locked-until-utc"): dotnet_ticks(session.until_ms)}
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        link.max_message_size = message_limit(state.entity, self.namespace)
        advance(state, LinkPhase.ATTACHED)
        self._links[link] = state
        link.open()
        state.view.attach(state)
        state.view.dispatch(self.now_ms)

    def _authorize_link(self, link: Link, path: str, rights: tuple[str, ...]) -> None:
        """Authorise an attach; a token-authorised link is watched until its token expires."""
        self._grants.authorize_link(link, path, rights, self.namespace.rights, self.now)

    def _refuse(self, link: Link, exc: ServiceBusError) -> None:
        """[contract 3.1, 8] attach with null source and target, then detach(closed, error)."""
        link.source.type = Terminus.UNSPECIFIED
        link.target.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = self.condition_for(exc)
        link.close()

    def close_link(self, link: Link, exc: ServiceBusError) -> None:
        self._forget_link(link)
        link.condition = self.condition_for(exc)
        link.close()

    def _on_link_remote_close(self, link: Link) -> None:
        state = self._links.get(link)
        self._forget_link(link)
        if state is not None and self._detach_hold.hold(
            link, self.now, lambda s: s is state, link.close
        ):
            return  # answered by _release_detaches once its outcomes in flight are answered
        link.close()

    def _release_detaches(self) -> None:
        """Send the held detach, end and close replies whose links' outcomes are all answered
        (protocol/detaching.py)."""
        for answer in self._detach_hold.release(self.now):
            answer()

    def _forget_link(self, link: Link) -> None:
        self._grants.forget(link)
        state = self._links.pop(link, None)
        if state is None:
            return
        if isinstance(state, ReceiveLink):
            self._end_receiver(state)
            return
        advance(state, LinkPhase.DETACHED)
        if isinstance(state, CoordinatorLink):
            self.transactions.rollback_all()  # [AMQP 4.4] open transactions roll back

    def _end_receiver(self, state: ReceiveLink) -> None:
        """A receiver went away: stop serving it; a session it held is released."""
        was_waiting = state.phase is _WAITING
        advance(state, LinkPhase.DETACHED)
        state.view.detach(state)
        if was_waiting:
            state.view.cancel_wait(state)
        if state.session is not None:
            state.session.release(self.now_ms)


def timespan(ms: int) -> str:
    """A duration as .NET prints a TimeSpan, as Azure's timeout descriptions do: 00:01:05,
    00:00:03.9530000, 1.00:00:00."""
    seconds, frac = divmod(ms, 1000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    text = f"{days}." if days else ""
    text += f"{hour:02d}:{minute:02d}:{sec:02d}"
    return text + (f".{frac * 10_000:07d}" if frac else "")
