"""The ways in: what each port serves, AMQPS on the TLS port, AMQP over WebSockets.

- **Every AMQP port** (``--port``, a namespace's ``AmqpPort``, the AMQPS port) tells its
  clients apart by the first byte (:class:`FirstByte`): ``A`` (the AMQP header) goes to the AMQP
  connection, for the life of the socket and at no cost per frame; anything else (a TLS record,
  0x16, or an HTTP request) to the HTTP server of Azure's 443 (the management API and AMQP over
  WebSockets, sbemu.admin.site), which serves AMQP too when the TLS carries it (AMQPS on any
  port: :func:`amqp_stream_handler`). So an admin client given the printed connection string, which
  speaks HTTPS to the endpoint's host and port whatever the emulator flag says (Python 7.15, JS
  7.9, Java, Go 1.11), finds the management API on whichever port that string names.

- **AMQPS** (``--tls-port``, default 5671, what an SDK uses for a connection string without
  ``UseDevelopmentEmulator``): TLS with the local CA's certificate (sbemu.admin.certs), done by
  asyncio; the AMQP connection behind it is the same AmqpProtocol as on the plain port.
- **WebSockets** (path ``/$servicebus/websocket``, subprotocol ``AMQPWSB10``): an upgrade
  request on the admin port (``ws`` or ``wss``: that port tells TLS from HTTP by the first byte)
  or on the WebSocket port (``--ws-port``, default 443, where the SDKs look by default; like
  Azure's 443 it serves the management API too). The
  admin HTTP server answers 101 and hands the connection to protocol.wslistener.serve_websocket,
  which feeds the same AmqpProtocol. No HTTP-level authentication: the AMQP connection
  authenticates itself with SAS on ``$cbs``, as on every other port, so any page origin may
  connect (a browser app is the point; a page without a key gets nothing).

A default port that cannot be bound (in use, or 443 without the privilege) is skipped with a
warning and the server runs without it; a port asked for (flag or variable) that cannot be bound
stops the start, as for ``--port``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..admin.http import (
    LISTEN_BACKLOG,
    AdminServer,
    HttpService,
    Request,
    Response,
    json_response,
    start_admin,
)
from ..protocol.listener import AmqpProtocol
from ..protocol.websocket import PATH, HandshakeRefused, accept_headers
from ..protocol.wslistener import ByteStream, serve_stream, serve_websocket

__all__ = [
    "PATH",
    "EndpointError",
    "FirstByte",
    "amqp_stream_handler",
    "ListenPort",
    "start_amqps",
    "start_websocket_port",
    "websocket_handler",
]

log = logging.getLogger("sbemu.endpoints")

DEFAULT_TLS_PORT = 5671  # amqps [AMQP 5.2]; where the SDKs connect without the emulator flag
DEFAULT_WS_PORT = 443  # wss; where the SDKs' AmqpOverWebsocket transports connect


@dataclass(frozen=True)
class ListenPort:
    """A port to listen on: ``number`` 0 = any free port; ``required`` when the user asked for
    it (a flag or a variable): then failing to bind it stops the start."""

    number: int
    required: bool = True


class EndpointError(Exception):
    """A required port cannot be bound (one line for the user)."""


def websocket_handler(new_protocol: Callable[[], AmqpProtocol]) -> Callable[..., Response]:
    """The admin route for ``GET /$servicebus/websocket``: 101 and an AMQP connection, or the
    status that says why not (426 without an Upgrade, 400 without the AMQPWSB10 subprotocol)."""

    def handler(request: Request, params: dict[str, str]) -> Response:
        try:
            headers = accept_headers(request.headers, request.http_version)
        except HandshakeRefused as exc:
            response = json_response(exc.status, {"error": exc.detail})
            response.headers.extend(exc.headers)
            return response

        async def run(stream: ByteStream) -> None:
            await serve_websocket(stream, new_protocol())

        return Response(101, headers=headers, upgrade=run)

    return handler


TLS_FIRST = 0x16  # a TLS handshake record [RFC 8446 5.1]: AMQPS or HTTPS inside


def _is_http_or_tls(first: bytes) -> bool:
    """A TLS record, or an HTTP request line: its method is an upper-case token (RFC 9110 9.1)
    and none begins with "A", which begins every AMQP connection (b"AMQP") [AMQP 2.2]."""
    return first[0] == TLS_FIRST or (first.isupper() and first != b"A")


class FirstByte(asyncio.Protocol):
    """An AMQP port's accepted socket until its first byte says what it carries: AMQP (the
    socket is handed to an AmqpProtocol for good) or HTTP and TLS (to ``http``, the management
    API). A peer that sends nothing within ``timeout`` seconds is dropped, as a stuck handshake."""

    def __init__(
        self, new_amqp: Callable[[], AmqpProtocol], http: HttpService, timeout: float
    ) -> None:
        self._new_amqp = new_amqp
        self._http = http
        self._timeout = timeout
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self._timer = asyncio.get_running_loop().call_later(self._timeout, transport.close)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or not data:
            return
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()
        if _is_http_or_tls(data[:1]):
            self._http.adopt(transport, data)
        else:  # AMQP, or a header AMQP answers with its own before closing [AMQP 2.2]
            amqp = self._new_amqp()
            transport.set_protocol(amqp)
            amqp.connection_made(transport)
            amqp.data_received(data)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()


def amqp_stream_handler(
    new_protocol: Callable[[], AmqpProtocol],
) -> Callable[[ByteStream], Awaitable[None]]:
    """What the HTTP service does with a connection whose first bytes, inside TLS or not, are
    AMQP's header: AMQPS on 443 or on the AMQP port, served straight over the stream."""

    async def run(stream: ByteStream) -> None:
        await serve_stream(stream, new_protocol())

    return run


def _unbound(what: str, host: str, port: ListenPort, exc: OSError, hint: str) -> str:
    reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
    message = f"cannot listen on {host}:{port.number} ({what}): {reason}"
    if port.required:
        raise EndpointError(message) from exc
    log.warning("%s; %s", message, hint)
    return message


async def start_amqps(
    host: str,
    port: ListenPort,
    new_protocol: Callable[[], AmqpProtocol],
    context: ssl.SSLContext,
    handshake_timeout: float,
) -> tuple[asyncio.Server | None, str | None]:
    """Listen for AMQPS; (server, None), or (None, why) for a default port that cannot be bound."""
    loop = asyncio.get_running_loop()
    try:
        server = await loop.create_server(
            new_protocol,
            host,
            port.number,
            ssl=context,
            ssl_handshake_timeout=handshake_timeout,
            reuse_address=True,
            backlog=LISTEN_BACKLOG,
        )
    except OSError as exc:
        hint = "serving without AMQPS (--tls-port P or 0 picks another port, off hides this)"
        return None, _unbound("AMQPS", host, port, exc, hint)
    return server, None


async def start_websocket_port(
    host: str, port: ListenPort, service: HttpService
) -> tuple[AdminServer | None, str | None]:
    """Listen for HTTP and HTTPS on a port of its own: Azure's 443, where ``service`` answers
    WebSocket upgrades and the management API (sbemu.admin.site's ``management`` table)."""
    try:
        server = await start_admin(host, port.number, service.routes, service=service)
    except OSError as exc:
        hint = (
            "serving WebSockets on the admin port only (--ws-port P or 0 picks another "
            "port, off hides this)"
        )
        return None, _unbound("WebSockets", host, port, exc, hint)
    return server, None
