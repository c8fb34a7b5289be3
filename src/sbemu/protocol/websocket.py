"""AMQP over WebSockets as Service Bus serves it: the handshake check and the framing (sans-IO).

Service Bus takes AMQP over WebSockets on ``/$servicebus/websocket`` with the subprotocol
``AMQPWSB10``; every WebSocket message is binary and carries the same AMQP bytes a TCP
connection would (frames may span messages and messages may hold several frames), so the bytes
go to the same sans-IO :class:`~sbemu.protocol.connection.AmqpConnection` as TCP's.

The WebSocket framing (masking, fragmentation, ping/pong, the close handshake, RFC 6455's
protocol errors) is wsproto's, a sans-IO library from the h11 authors: this module only decides
whether an upgrade request is one we serve and turns wsproto's events into AMQP bytes. The HTTP
request itself was already parsed by the admin port's h11 server (sbemu.admin.http), which
writes the 101 answer built here.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import generate_accept_token

__all__ = [
    "PATH",
    "SUBPROTOCOL",
    "HandshakeRefused",
    "WebSocketFraming",
    "WebSocketInput",
    "accept_headers",
]

PATH = "/$servicebus/websocket"
SUBPROTOCOL = "AMQPWSB10"
# The OASIS AMQP WebSocket binding's name for the same thing; some generic AMQP clients send it.
OASIS_SUBPROTOCOL = "amqp"
WEBSOCKET_VERSION = "13"  # [RFC 6455 4.1]


class HandshakeRefused(Exception):
    """An upgrade request we do not serve: answered with ``status`` and these headers."""

    def __init__(self, status: int, detail: str, headers: tuple[tuple[str, str], ...] = ()):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers


def _tokens(value: str | None) -> list[str]:
    return [t.strip() for t in (value or "").split(",") if t.strip()]


def _valid_key(key: str) -> bool:
    """[RFC 6455 4.1] "a nonce consisting of a randomly selected 16-byte value that has been
    base64-encoded": 24 characters of base64 that decode to 16 bytes."""
    if len(key) != 24:
        return False
    try:
        return len(base64.b64decode(key, validate=True)) == 16
    except (binascii.Error, ValueError):
        return False


def accept_headers(headers: Mapping[str, str], http_version: str = "1.1") -> list[tuple[str, str]]:
    """The 101 answer's headers for a WebSocket upgrade request (lower-cased header names);
    raises HandshakeRefused for a request that is not one [RFC 6455 4.2.1]."""
    if http_version != "1.1":
        # [RFC 6455 4.2.1] "An HTTP/1.1 or higher GET request": an HTTP/1.0 upgrade is refused
        raise HandshakeRefused(400, "a WebSocket upgrade needs HTTP/1.1")
    if "websocket" not in (t.lower() for t in _tokens(headers.get("upgrade"))):
        raise HandshakeRefused(
            426,
            f"{PATH} speaks AMQP over WebSockets only: send an Upgrade: websocket request",
            (("Upgrade", "websocket"), ("Connection", "Upgrade")),
        )
    if "upgrade" not in (t.lower() for t in _tokens(headers.get("connection"))):
        raise HandshakeRefused(400, "a WebSocket upgrade needs Connection: Upgrade")
    if headers.get("sec-websocket-version", "").strip() != WEBSOCKET_VERSION:
        raise HandshakeRefused(
            426,
            "unsupported WebSocket version: use 13",
            (("Sec-WebSocket-Version", WEBSOCKET_VERSION),),
        )
    key = headers.get("sec-websocket-key", "").strip()
    if not key:
        raise HandshakeRefused(400, "a WebSocket upgrade needs Sec-WebSocket-Key")
    if not _valid_key(key):
        raise HandshakeRefused(
            400, "Sec-WebSocket-Key must be the base64 encoding of 16 bytes [RFC 6455 4.1]"
        )
    offered = _tokens(headers.get("sec-websocket-protocol"))
    if SUBPROTOCOL in offered:
        chosen = SUBPROTOCOL
    elif OASIS_SUBPROTOCOL in offered:
        chosen = OASIS_SUBPROTOCOL
    else:
        raise HandshakeRefused(
            400,
            f"AMQP over WebSockets needs the subprotocol {SUBPROTOCOL} "
            f"(Sec-WebSocket-Protocol); offered: {', '.join(offered) or 'none'}",
        )
    return [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Accept", generate_accept_token(key.encode("ascii", "replace")).decode()),
        ("Sec-WebSocket-Protocol", chosen),
    ]


@dataclass
class WebSocketInput:
    """What a read produced: AMQP bytes for the connection, and whether the WebSocket ended."""

    amqp: list[bytes] = field(default_factory=list)
    closed: bool = False


class WebSocketFraming:
    """One accepted WebSocket (server side, after the 101): bytes in, AMQP bytes out and back."""

    def __init__(self, trailing_data: bytes = b"") -> None:
        self._ws = Connection(ConnectionType.SERVER, extensions=[], trailing_data=b"")
        self._out = bytearray()
        self._pending = trailing_data  # bytes that followed the request head

    def receive_data(self, data: bytes | None) -> WebSocketInput:
        """Feed what the socket read (None at EOF); ``data_to_send`` has any answer to write."""
        result = WebSocketInput()
        if self._pending:
            data, self._pending = self._pending + (data or b""), b""
        if self._ws.state is ConnectionState.CLOSED:
            result.closed = True
            return result
        self._ws.receive_data(data)
        for event in self._ws.events():
            if isinstance(event, BytesMessage):
                if event.data:
                    result.amqp.append(bytes(event.data))
            elif isinstance(event, TextMessage):
                # [AMQPWSB10] binary messages only: a text message is a peer's mistake
                self._close(CloseReason.UNSUPPORTED_DATA, "AMQP over WebSockets is binary only")
                result.closed = True
                break
            elif isinstance(event, Ping):
                if self._ws.state is ConnectionState.OPEN:
                    self._out += self._ws.send(event.response())
            elif isinstance(event, CloseConnection):
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    self._out += self._ws.send(event.response())  # the peer's close, answered
                else:  # a frame wsproto could not parse [RFC 6455 7.1.7]: close with its code
                    self._close(event.code, event.reason or "")
                result.closed = True
                break
        if data is None:
            result.closed = True
        return result

    def send(self, amqp: bytes) -> None:
        """Queue AMQP bytes as one binary message (dropped once the WebSocket is closing)."""
        if amqp and self._ws.state is ConnectionState.OPEN:
            self._out += self._ws.send(BytesMessage(data=amqp))

    def close(self, code: int = CloseReason.NORMAL_CLOSURE, reason: str = "") -> None:
        """Start the close handshake (the server's side of an AMQP close)."""
        self._close(code, reason)

    def _close(self, code: int, reason: str) -> None:
        if self._ws.state is ConnectionState.OPEN:
            self._out += self._ws.send(CloseConnection(code=code, reason=reason[:120]))

    def data_to_send(self) -> bytes:
        """Bytes to write to the socket (empty when there are none)."""
        out = bytes(self._out)
        self._out.clear()
        return out
