"""asyncio adapter: the only module that touches sockets (and reads the clock for them).

Each accepted socket gets an AmqpConnection (sans-IO). We pass it bytes and `now`, write what
it produces, re-arm one timer for proton's heartbeats, and flush again whenever work that
completed later (a group commit) asks for it through `on_output`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ..errors import QuotaExceeded
from .connection import AmqpConnection, Services

log = logging.getLogger("sbemu.listener")


class AmqpProtocol(asyncio.Protocol):
    """One client socket."""

    def __init__(
        self,
        services: Services,
        registry: set[AmqpProtocol],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._services = services
        self._registry = registry
        self._clock = clock
        self._transport: asyncio.Transport | None = None
        self._conn: AmqpConnection | None = None
        self._flush_pending = False
        self._timer: asyncio.TimerHandle | None = None
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self._conn = AmqpConnection(self._services, self._clock())
        self._conn.on_output = self._request_flush
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
        try:
            conn.receive_data(data, self._clock())
        except Exception:  # never let one connection take the server down
            log.exception("connection %d: failed while reading", conn.id)
            conn.closed = True
        self._flush()

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
        if self._conn is not None:
            self._conn.connection_lost()
            self._conn = None

    def _request_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        conn, transport = self._conn, self._transport
        if conn is None or transport is None or transport.is_closing():
            return
        try:
            out = conn.data_to_send()
        except Exception:
            log.exception("connection %d: failed while writing", conn.id)
            out, conn.closed = b"", True
        if out:
            transport.write(out)
        if conn.closed:
            transport.close()
            return
        self._arm_timer(conn)

    def _arm_timer(self, conn: AmqpConnection) -> None:
        deadline = conn.next_deadline()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is not None:
            delay = max(0.0, deadline - self._clock())
            self._timer = self._loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        conn = self._conn
        if conn is None:
            return
        conn.handle_timer(self._clock())
        self._flush()

    def close(self) -> None:
        """Drop the socket (server shutdown)."""
        if self._transport is not None:
            self._transport.close()
