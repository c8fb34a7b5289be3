"""Links: what we keep per attached link, and the one place a link's lifecycle changes.

Rule 1 (after h11's _state.py): everything that moves a link between phases lives here, as a
table. The connection says *which* transition it wants (`advance(state, LinkPhase.ATTACHED)`);
this module says whether that is allowed. Nothing else assigns `phase`.
Rule 2: this module knows nothing of the proton engine's own endpoint state (proton tracks
the frames); `phase` is *our* view: whether the partitions side serves the link.

Phases of a link, from the peer's attach to its end:

    ATTACHING --attach answered--------------------------------> ATTACHED
    ATTACHING --next-available session receiver, none free yet--> WAITING
    WAITING   --a session was granted--------------------------> ATTACHED
    ATTACHING, WAITING, ATTACHED --detach (either side), refusal,
                                   connection lost-------------> DETACHED

DETACHED is final: a detached receiver gets no more messages (credit() is 0), and a session it
held is released. A transition not in the table is our bug or a peer racing us; it raises
LinkStateError (amqp:illegal-state), which the connection's one error path turns into a
detach with that condition, never a traceback.

Proton engine objects carry no partition state (house style): the connection keeps these
objects in a LinkMap keyed by the proton link.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from cproton_ffi import lib as _lib
from proton import Described, Link

from ..errors import NotImplementedOperation, ServiceBusError, SessionLockLost
from ..partitions import Delivered, Entity, EntityView, SessionHandle, Taken
from .backpressure import OutputGate
from .largedelivery import LargeSend, Pieces


class LinkPhase(enum.Enum):
    """Our side of a link's lifecycle (see the module docstring)."""

    ATTACHING = "attaching"  # the peer's attach arrived; not answered yet
    WAITING = "waiting"  # a next-available session receiver waiting for a session
    ATTACHED = "attached"  # answered and served
    DETACHED = "detached"  # final


_TRANSITIONS: dict[LinkPhase, frozenset[LinkPhase]] = {
    LinkPhase.ATTACHING: frozenset({LinkPhase.WAITING, LinkPhase.ATTACHED, LinkPhase.DETACHED}),
    LinkPhase.WAITING: frozenset({LinkPhase.ATTACHED, LinkPhase.DETACHED}),
    LinkPhase.ATTACHED: frozenset({LinkPhase.DETACHED}),
    LinkPhase.DETACHED: frozenset(),
}

# Module constants so the hot path's phase checks are one identity compare.
_DETACHED = LinkPhase.DETACHED


class LinkStateError(ServiceBusError):
    """A link was asked to move between phases the table does not allow."""

    condition = "amqp:illegal-state"


def advance(state: LinkState, to: LinkPhase) -> None:
    """Move a link to phase `to`, or raise LinkStateError if the table forbids it."""
    if to not in _TRANSITIONS[state.phase]:
        raise LinkStateError(
            f"The link '{state.link.name}' cannot go from {state.phase.value} to {to.value}."
        )
    state.phase = to


class ReceiverOwner(Protocol):
    """What a receiver link needs of its connection: put a delivery on the wire, detach."""

    on_output: Callable[[], None]
    gate: OutputGate  # whether the peer may be given more output (backpressure.py)

    def send_delivery(self, state: ReceiveLink, delivered: Delivered) -> None:
        """Encode and send one message on the receiver's link."""

    def send_deliveries(self, state: ReceiveLink, taken: Taken, partition_id: int | None) -> None:
        """Encode and send messages of one partition on the receiver's link, in order."""

    def close_link(self, link: Link, exc: ServiceBusError) -> None:
        """Detach a link with the error's condition."""


@dataclass(eq=False)
class ReplyLink:
    """A client receiver for request/response replies ($cbs or $management)."""

    phase: LinkPhase = field(default=LinkPhase.ATTACHING, kw_only=True)

    link: Link
    node: str  # normalised node address the link is attached to
    pending: deque[bytes | Pieces] = field(default_factory=deque)
    # the credit kept for real answers: no copy of an answer goes at or below it (replycopies)
    copy_floor: int | None = None
    sending: LargeSend | None = None  # a large answer under way (largeanswer.py)


@dataclass(eq=False)
class RequestLink:
    """A client sender of $cbs or $management requests."""

    phase: LinkPhase = field(default=LinkPhase.ATTACHING, kw_only=True)

    link: Link
    node: str  # "$cbs" or the entity path of the management node
    entity: Entity | None = None
    view: EntityView | None = None


@dataclass(eq=False)
class CoordinatorLink:
    """A client's transaction controller link (target `coordinator`)."""

    phase: LinkPhase = field(default=LinkPhase.ATTACHING, kw_only=True)

    link: Link


SENDER_CREDIT = 1000  # credit a sender link is topped up to


def top_up_sender_credit(link: Any, _credit: Any = _lib.pn_link_credit) -> None:
    """Give a client's sender link (proton's C link) its credit back up to SENDER_CREDIT once
    it fell below half: one flow for many transfers, not one each."""
    credit = _credit(link)
    if credit < SENDER_CREDIT // 2:
        _lib.pn_link_flow(link, SENDER_CREDIT - credit)


@dataclass(eq=False)
class SendLink:
    """A client sender to an entity."""

    phase: LinkPhase = field(default=LinkPhase.ATTACHING, kw_only=True)

    link: Link
    entity: Entity
    address: str


@dataclass(eq=False)
class ReceiveLink:
    """A client receiver on an entity view; the router sees it as a Consumer."""

    phase: LinkPhase = field(default=LinkPhase.ATTACHING, kw_only=True)

    conn: ReceiverOwner
    link: Link
    entity: Entity
    view: EntityView
    peek_lock: bool
    # delivery tag -> its lock token's int (Lock.key; sbemu.partitions.token_of makes the UUID)
    unsettled: dict[bytes, int] = field(default_factory=dict)
    session: SessionHandle | None = None  # the accepted session of a session receiver
    sending: LargeSend | None = None  # a large delivery under way (largedelivery.py)

    def credit(self) -> int:
        """Credit the client granted and we have not used yet [AMQP 2.6.7]."""
        if self.phase is _DETACHED:
            return 0
        gate = self.conn.gate
        if gate.blocked:  # the peer is not reading what it has: none until it drains
            gate.starved = True
            return 0
        return self.link.credit

    def deliver(self, delivered: Delivered) -> None:
        """Put one message on the wire."""
        self.conn.send_delivery(self, delivered)

    def deliver_batch(self, taken: Taken, partition_id: int | None) -> None:
        """Put messages of one partition on the wire, in order."""
        self.conn.send_deliveries(self, taken, partition_id)

    def refuse(self, error: ServiceBusError) -> None:
        """The entity may no longer be received from (Status changed): detach with the error."""
        if self.phase is _DETACHED:
            return
        self.conn.close_link(self.link, error)
        self.conn.on_output()

    def session_lost(self, lock: object) -> None:
        """The session lock expired: detach with session-lock-lost [contract 4.4]."""
        session = self.session
        if self.phase is _DETACHED or session is None or not session.holds(lock):
            return
        self.conn.close_link(
            self.link,
            SessionLockLost(f"The session lock for session '{session.session_id}' has expired."),
        )
        self.conn.on_output()


LinkState = ReplyLink | RequestLink | SendLink | ReceiveLink | CoordinatorLink


class LinkMap(dict):
    """`_links` (proton Link -> our state) plus a cache keyed by the C link pointer, so the
    hot path finds a link's state without wrapping the link; any change drops the cache."""

    def __init__(self) -> None:
        super().__init__()
        self.by_ptr: dict[Any, Any] = {}  # keyed by the C link pointer (cffi cdata)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.by_ptr.clear()
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self.by_ptr.clear()
        super().__delitem__(key)

    def pop(self, *args: Any) -> Any:
        self.by_ptr.clear()
        return super().pop(*args)

    def popitem(self) -> Any:
        self.by_ptr.clear()
        return super().popitem()

    def clear(self) -> None:
        self.by_ptr.clear()
        super().clear()

    def setdefault(self, *args: Any) -> Any:
        self.by_ptr.clear()
        return super().setdefault(*args)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.by_ptr.clear()
        super().update(*args, **kwargs)


SESSION_FILTER = "com.microsoft:session-filter"


def _session_filter_value(data: object) -> tuple[bool, object]:
    """(has a session filter, its value as proton decoded it)."""
    try:
        data.rewind()  # type: ignore[attr-defined]
        data.next()  # type: ignore[attr-defined]
        filters = data.get_object()  # type: ignore[attr-defined]
    except Exception:
        return False, None
    if not isinstance(filters, dict):
        return False, None
    for key, value in filters.items():
        if str(key) == SESSION_FILTER:
            return True, value
    return False, None


# go-amqp (the Go SDK) sends the session filter as a described value (the id or null inside),
# which the service takes like the plain string of the other SDKs. Its descriptor is the Go
# SDK's constant 0x00000137000000C (one digit short of Microsoft's 0x00000137:0000000C, which
# we take as well, like the filter's symbolic name); a value described otherwise is refused
# like any other type (below).
SESSION_FILTER_CODES = (0x137000000C, 0x1370000000C)


def _is_session_filter(value: object) -> bool:
    return isinstance(value, Described) and (
        value.descriptor in SESSION_FILTER_CODES or str(value.descriptor) == SESSION_FILTER
    )


def session_filter(data: object) -> tuple[bool, str | None]:
    """(is a session receiver, requested session id or None for next-available)."""
    found, value = _session_filter_value(data)
    if not found:
        return False, None
    if _is_session_filter(value):
        value = value.value  # type: ignore[attr-defined]
    if value is None:
        return True, None
    if not isinstance(value, str):  # (a proton symbol is a str too)
        raise NotImplementedOperation(_SESSION_FILTER_TYPE.format(_dotnet_type(value)))
    return True, str(value)


def session_filter_reply(data: object, session_id: str) -> object:
    """The session filter value of the attach reply, in the form the client sent: a described
    value for a described filter (go-amqp reads no other filter value), else the plain string."""
    _found, value = _session_filter_value(data)
    if _is_session_filter(value):
        return Described(value.descriptor, session_id)  # type: ignore[attr-defined]
    return session_id


# The service takes a session filter's value as the SessionId string and refuses any other
# type in its words (azure-sdk-for-python PR #32860 quotes it for a described value; the
# Python SDK sends `session_id=1` as an AMQP int and its tests expect a ServiceBusError).
_SESSION_FILTER_TYPE = (
    "The link contains invalid filter type. System only support Jms or Apache selector filter "
    "type but we found type '{}' associated with key 'com.microsoft:session-filter'."
)
_DOTNET_TYPES = {
    "int32": "System.Int32",
    "int": "System.Int64",
    "long": "System.Int64",
    "uint": "System.UInt32",
    "ulong": "System.UInt64",
    "ubyte": "System.Byte",
    "byte": "System.SByte",
    "short": "System.Int16",
    "ushort": "System.UInt16",
    "bool": "System.Boolean",
    "float": "System.Double",
    "float32": "System.Single",
    "memoryview": "System.ArraySegment`1[System.Byte]",
    "bytes": "System.ArraySegment`1[System.Byte]",
    "UUID": "System.Guid",
    "timestamp": "System.DateTime",
    "char": "System.Char",
    "Described": "Microsoft.ServiceBus.Messaging.Amqp.Encoding.DescribedType",
    "dict": "Microsoft.ServiceBus.Messaging.Amqp.Encoding.AmqpMap",
    "list": "System.Collections.Generic.List`1[System.Object]",
}


def _dotnet_type(value: object) -> str:
    """The .NET type name the service reports for a decoded AMQP value."""
    name = type(value).__name__
    return _DOTNET_TYPES.get(name, name)
