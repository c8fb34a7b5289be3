"""The admin port's listener and the service that serves each connection: TLS or plain told
apart by the first byte, AMQP handed over by its header, then requests routed one after another
on a keep-alive connection."""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl
from collections.abc import Awaitable, Callable

import h11

from .messages import Dispatcher, Request, Response, json_response
from .transports import READ_CHUNK, WRITE_TIMEOUT, PlainStream, TlsStream, UpgradedStream
from .wire import (
    MAX_HEAD_BYTES,
    Reject,
    read_request,
    send_error,
    switch_protocols,
    write_response,
)

log = logging.getLogger("sbemu.admin.http")

DEFAULT_MAX_BODY = 4 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT = 5.0  # seconds for one request's head and body
# Connections the kernel holds for a listener until the server accepts them, on every port:
# asyncio's default (100) overflows under a burst of clients (a pool opening its connections at
# once, a test's thousands), and the kernel then drops their SYNs: each waits a retransmit, a
# second or more, before it connects.
LISTEN_BACKLOG = 1024
TLS_HANDSHAKE = 0x16
AMQP_HEADER = b"AMQP"  # every AMQP connection's first bytes [AMQP 2.2]


class AdminServer:
    """The listening socket plus its live keep-alive connections (closed with it)."""

    def __init__(self, server: asyncio.Server, connections: set[asyncio.StreamWriter]) -> None:
        self._server = server
        self._connections = connections

    @property
    def sockets(self):  # noqa: ANN201 - same as asyncio.Server.sockets
        return self._server.sockets

    def close(self) -> None:
        self._server.close()
        for writer in list(self._connections):
            writer.close()

    async def wait_closed(self) -> None:
        await self._server.wait_closed()


class HttpService:
    """Serves HTTP(S) connections for one route table: those its own listener accepts
    (:func:`start_admin`) and those another port's protocol hands over after reading their first
    bytes (:meth:`adopt`: the AMQP ports answer the management API too, sbemu.runtime.endpoints)."""

    def __init__(
        self,
        routes: Dispatcher,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        amqp: Callable[[UpgradedStream], Awaitable[None]] | None = None,
    ) -> None:
        self.routes = routes
        self.request_timeout = request_timeout
        self.ssl_context = ssl_context
        self.max_body = max_body
        # a connection whose first bytes (inside TLS or not) are AMQP's header goes here
        self.amqp = amqp
        self.connections: set[asyncio.StreamWriter] = set()

    async def on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve one connection until it ends (asyncio.start_server's callback)."""
        self.connections.add(writer)
        try:
            await _serve(reader, writer, self)
        except (ConnectionError, asyncio.TimeoutError, ssl.SSLError) as exc:
            log.debug("admin connection dropped: %r", exc)
        except asyncio.CancelledError:
            # The connection's own task can be cancelled under it (mid-drain, when an SDK
            # admin client hangs up): the connection is over, nothing else is. Ending the
            # task normally keeps asyncio's done-callback from logging a traceback.
            log.debug("admin connection cancelled")
        except Exception:  # a guard: one bad connection never stops the listener
            log.exception("admin connection failed")
        finally:
            self.connections.discard(writer)
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), WRITE_TIMEOUT)
            except (OSError, asyncio.TimeoutError, ssl.SSLError):
                pass
            except asyncio.CancelledError:
                # the loop is ending (shutdown) while a connection, such as an upgraded
                # WebSocket, was still closing: it is closed, so end the task normally, or
                # asyncio logs the cancellation as an error with a traceback
                pass

    def adopt(self, transport: asyncio.BaseTransport, first: bytes) -> None:
        """Serve a connection another protocol accepted and read ``first`` from (TLS records or
        an HTTP request; a transport that is TLS already counts as HTTPS)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, self.on_connection, loop=loop)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if first:
            protocol.data_received(first)

    def close(self) -> None:
        """Close every connection it serves."""
        for writer in list(self.connections):
            writer.close()


async def start_admin(
    host: str,
    port: int,
    routes: Dispatcher,
    *,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ssl_context: ssl.SSLContext | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    service: HttpService | None = None,
) -> AdminServer:
    """Listen on ``host:port`` (0 = ephemeral) and serve ``routes`` (or ``service``, which
    brings its own routes); TLS when a context is given.

    Raises OSError when the address cannot be bound.
    """
    if service is None:
        service = HttpService(
            routes, request_timeout=request_timeout, ssl_context=ssl_context, max_body=max_body
        )
    server = await asyncio.start_server(
        service.on_connection, host, port, reuse_address=True, backlog=LISTEN_BACKLOG
    )
    return AdminServer(server, service.connections)


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, service: HttpService
) -> None:
    routes, request_timeout = service.routes, service.request_timeout
    ssl_context, max_body = service.ssl_context, service.max_body
    try:
        first = await asyncio.wait_for(reader.read(READ_CHUNK), request_timeout)
    except asyncio.TimeoutError:
        first = None
    peername = writer.get_extra_info("peername")
    peer = f"{peername[0]}:{peername[1]}" if peername else "?"
    transport: PlainStream | TlsStream
    if first and first[0] == TLS_HANDSHAKE and ssl_context is not None:
        transport = TlsStream(ssl_context, reader, writer, first)
        await asyncio.wait_for(transport.handshake(), request_timeout)
        first = b""
        if service.amqp is not None:  # what the TLS carries: AMQP (AMQPS) or HTTP (HTTPS)
            first = await asyncio.wait_for(transport.recv(), request_timeout)
            transport.unread(first)
    else:
        transport = PlainStream(reader, writer, first or b"")
    if first and first.startswith(AMQP_HEADER) and service.amqp is not None:
        transport.unread(b"")
        address = peername if isinstance(peername, tuple) else None
        await service.amqp(UpgradedStream(transport, first, address))
        return
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    if first is None:  # nothing at all within the timeout
        await send_error(conn, transport, 408, "request timed out")
        return
    if first == b"" and not transport.secure:
        return  # connected and closed without a request
    idle = False
    while True:
        try:
            request = await read_request(conn, transport, request_timeout, max_body, peer, idle)
        except Reject as exc:
            await send_error(conn, transport, exc.status, exc.detail)
            return
        if request is None:
            return
        response = await _call(routes, request)
        if response.status == 101 and response.upgrade is not None:
            await switch_protocols(conn, transport, response, writer.get_extra_info("peername"))
            return
        await write_response(conn, transport, request, response)
        if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
            return
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            return
        conn.start_next_cycle()
        idle = True


async def _call(routes: Dispatcher, request: Request) -> Response:
    try:
        result = routes.dispatch(request)
        if inspect.isawaitable(result):
            result = await result
        return result
    except Exception:
        log.exception("admin route %s %s failed", request.method, request.path)
        return json_response(500, {"error": "internal error"})
