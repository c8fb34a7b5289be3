"""The admin port's HTTP/1.1 server: h11 (sans-IO) parsing, keep-alive, bodies, TLS on the same port.

What belongs here: the admin side's only socket code. It reads requests defensively, hands each
to the route table (sbemu.admin.routes) as a :class:`Request`, and writes the :class:`Response`
(``Content-Length`` bodies, or a chunked ``stream`` such as server-sent events). What does not:
the routes themselves (server, Atom API, dashboard), which never see sockets.

One port serves both plain HTTP (``/health``, curl, the .NET admin client) and HTTPS (the Python
and JS admin clients always speak TLS): a connection whose first byte is ``0x16`` (a TLS
handshake record) is wrapped with the server's ``ssl.SSLContext`` through ``ssl.MemoryBIO``.

Guards: each header line is capped at 8 KiB and the head at 100 header lines (431), bodies at
``max_body`` bytes (413); the head and body of a request must arrive within ``request_timeout``
seconds (408), an idle keep-alive connection is closed after ``KEEP_ALIVE_TIMEOUT``; anything h11
refuses, methods that are not upper-case tokens and versions other than HTTP/1.0 and 1.1 get 400;
no route gives 404 (405 with ``Allow`` when the path exists for other methods). A route that raises
gives 500 and is logged; the listener keeps serving.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import h11

__all__ = [
    "AdminServer",
    "Dispatcher",
    "Handler",
    "HttpService",
    "Request",
    "Response",
    "json_response",
    "start_admin",
    "text_response",
    "UpgradedStream",
]

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 8 * 1024
MAX_HEADER_LINES = 100
MAX_HEAD_BYTES = 16 * 1024
DEFAULT_MAX_BODY = 4 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT = 5.0  # seconds for one request's head and body
KEEP_ALIVE_TIMEOUT = 60.0  # seconds an idle keep-alive connection stays open
WRITE_TIMEOUT = 5.0  # seconds to hand a response to a slow reader
READ_CHUNK = 64 * 1024
TLS_HANDSHAKE = 0x16
AMQP_HEADER = b"AMQP"  # every AMQP connection's first bytes [AMQP 2.2]

_METHOD = re.compile(r"[A-Z]{1,16}\Z")


@dataclass
class Request:
    method: str  # "GET", "PUT", ...
    path: str  # percent-decoded path, e.g. "/myqueue/Subscriptions/s1"
    query: dict[str, list[str]]  # parsed query string
    headers: dict[str, str]  # lower-cased names
    body: bytes
    peer: str  # "127.0.0.1:54321"
    secure: bool  # came over TLS
    # who made it and how they proved it (sbemu.admin.policy.Grant), set by the route table
    # after the access policy allowed it
    grant: Any = None
    http_version: str = "1.1"  # "1.0" or "1.1" (a WebSocket upgrade needs 1.1)


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)  # content-type etc.
    stream: AsyncIterator[bytes] | None = None  # when set: streamed (chunked) after headers
    # status 101: after the head, the connection is handed to this (a WebSocket, for example)
    upgrade: Callable[[UpgradedStream], Awaitable[None]] | None = None


Handler = Callable[[Request, dict[str, str]], "Response | Awaitable[Response]"]


def json_response(status: int, obj: object) -> Response:
    body = json.dumps(obj, separators=(",", ":"), default=str).encode()
    return Response(status, body, [("Content-Type", "application/json")])


def text_response(
    status: int, text: str, content_type: str = "text/plain; charset=utf-8"
) -> Response:
    return Response(status, text.encode(), [("Content-Type", content_type)])


class Dispatcher(Protocol):
    """What the listener serves: sbemu.admin.routes.HttpRoutes (the route table, which applies
    the access policy before any handler runs)."""

    def dispatch(self, request: Request) -> Response | Awaitable[Response]: ...


# ----------------------------------------------------------------------------------- transports
class UpgradedStream:
    """A connection after a 101 answer, for the protocol it switched to: ``leftover`` holds the
    bytes that followed the request head, ``recv()`` reads more (b"" at the end), ``write()``
    queues bytes without waiting, ``close()`` ends it."""

    def __init__(self, transport: _Plain | _Tls, leftover: bytes, peer: tuple[str, int] | None):
        self._transport = transport
        self.leftover = leftover
        self.peer = peer
        self.secure = transport.secure

    async def recv(self) -> bytes:
        return await self._transport.recv()

    def write(self, data: bytes) -> None:
        self._transport.write_nowait(data)

    def write_buffer_size(self) -> int:
        """Bytes written but not yet handed to the socket."""
        return self._transport.write_buffer_size()

    async def drain(self) -> None:
        """Wait until the socket took the written bytes (down to asyncio's low-water mark)."""
        await self._transport.drain()

    def close(self) -> None:
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class _Plain:
    """The stream as it is: plain TCP, or TLS that the listener's transport already did."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes):
        self._reader = reader
        self._writer = writer
        self._pending = first
        self.secure = writer.get_extra_info("sslcontext") is not None

    async def recv(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        return await self._reader.read(READ_CHUNK)

    def unread(self, data: bytes) -> None:
        """The next recv() returns ``data`` first."""
        self._pending = data

    async def send(self, data: bytes) -> None:
        if self._writer.is_closing():  # the peer went away mid-response: uvloop raises
            raise ConnectionResetError("the admin client closed the connection")
        self._writer.write(data)
        await asyncio.wait_for(self._writer.drain(), WRITE_TIMEOUT)

    def write_nowait(self, data: bytes) -> None:
        if not self._writer.is_closing():  # a dropped peer: uvloop raises on a closed handle
            self._writer.write(data)

    def write_buffer_size(self) -> int:
        return self._writer.transport.get_write_buffer_size()

    async def drain(self) -> None:
        await self._writer.drain()

    def close(self) -> None:
        self._writer.close()

    def is_closing(self) -> bool:
        return self._writer.is_closing()


class _Tls:
    """TLS over the stream through memory BIOs (the sniffed first bytes are fed in first)."""

    secure = True

    def __init__(
        self,
        ctx: ssl.SSLContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        first: bytes,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._in.write(first)
        self._obj = ctx.wrap_bio(self._in, self._out, server_side=True)
        self._pending = b""  # decrypted bytes read ahead (unread)

    def unread(self, data: bytes) -> None:
        """The next recv() returns ``data`` first (what _serve read to tell AMQP from HTTP)."""
        self._pending = data

    async def _flush(self) -> None:
        data = self._out.read()
        if data:
            self._writer.write(data)
            await asyncio.wait_for(self._writer.drain(), WRITE_TIMEOUT)

    async def _fill(self) -> bool:
        data = await self._reader.read(READ_CHUNK)
        if not data:
            self._in.write_eof()
            return False
        self._in.write(data)
        return True

    async def handshake(self) -> None:
        while True:
            try:
                self._obj.do_handshake()
                await self._flush()
                return
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise ConnectionResetError("peer closed during the TLS handshake") from None

    async def recv(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        while True:
            try:
                return self._obj.read(READ_CHUNK)
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    return b""
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def send(self, data: bytes) -> None:
        self._obj.write(data)
        await self._flush()

    def write_nowait(self, data: bytes) -> None:
        self._obj.write(data)
        if not self._writer.is_closing():  # a dropped peer: uvloop raises on a closed handle
            self._writer.write(self._out.read())

    def write_buffer_size(self) -> int:
        return self._writer.transport.get_write_buffer_size()

    async def drain(self) -> None:
        await self._writer.drain()

    def close(self) -> None:
        """Send close_notify and close; after the socket failed (a write met a reset peer),
        only close: writing to the dead transport raised, and the upgraded connection's end
        logged a traceback."""
        if not self._writer.is_closing():
            try:
                self._obj.unwrap()  # close_notify
            except ssl.SSLError:
                pass
            self._writer.write(self._out.read())
        self._writer.close()

    def is_closing(self) -> bool:
        return self._writer.is_closing()


# ------------------------------------------------------------------------------------ the server
class _Reject(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


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
            # The connection's own task was cancelled under it (seen once, mid-drain, as an
            # SDK admin client hung up): the connection is over, nothing else is. Ending the
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
    server = await asyncio.start_server(service.on_connection, host, port, reuse_address=True)
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
    transport: _Plain | _Tls
    if first and first[0] == TLS_HANDSHAKE and ssl_context is not None:
        transport = _Tls(ssl_context, reader, writer, first)
        await asyncio.wait_for(transport.handshake(), request_timeout)
        first = b""
        if service.amqp is not None:  # what the TLS carries: AMQP (AMQPS) or HTTP (HTTPS)
            first = await asyncio.wait_for(transport.recv(), request_timeout)
            transport.unread(first)
    else:
        transport = _Plain(reader, writer, first or b"")
    if first and first.startswith(AMQP_HEADER) and service.amqp is not None:
        transport.unread(b"")
        address = peername if isinstance(peername, tuple) else None
        await service.amqp(UpgradedStream(transport, first, address))
        return
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    if first is None:  # nothing at all within the timeout
        await _send_error(conn, transport, 408, "request timed out")
        return
    if first == b"" and not transport.secure:
        return  # connected and closed without a request
    idle = False
    while True:
        try:
            request = await _read_request(conn, transport, request_timeout, max_body, peer, idle)
        except _Reject as exc:
            await _send_error(conn, transport, exc.status, exc.detail)
            return
        if request is None:
            return
        response = await _call(routes, request)
        if response.status == 101 and response.upgrade is not None:
            await _switch_protocols(conn, transport, response, writer.get_extra_info("peername"))
            return
        await _write_response(conn, transport, request, response)
        if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
            return
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            return
        conn.start_next_cycle()
        idle = True


async def _next_event(conn: h11.Connection, transport: _Plain | _Tls) -> object:
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            if status == 400 and "exceeds" in str(exc).lower():
                status = 431
            raise _Reject(status, "bad request: " + str(exc)) from None
        if event is h11.NEED_DATA:
            data = await transport.recv()
            if not data and conn.their_state is h11.IDLE and not conn.trailing_data[0]:
                return None
            conn.receive_data(data)
            continue
        return event


async def _read_request(
    conn: h11.Connection,
    transport: _Plain | _Tls,
    timeout: float,
    max_body: int,
    peer: str,
    idle: bool,
) -> Request | None:
    if idle and not conn.trailing_data[0]:
        # wait for the next request's first bytes without the request clock running
        try:
            data = await asyncio.wait_for(transport.recv(), KEEP_ALIVE_TIMEOUT)
        except asyncio.TimeoutError:
            return None
        if not data:
            return None
        conn.receive_data(data)
    try:
        return await asyncio.wait_for(_read_request_now(conn, transport, max_body, peer), timeout)
    except asyncio.TimeoutError:
        raise _Reject(408, "request timed out") from None


async def _read_request_now(
    conn: h11.Connection, transport: _Plain | _Tls, max_body: int, peer: str
) -> Request | None:
    event = await _next_event(conn, transport)
    if event is None or isinstance(event, h11.ConnectionClosed):
        if conn.their_state is h11.SEND_BODY:
            raise _Reject(400, "request ended early")
        return None
    if not isinstance(event, h11.Request):
        raise _Reject(400, "expected a request")
    raw_target = event.target.decode("latin-1")
    method = event.method.decode("ascii", "replace")
    if not _METHOD.match(method):
        raise _Reject(400, "malformed method")
    if event.http_version not in (b"1.0", b"1.1"):
        raise _Reject(400, "unsupported HTTP version")
    http_version = event.http_version.decode("ascii")
    if len(event.headers) > MAX_HEADER_LINES:
        raise _Reject(431, "too many header lines")
    headers: dict[str, str] = {}
    for name, value in event.headers:
        if len(name) + len(value) + 2 > MAX_LINE_BYTES:
            raise _Reject(431, "header line too long")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    length = headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body:
        raise _Reject(413, f"request body over {max_body} bytes")
    if conn.they_are_waiting_for_100_continue:
        await transport.send(
            conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
        )
    body = bytearray()
    while True:
        event = await _next_event(conn, transport)
        if event is None or isinstance(event, h11.ConnectionClosed):
            raise _Reject(400, "request ended early")
        if isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_body:
                raise _Reject(413, f"request body over {max_body} bytes")
        elif isinstance(event, h11.EndOfMessage):
            break
    target = urlsplit(raw_target)
    return Request(
        method=method,
        path=unquote(target.path) or "/",
        query=parse_qs(target.query, keep_blank_values=True),
        headers=headers,
        body=bytes(body),
        peer=peer,
        secure=transport.secure,
        http_version=http_version,
    )


async def _call(routes: Dispatcher, request: Request) -> Response:
    try:
        result = routes.dispatch(request)
        if inspect.isawaitable(result):
            result = await result
        return result
    except Exception:
        log.exception("admin route %s %s failed", request.method, request.path)
        return json_response(500, {"error": "internal error"})


async def _switch_protocols(
    conn: h11.Connection, transport: _Plain | _Tls, response: Response, peer: object
) -> None:
    """Answer 101 and hand the connection to ``response.upgrade`` until it is done."""
    assert response.upgrade is not None
    if conn.their_state is not h11.MIGHT_SWITCH_PROTOCOL:
        # no Upgrade header (h11 saw none): the route's 101 cannot stand
        await _write_response(
            conn,
            transport,
            Request("GET", "", {}, {}, b"", "", False),
            json_response(400, {"error": "expected an Upgrade request"}),
        )
        return
    head = h11.InformationalResponse(
        status_code=101, headers=response.headers, reason=b"Switching Protocols"
    )
    await transport.send(conn.send(head) or b"")
    leftover, _ = conn.trailing_data
    address = peer if isinstance(peer, tuple) else None
    await response.upgrade(UpgradedStream(transport, bytes(leftover), address))


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


async def _write_response(
    conn: h11.Connection, transport: _Plain | _Tls, request: Request, response: Response
) -> None:
    headers = [(k, v) for k, v in response.headers if k.lower() not in ("content-length",)]
    names = {k.lower() for k, _ in headers}
    if "cache-control" not in names:
        headers.append(("Cache-Control", "no-store"))
    if response.stream is None:
        headers.append(("Content-Length", str(len(response.body))))
    head = h11.Response(
        status_code=response.status, headers=headers, reason=_phrase(response.status)
    )
    await transport.send(conn.send(head) or b"")
    if request.method == "HEAD":
        await transport.send(conn.send(h11.EndOfMessage()) or b"")
        return
    if response.stream is not None:
        try:
            async for chunk in response.stream:
                if chunk:
                    await transport.send(conn.send(h11.Data(data=chunk)) or b"")
        finally:
            aclose = getattr(response.stream, "aclose", None)
            if aclose is not None:
                await aclose()
    elif response.body:
        await transport.send(conn.send(h11.Data(data=response.body)) or b"")
    await transport.send(conn.send(h11.EndOfMessage()) or b"")


async def _send_error(
    conn: h11.Connection, transport: _Plain | _Tls, status: int, detail: str
) -> None:
    """Answer a request we could not read, then close."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = json.dumps({"error": detail}).encode()
    try:
        data = conn.send(
            h11.Response(
                status_code=status,
                headers=[
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(body))),
                    ("Connection", "close"),
                ],
                reason=_phrase(status),
            )
        )
    except h11.LocalProtocolError:
        # h11 refuses a response before it saw a request head: write it by hand
        data = (
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (status, _phrase(status), len(body))
        )
        await transport.send(data + body)
        return
    await transport.send((data or b"") + body)
