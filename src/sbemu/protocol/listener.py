"""asyncio adapter: with wslistener.py (its WebSocket door), the only code that touches sockets
(and reads the clock for them).

Each accepted socket gets an AmqpConnection (sans-IO): a TCP socket (amqp, or amqps with the
TLS done by asyncio), or a WebSocket the admin HTTP server upgraded (its transport and read
loop are protocol/wslistener.py's, ``serve_websocket``). We pass it bytes and `now`, write what
it produces, re-arm one timer for proton's heartbeats, and flush again whenever work that
completed later (a group commit) asks for it through `on_output`.

Backpressure: while a socket's write buffer is over its high-water mark (asyncio's
pause_writing; for a WebSocket, wslistener.WS_HIGH_WATER) we read nothing more from that
peer, take nothing more from its engine, and its connection produces nothing more for it (its
OutputGate, protocol/backpressure.py); all resumes once it drained (resume_writing). A peer
whose buffer does not shrink for SBEMU_WRITE_STALL_TIMEOUT seconds is closed, with a warning.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..errors import QuotaExceeded
from .connection import AmqpConnection, Services

log = logging.getLogger("sbemu.listener")

# Bytes handed to the engine per event-loop pass. A big read (uvloop reads up to 256 KB: a
# few hundred messages) is fed in slices, yielding to the loop in between, so commit
# completions (acknowledgements) and other connections are not held up behind it.
READ_SLICE = 65_536

# Bytes taken from the engine per flush. A large delivery (up to 100 MB on Premium) is framed
# and written in slices while the socket keeps up (asyncio's pause_writing/resume_writing), so
# the frames of a whole message never sit in memory at once; small deliveries fit one slice.
WRITE_SLICE = 4 * 1024 * 1024

# TCP_QUICKACK after every read (Linux): the kernel acknowledges the bytes at once instead of
# holding the ACK back for a reply to ride on. A client with Nagle's algorithm on (rhea turns
# TCP_NODELAY on only once a connection has a receiver; a sender-only connection keeps Nagle)
# may not put its next small transfer on the wire while one is unacknowledged, so with delayed
# ACKs every send waited for the previous one's disposition, that is for its commit: at 1,000
# msg/s reads carried 2-3 messages instead of 1 and send-to-receive latency grew by about a
# commit. Measured: reads of one message 18-25% -> 86%, client p50 4.9-5.4 -> 3.4 ms.
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


class Flusher:
    """Connections with output waiting (deliveries, acknowledgements) that arose outside their
    own read: written together by run(), which the server calls at the end of the work that
    produced them (a commit turn), and otherwise on the next loop pass.

    Without it every such flush was a call_soon of its own, so a delivery made ready by a
    commit waited behind the reads that were already queued (about half a millisecond on an
    idle server, more under load) before its bytes reached the socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: dict[AmqpProtocol, None] = {}
        self._scheduled = False

    def request(self, proto: AmqpProtocol) -> None:
        self._pending[proto] = None
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.run)

    def run(self) -> None:
        """Flush every connection that asked (those that ask meanwhile too)."""
        self._scheduled = False
        pending = self._pending
        while pending:
            protos = list(pending)
            pending.clear()
            for proto in protos:
                proto._flush()


class AmqpProtocol(asyncio.Protocol):
    """One client socket."""

    def __init__(
        self,
        services: Services,
        registry: set[AmqpProtocol],
        flusher: Flusher,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._services = services
        self._registry = registry
        self._clock = clock
        self._transport: asyncio.Transport | None = None
        self._conn: AmqpConnection | None = None
        self._flush_pending = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # the deadline the armed timer is for
        self._backlog: deque[bytes] = deque()  # input not yet fed (reading paused meanwhile)
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self._flusher = flusher
        self._quickack: Callable[[], None] | None = None  # set for a TCP socket on Linux
        self.transport_kind = "amqp"  # amqp, amqps, ws or wss (the dashboard shows it)
        self._writing_paused = False  # asyncio's write buffer is above its high-water mark
        self._stall_timer: asyncio.TimerHandle | None = None  # while paused: is the peer stuck?
        self._stall_size = 0  # the write buffer's size when the stall timer was armed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        if transport.get_extra_info("websocket"):
            self.transport_kind = transport.get_extra_info("websocket")
        elif transport.get_extra_info("sslcontext") is not None:
            self.transport_kind = "amqps"
        sock = transport.get_extra_info("socket")
        if (
            _QUICKACK is not None
            and sock is not None
            and sock.family in (socket.AF_INET, socket.AF_INET6)
        ):
            option = _QUICKACK

            def quickack() -> None:
                sock.setsockopt(socket.IPPROTO_TCP, option, 1)

            self._quickack = quickack
        self._conn = AmqpConnection(self._services, self._clock())
        self._conn.on_output = self._request_flush
        self._conn.defer = self._defer  # a transfer taken over several turns (intake.py)
        self._conn.on_input_ready = self._input_ready
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self._conn.peer = f"{peer[0]}:{peer[1]}"
        limits = self._services.limits
        if len(self._registry) >= limits.max_connections:
            # [limits.py] over the cap: finish the handshake, then close(resource-limit-exceeded)
            self._conn.refuse_with = QuotaExceeded(
                f"The maximum number of connections ({limits.max_connections}) has been "
                "reached (SBEMU_MAX_CONNECTIONS)."
            )
        self._registry.add(self)
        # A peer must reach the AMQP open within the handshake timeout (slowloris, stuck SASL).
        self._handshake_timer = self._loop.call_later(
            limits.handshake_timeout, self._on_handshake_timeout
        )

    def _on_handshake_timeout(self) -> None:
        self._handshake_timer = None
        conn, transport = self._conn, self._transport
        if conn is None or transport is None or conn.handshake_done:
            return
        log.info(
            "connection %d: no AMQP open within %.0f s (SBEMU_HANDSHAKE_TIMEOUT); closing",
            conn.id,
            self._services.limits.handshake_timeout,
        )
        conn.closed = True
        transport.close()

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        if conn is None:
            return
        if self._quickack is not None:
            try:
                self._quickack()
            except OSError:  # the socket is going away; nothing to acknowledge quickly
                self._quickack = None
        if (
            len(data) <= READ_SLICE
            and not self._backlog
            and not self._writing_paused
            and not conn.busy
        ):
            self._feed(conn, data)
            return
        # (while writing is paused: bytes read before reading stopped, such as the rest of a
        # WebSocket read, wait here, unfed, until the peer drained its output)
        self._backlog.append(data)
        if len(self._backlog) == 1:
            if self._transport is not None:
                self._transport.pause_reading()
            self._drain()

    def _drain(self) -> None:
        """Feed one slice of the backlog; come back on the next loop pass for the rest."""
        conn = self._conn
        if conn is None or not self._backlog:
            self._backlog.clear()
            return
        if self._writing_paused:
            return  # resume_writing carries on
        if conn.busy:
            return  # a transfer is being taken over several turns: _input_ready carries on
        head = self._backlog[0]
        if len(head) > READ_SLICE:
            self._backlog[0] = head[READ_SLICE:]
            head = head[:READ_SLICE]
        else:
            self._backlog.popleft()
        self._feed(conn, head)
        if not self._backlog:
            self._resume_reading()
        elif conn.closed:
            self._backlog.clear()
        else:
            self._loop.call_soon(self._drain)

    def _feed(self, conn: AmqpConnection, data: bytes) -> None:
        try:
            conn.receive_data(data, self._clock())
        except Exception:  # never let one connection take the server down
            log.exception("connection %d: failed while reading", conn.id)
            conn.closed = True
        self._flush()

    def _resume_reading(self) -> None:
        transport, conn = self._transport, self._conn
        if (
            transport is not None
            and not transport.is_closing()
            and not self._writing_paused
            and not self._backlog
            and not (conn is not None and conn.busy)
        ):
            transport.resume_reading()

    def _defer(self, work: Callable[[], None]) -> None:
        """The connection's `defer`: `work` on the next loop pass, the output it made
        written after it (a step of a transfer taken over several turns: intake.py)."""
        self._loop.call_soon(self._deferred, work)

    def _deferred(self, work: Callable[[], None]) -> None:
        conn = self._conn
        if conn is None:
            return
        conn.now = self._clock()
        try:
            work()
        except Exception:  # never let one connection take the server down
            log.exception("connection %d: failed while reading", conn.id)
            conn.closed = True
        self._flush()

    def _input_ready(self) -> None:
        """The connection took the transfer that kept it busy: feed it what waited."""
        if self._backlog:
            self._loop.call_soon(self._drain)
        else:
            self._resume_reading()

    def eof_received(self) -> bool | None:
        # Clients drop the socket right after close [contract 1.3]: EOF is a normal end.
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._registry.discard(self)
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        if self._conn is not None:
            while self._backlog:  # bytes that arrived before the close are still input
                self._feed(self._conn, self._backlog.popleft())
            self._conn.connection_lost()
            self._conn = None

    def _request_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self._flusher.request(self)

    def _flush(self) -> None:
        self._flush_pending = False
        conn, transport = self._conn, self._transport
        if conn is None or transport is None or transport.is_closing():
            return
        if self._writing_paused:  # nothing more for a peer that is not reading its output
            if conn.closed:
                transport.close()  # the stall timer aborts it if the peer never drains
            return
        try:
            out = conn.data_to_send(WRITE_SLICE)
        except Exception:
            log.exception("connection %d: failed while writing", conn.id)
            out, conn.closed = b"", True
        if out:
            transport.write(out)
        if conn.closed:
            transport.close()
            return
        if (
            conn.more_output
            and not self._writing_paused
            and transport.get_write_buffer_size() < WRITE_SLICE
        ):
            self._request_flush()  # the next slice; resume_writing() asks once paused
        # (a whole slice still waiting is over the high-water mark: the transport pauses us,
        # TLS only a loop pass after the write, and resume_writing asks for the next slice;
        # flushing again meanwhile took slice after slice, and answer after answer, into TLS)
        self._arm_timer(conn)

    def pause_writing(self) -> None:
        """The write buffer passed its high-water mark: stop reading from the peer and stop
        producing for it until it drained; watch that it does drain."""
        if self._writing_paused:
            return
        self._writing_paused = True
        if self._conn is not None:
            self._conn.pause_output()
        transport = self._transport
        if transport is None:
            return
        if not transport.is_closing():
            transport.pause_reading()
        if self._stall_timer is None:
            self._stall_size = transport.get_write_buffer_size()
            timeout = self._services.limits.write_stall_timeout
            self._stall_timer = self._loop.call_later(timeout, self._on_stall)

    def resume_writing(self) -> None:
        """The write buffer drained below its low-water mark: read and produce again."""
        self._writing_paused = False
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        conn = self._conn
        if conn is None:
            return
        conn.resume_output()
        if self._backlog:
            self._loop.call_soon(self._drain)
        else:
            self._resume_reading()
        self._request_flush()  # what came due while paused (acknowledgements, the next slice)

    def _on_stall(self) -> None:
        """The stall timer: close a peer whose write buffer has not shrunk since it was armed."""
        self._stall_timer = None
        transport = self._transport
        if transport is None or not self._writing_paused:
            return
        size = transport.get_write_buffer_size()
        timeout = self._services.limits.write_stall_timeout
        if size < self._stall_size:  # it reads, slowly: watch on
            self._stall_size = size
            self._stall_timer = self._loop.call_later(timeout, self._on_stall)
            return
        conn = self._conn
        log.warning(
            "connection %s (%s, %s): the peer read nothing for %.0f s with %d bytes waiting "
            "for it (SBEMU_WRITE_STALL_TIMEOUT); closing",
            conn.id if conn is not None else "?",
            conn.peer if conn is not None else "?",
            self.transport_kind,
            timeout,
            size,
        )
        if conn is not None:
            conn.closed = True
        transport.abort()

    def _arm_timer(self, conn: AmqpConnection) -> None:
        deadline = conn.next_deadline()
        if deadline is not None and self._timer is not None and self._timer_at <= deadline:
            # Armed for no later than needed: an early tick just re-arms. This keeps a busy
            # connection from replacing its timer on every flush.
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is not None:
            delay = max(0.0, deadline - self._clock())
            self._timer_at = deadline
            self._timer = self._loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        conn = self._conn
        if conn is None:
            return
        conn.handle_timer(self._clock())
        self._flush()

    def entity_removed(self, entity: object, queue_prefix: str | None) -> None:
        """An entity or subscription was deleted (admin API): detach this client's links on it."""
        if self._conn is not None and self._conn.detach_entity(entity, queue_prefix):  # type: ignore[arg-type]
            self._flush()

    def close(self) -> None:
        """Drop the socket (server shutdown)."""
        if self._transport is not None:
            self._transport.close()

    # ------------------------------------------------------------------ operator view
    def describe(self) -> dict[str, Any] | None:
        """Peer address plus the connection's own description (None once it is gone)."""
        conn, transport = self._conn, self._transport
        if conn is None or transport is None:
            return None
        peer = transport.get_extra_info("peername")
        info = conn.describe()
        info["peer"] = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        info["transport"] = self.transport_kind
        return info

    @property
    def connection_id(self) -> int | None:
        """The AmqpConnection id the dashboard names this socket by."""
        return self._conn.id if self._conn is not None else None

    def close_by_operator(self, description: str, grace: float = 5.0) -> None:
        """Send close(amqp:connection:forced); drop the socket if the peer does not answer."""
        conn = self._conn
        if conn is None:
            return
        conn.close_by_operator(description)
        self._flush()
        self._loop.call_later(grace, self.close)
