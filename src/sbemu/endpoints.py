"""The ways in besides plain AMQP: AMQPS on the TLS port, AMQP over WebSockets.

- **AMQPS** (``--tls-port``, default 5671, what an SDK uses for a connection string without
  ``UseDevelopmentEmulator``): TLS with the local CA's certificate (sbemu.admin.certs), done by
  asyncio; the AMQP connection behind it is the same AmqpProtocol as on the plain port.
- **WebSockets** (path ``/$servicebus/websocket``, subprotocol ``AMQPWSB10``): an upgrade
  request on the admin port (``ws`` or ``wss``: that port tells TLS from HTTP by the first byte)
  or on the WebSocket port (``--ws-port``, default 443, where the SDKs look by default). The
  admin HTTP server answers 101 and hands the connection to protocol.listener.serve_websocket,
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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .admin.access import Access
from .admin.http import AdminServer, Request, Response, json_response, start_admin
from .admin.policy import AMQP, AccessPolicy
from .admin.routes import HttpRoutes
from .protocol.listener import AmqpProtocol, ByteStream, serve_websocket
from .protocol.websocket import PATH, HandshakeRefused, accept_headers

__all__ = [
    "PATH",
    "EndpointError",
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
        )
    except OSError as exc:
        hint = "serving without AMQPS (--tls-port P or 0 picks another port, off hides this)"
        return None, _unbound("AMQPS", host, port, exc, hint)
    return server, None


async def start_websocket_port(
    host: str, port: ListenPort, handler: Callable[..., Any], context: ssl.SSLContext
) -> tuple[AdminServer | None, str | None]:
    """Listen for ws and wss on a port of its own (only the WebSocket path is served there)."""
    # one route, whose rule is "AMQP authenticates itself" (SAS in $cbs, as over TCP): the
    # same policy as the admin port's (sbemu.admin.policy), with nothing else to decide here
    routes = HttpRoutes(AccessPolicy(host, [], Access(host, []), time.time))
    routes.add("GET", PATH, handler, rule=AMQP)
    try:
        server = await start_admin(host, port.number, routes, ssl_context=context)
    except OSError as exc:
        hint = (
            "serving WebSockets on the admin port only (--ws-port P or 0 picks another "
            "port, off hides this)"
        )
        return None, _unbound("WebSockets", host, port, exc, hint)
    return server, None
