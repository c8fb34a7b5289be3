"""A connection's output (sans-IO): the bytes for the socket, taken from proton's transport
a read at a time, padded (frames.py) and bounded by the adapter's `limit`, and production paused
and resumed with the socket through the OutputGate (backpressure.py): what waited while it was
shut ($management answers, receive links with credit) is served when it opens. A mixin of
AmqpConnection (connection.py keeps the state machine and the event loop; bytes go in through
its receive_data).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cproton_ffi import ffi as _ffi  # the binding's C layer: the transport's buffer, sessions
from cproton_ffi import lib as _lib
from proton import Connection, Link, Transport

from ..errors import ServiceBusError
from .backpressure import OutputGate
from .detaching import DetachHold
from .frames import FramePadder
from .links import LinkPhase, LinkState, ReceiveLink

log = logging.getLogger("sbemu.connection")

_NULL = _ffi.NULL


class ConnectionOutput:
    """The part of AmqpConnection this module owns (see the module docstring)."""

    if TYPE_CHECKING:  # what it uses of AmqpConnection
        _completed: list[tuple[int, Any]]
        _conn: Connection | None
        _detach_hold: DetachHold
        _links: dict[Link, LinkState]
        _out: bytearray
        _padder: FramePadder
        _transport: Transport | None
        closed: bool
        gate: OutputGate
        id: int
        more_output: bool
        on_output: Callable[[], None]

        @property
        def now_ms(self) -> int: ...

        def close_link(self, link: Link, exc: ServiceBusError) -> None: ...
        def _answer_waiting_requests(self) -> None: ...
        def _process(self) -> None: ...
        def _release_detaches(self) -> None: ...
        def _settle_completed(self) -> None: ...

    def data_to_send(self, limit: int | None = None) -> bytes:
        """Bytes to write to the socket now (may be empty); about `limit` bytes at most, with
        `more_output` set when the engine has more (a large delivery is framed as the socket
        takes it, not all at once into memory)."""
        transport = self._transport
        self.more_output = False
        if transport is not None:
            gate = self.gate
            if gate.starved and not gate.blocked:
                self._resume_production()
            if self._completed:
                self._settle_completed()
            self._release_detaches()  # after the outcomes: their dispositions go out first
            self._process()
            timpl = transport._impl  # proton's C layer: one buffer per read, no wrappers
            pieces: list[bytes | memoryview] = []  # padded frames, views of the chunks read
            taken = 0
            while True:
                pending = _lib.pn_transport_pending(timpl)
                if pending <= 0:
                    if pending < 0:
                        self.closed = True
                    break
                chunk = bytearray(pending)
                got = _lib.pn_transport_peek(timpl, _ffi.from_buffer(chunk), pending)
                if got < 0:
                    self.closed = True
                    break
                self._padder.feed_into(chunk, pieces)
                _lib.pn_transport_pop(timpl, pending)
                taken += pending
                if limit is not None:
                    limit -= pending
                    if limit <= 0:
                        self.more_output = True
                        break
            if (
                transport.capacity() < 0
                and transport.pending() <= 0
                and not self.closed
                and not self._detach_hold.holding()
            ):
                # proton stopped reading (a frame it could not decode) and has nothing left
                # to say: close the socket rather than leave a silent connection open. Not
                # while a close reply is held: after the peer's close frame proton reads no
                # more, and the held dispositions and close must still go out (Java's
                # processor closed its connection right after its last complete and was cut
                # off: "didn't receive the disposition acknowledgment").
                log.info("connection %d: input closed by the engine; closing", self.id)
                self.closed = True
            # What is left: proton frames a whole delivery into its transport buffer at once
            # (the sessions' count drops to 0) and hands it out a chunk at a time, so while we
            # stopped at the limit it is what was produced less what was taken; once all was
            # taken, what the sessions still hold (a peer's closed session window).
            if gate.queued and gate.taken(
                max(gate.queued - taken, self._engine_queued())
                if self.more_output
                else self._engine_queued()
            ):
                self.on_output()  # the gate opened: what waited is produced at the next flush
            if pieces:
                if not self._out:
                    return b"".join(pieces)  # the usual case: each byte copied once
                self._out += b"".join(pieces)
        out = bytes(self._out)
        self._out.clear()
        return out

    def pause_output(self) -> None:
        """The socket's write buffer passed its high-water mark: produce nothing more."""
        self.gate.pause()

    def resume_output(self) -> None:
        """The socket drained: produce again (the adapter flushes when `more_output` or what
        waited asks it to, through on_output)."""
        if self.gate.resume():
            self.on_output()

    def _engine_queued(self) -> int:
        """Bytes of deliveries and answers proton holds for the peer, not framed yet (proton
        frames what the peer's session window allows into the transport's buffer as soon as
        output is asked for: `data_to_send` adds that part)."""
        conn = self._conn
        if conn is None:
            return 0
        total = 0
        ssn = _lib.pn_session_head(conn._impl, 0)
        while ssn != _NULL:
            total += _lib.pn_session_outgoing_bytes(ssn)
            ssn = _lib.pn_session_next(ssn, 0)
        return total

    def _resume_production(self) -> None:
        """The gate opened for what waited: the $management requests in order, then the
        receive links with credit (and the drains they asked for), while it stays open."""
        gate = self.gate
        gate.starved = False
        self._answer_waiting_requests()
        for state in list(self._links.values()):
            if gate.blocked:
                gate.starved = True
                return
            if not isinstance(state, ReceiveLink) or state.phase is not LinkPhase.ATTACHED:
                continue
            link = state.link._impl
            try:
                if _lib.pn_link_credit(link) > 0:
                    state.view.dispatch(self.now_ms)
            except Exception as exc:  # not the peer's fault: the link ends, the server stays
                log.exception("connection %d: unexpected error serving a receiver", self.id)
                self.close_link(state.link, ServiceBusError(f"Internal error: {exc}"))
                continue
            if _lib.pn_link_get_drain(link) and not gate.blocked:
                _lib.pn_link_drained(link)  # [AMQP 2.6.7] give back unused credit
