"""Transfers whose intake is spread over several turns of the event loop, so that no single
request holds it for long: other connections, commits and /health are served between the
steps. A mixin of AmqpConnection, as messageevents.py is.

Two kinds take more than one turn, each a job with a `step()` that does a bounded piece and
says whether the messages are ready:

* a batch of more than messages.SCAN_CHUNK messages (Azure takes 4,500 in one transfer):
  messages.BatchScan scans SCAN_CHUNK of them a step;
* a transfer larger than READ_CHUNK bytes (up to 100 MB on Premium): LargeTransfer reads it
  from the engine READ_CHUNK bytes a step, then largescan.LargeScan copies its tail
  COPY_CHUNK bytes a step.

While a job runs, its connection takes nothing more from its peer: the engine's other events
wait in the collector and the bytes read after the transfer wait in the connection (then in
the listener's backlog, with reading paused), so what the client sent later is handled later,
in its order. Other connections are served between the steps. Nothing is stored until the
last step: the messages are then sent whole, in one turn (Entity.send_many), so a batch
commits in one LMDB transaction, all or none, and its transfer is acknowledged only after that
commit, as any send.

The adapter gives the connection its `defer` (run a function on a later loop pass); without
one (the in-memory test harness) every transfer is taken at once, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from cproton_ffi import ffi as _ffi
from cproton_ffi import lib as _lib
from proton import Delivery

from ..errors import ServiceBusError
from ..partitions import IncomingMessage
from .largescan import LargeScan, scan_large
from .links import RequestLink, SendLink, top_up_sender_credit

log = logging.getLogger("sbemu.connection")

_PN_ACCEPTED = Delivery.ACCEPTED
_pn_delivery_update = _lib.pn_delivery_update
_pn_delivery_settle = _lib.pn_delivery_settle
_pn_decref = _lib.pn_decref

# A complete transfer larger than this is read from the engine this many bytes a step.
READ_CHUNK = 4 * 1024 * 1024


class Settles(Protocol):
    """What Acknowledgement uses of the connection (messageevents.MessageEvents)."""

    def on_output(self) -> None: ...
    def _refuse_many(self, deliveries: list[Any], error: Exception) -> None: ...


class Acknowledgement:
    """The one settlement object of an Entity.send_many call: the partitions call it once
    per group of sends whose commit landed (or failed), with the sends' indices, and it
    settles their transfers: accepted (the happy path, inline), or refused with the error
    (messageevents._refuse_many). It holds the transfers' C deliveries (one reference each,
    dropped here)."""

    __slots__ = ("conn", "deliveries")

    def __init__(self, conn: Settles, deliveries: list[Any]) -> None:
        self.conn = conn
        self.deliveries = deliveries

    def __call__(self, indices: list[int], error: Exception | None) -> None:
        deliveries = self.deliveries
        if len(indices) != len(deliveries):
            deliveries = [deliveries[i] for i in indices]
        if error is not None:
            self.conn._refuse_many(deliveries, error)
            return
        accept_all(deliveries)
        self.conn.on_output()


def accept_all(deliveries: Iterable[Any]) -> None:
    """Accept and settle transfers whose commit landed, in this order, and drop our reference
    to each (the one place a stored send is acknowledged on proton's C layer)."""
    update, settle, decref = _pn_delivery_update, _pn_delivery_settle, _pn_decref
    for d in deliveries:
        update(d, _PN_ACCEPTED)
        settle(d)
        decref(d)


class RequestJob(Protocol):
    """A `$management` request's intake (largerequest.RequestRead): `step()` reads a bounded
    piece, True once it is read; `request()` is then the request."""

    def step(self) -> bool: ...
    def request(self) -> Any: ...
    def data(self) -> bytes: ...


class IntakeJob(Protocol):
    """One transfer's intake: `step()` does a bounded piece of it, True once `messages` are
    ready; raises a ServiceBusError to refuse the transfer."""

    messages: list[IncomingMessage]

    def step(self) -> bool: ...


class LargeTransfer:
    """A transfer larger than READ_CHUNK: read READ_CHUNK bytes a step into one bytes object
    (proton copies into it: the only copy of the transfer), scanned, its tail copied a slice
    a step (largescan)."""

    __slots__ = ("link", "size", "data", "_got", "_scan", "_large", "messages")

    def __init__(
        self, link: Any, size: int, scan: Callable[[bytes], LargeScan | list[IncomingMessage]]
    ) -> None:
        self.link = link  # the C link; its current delivery is the transfer
        self.size = size
        # calloc'd (fresh zero pages for a block this large), filled in place by proton below
        # before anything else sees it
        self.data = bytes(size)
        self._got = 0
        self._scan = scan
        self._large: LargeScan | None = None
        self.messages: list[IncomingMessage] = []

    def step(self) -> bool:
        large = self._large
        if large is None:
            want = min(READ_CHUNK, self.size - self._got)
            got = _lib.pn_link_recv(self.link, _ffi.from_buffer(self.data) + self._got, want)
            if got > 0:
                self._got += got
            if got > 0 and self._got < self.size:
                return False
            _lib.pn_link_advance(self.link)
            data, self.data = self.data, b""
            if self._got < self.size:  # (the engine had less than it said: not expected)
                data = data[: self._got]
            scanned = self._scan(data)
            if type(scanned) is list:
                self.messages = scanned
                return True
            self._large = large = scanned  # type: ignore[assignment]
            return False
        assert large is not None
        if not large.step():
            return False
        self.messages = [large.message()]
        self._large = None
        return True


class Intakes:
    """The part of AmqpConnection this module owns (see the module docstring)."""

    if TYPE_CHECKING:  # what it uses of AmqpConnection
        closed: bool
        id: int
        namespace: Any
        on_output: Callable[[], None]

        @property
        def now_ms(self) -> int: ...

        def _process(self) -> None: ...
        def _push(self, data: bytes) -> None: ...
        def _refuse_many(self, deliveries: list[Any], error: Exception) -> None: ...
        def close_link(self, link: Any, exc: ServiceBusError) -> None: ...
        def _answer_read(self, state: RequestLink, d: Any, job: RequestJob) -> None: ...

    def _init_intakes(self) -> None:
        """(called by __init__)"""
        # run a function on a later pass of the event loop (the listener's); None: no job
        # is spread over turns (every transfer is taken at once)
        self.defer: Callable[[Callable[[], None]], object] | None = None
        # the listener may feed the connection again (its backlog, reading resumed)
        self.on_input_ready: Callable[[], None] = lambda: None
        # the transfer being taken: (its link's state, the C delivery, the job)
        self._intake: tuple[SendLink | RequestLink, Any, IntakeJob | RequestJob] | None = None
        self._held_input: bytes | None = None  # bytes read after it, fed once it is done

    @property
    def busy(self) -> bool:
        """A transfer is being taken over several turns: feed nothing until on_input_ready."""
        return self._intake is not None

    def _large_transfer(self, state: SendLink, link: Any, d: Any, size: int) -> None:
        """Take a complete transfer larger than READ_CHUNK over several turns (d is held)."""
        entity, tier = state.entity, self.namespace.max_message_size
        limit, for_topic = entity.spec.max_message_size or tier, entity.subscriptions is not None

        def scan(data: bytes) -> LargeScan | list[IncomingMessage]:
            return scan_large(data, limit, for_topic, tier)

        self._begin_intake(state, d, LargeTransfer(link, size, scan))

    def _begin_intake(
        self, state: SendLink | RequestLink, d: Any, job: IntakeJob | RequestJob
    ) -> None:
        """Take the transfer `d` (held) with `job`; _process stops after the current event."""
        assert self.defer is not None
        self._intake = (state, d, job)
        self.defer(self._intake_step)

    def _hold_input(self, data: bytes) -> None:
        """Bytes that arrived while a transfer is being taken: fed once it is done."""
        self._held_input = data if self._held_input is None else self._held_input + data

    def _intake_step(self) -> None:
        intake = self._intake
        if intake is None or self.closed:
            return
        state, d, job = intake
        try:
            done = job.step()
        except ServiceBusError as exc:  # refused: the client hears why
            self._intake = None
            self._refuse_many([d], exc)
            self._resume_input()
            return
        except Exception as exc:  # not the peer's fault: the link ends, the server stays
            log.exception("connection %d: unexpected error reading a transfer", self.id)
            self._intake = None
            _lib.pn_decref(d)
            self.close_link(state.link, ServiceBusError(f"Internal error: {exc}"))
            self._resume_input()
            return
        if not done:
            assert self.defer is not None
            self.defer(self._intake_step)
            return
        self._intake = None
        if isinstance(state, RequestLink):  # a large request (largerequest.py): answered
            self._answer_read(state, d, job)  # type: ignore[arg-type]
        else:
            self._store_intake(state, d, job.messages)  # type: ignore[union-attr]
        self._resume_input()

    def _store_intake(self, state: SendLink, d: Any, messages: list[IncomingMessage]) -> None:
        """Send the transfer's messages whole (one send: one commit); acknowledged after it."""
        top_up_sender_credit(state.link._impl)
        try:
            state.entity.send_many([messages], self.now_ms, Acknowledgement(self, [d]))
        except Exception as exc:  # not the peer's fault: the link ends, the server stays
            log.exception("connection %d: unexpected error storing transfers", self.id)
            self.close_link(state.link, ServiceBusError(f"Internal error: {exc}"))

    def _resume_input(self) -> None:
        """The job is over: the events that waited, then the bytes that waited, then ask the
        listener for more."""
        self._process()
        held, self._held_input = self._held_input, None
        if held and self._intake is None:
            self._push(held)
        elif held:
            self._held_input = held
        self.on_output()
        if self._intake is None:
            self.on_input_ready()

    def _drop_intake(self) -> None:
        """The connection is gone: let go of the transfer being taken."""
        intake, self._intake = self._intake, None
        self._held_input = None
        if intake is not None:
            _lib.pn_decref(intake[1])
