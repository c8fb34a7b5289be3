"""AMQP over a stream the admin HTTP server accepted and upgraded: a WebSocket (ws, wss) or
AMQP straight over an HTTP port (StreamFraming). The listener's other door, beside its TCP
Protocol: the same AmqpProtocol (and sans-IO AmqpConnection) is fed the payloads of binary
messages through a transport of our own (_WebSocketTransport), which frames what it writes
and pauses the protocol while the socket's buffer is over WS_HIGH_WATER.

With the listener, the only protocol module that touches sockets (through the admin server's
streams) and the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from .listener import AmqpProtocol
from .websocket import WebSocketFraming, WebSocketInput

log = logging.getLogger("sbemu.listener")  # one logger for every AMQP socket, TCP or upgraded


class ByteStream(Protocol):
    """An accepted connection after its HTTP upgrade (sbemu.admin.http.UpgradedStream)."""

    leftover: bytes
    peer: tuple[str, int] | None
    secure: bool  # TLS under the WebSocket (wss)

    async def recv(self) -> bytes: ...

    def write(self, data: bytes) -> None: ...

    def write_buffer_size(self) -> int: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool: ...


# Above this many bytes waiting for the socket, the AMQP side is told to pause writing (as
# asyncio's transports do at their high-water mark), so a large delivery is framed slice by
# slice (listener.WRITE_SLICE) as the peer reads, not all at once into the write buffer.
WS_HIGH_WATER = 256 * 1024
# Seconds a closing WebSocket waits for the peer's close frame before the socket is dropped.
# Closing the socket at once, right after the AMQP close, could reset the connection before the
# peer read that close (a client then reports a socket error instead of the server's reason).
WS_CLOSE_GRACE = 5.0


class _WebSocketTransport:
    """What AmqpProtocol uses of an asyncio transport, carried in WebSocket binary messages."""

    def __init__(
        self,
        stream: ByteStream,
        framing: WebSocketFraming | StreamFraming,
        protocol: AmqpProtocol,
    ) -> None:
        self._stream = stream
        self._framing = framing
        self._protocol = protocol
        self.reading = asyncio.Event()
        self.reading.set()
        self._closing = False
        self._draining: asyncio.Task[None] | None = None
        self._drop: asyncio.TimerHandle | None = None

    def write(self, data: bytes) -> None:
        self._framing.send(data)
        self._write_out()

    async def _drain(self) -> None:
        try:
            await self._stream.drain()
        except (ConnectionError, OSError):
            return  # the connection is going: the read loop ends it
        finally:
            self._draining = None
        if not self._closing:
            self._protocol.resume_writing()

    def _write_out(self) -> None:
        """Write what the framing has (AMQP, pongs, close answers); past WS_HIGH_WATER the
        protocol pauses (no reading, no producing) until the socket drained."""
        out = self._framing.data_to_send()
        if out and not self._stream.is_closing():
            self._stream.write(out)
        if (
            self._draining is None
            and not self._closing
            and self._stream.write_buffer_size() > WS_HIGH_WATER
        ):
            self._protocol.pause_writing()
            self._draining = asyncio.ensure_future(self._drain())

    def get_write_buffer_size(self) -> int:
        return self._stream.write_buffer_size()

    def close(self) -> None:
        """The AMQP side is done: send the WebSocket close; the socket goes when the peer
        answers it (serve_websocket's loop ends) or after WS_CLOSE_GRACE [RFC 6455 7.1.1]."""
        if self._closing:
            return
        self._closing = True
        self._framing.close()
        self._write_out()
        if self._draining is not None:
            self._draining.cancel()
        self.reading.set()  # keep reading for the peer's close frame, paused or not
        self._drop = asyncio.get_running_loop().call_later(WS_CLOSE_GRACE, self.abort)

    def abort(self) -> None:
        """Drop the socket now."""
        self._closing = True
        if self._drop is not None:
            self._drop.cancel()
            self._drop = None
        self._stream.close()

    def is_closing(self) -> bool:
        return self._closing or self._stream.is_closing()

    def pause_reading(self) -> None:
        self.reading.clear()

    def resume_reading(self) -> None:
        self.reading.set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._stream.peer
        if name == "websocket":  # the transport kind the dashboard shows
            if isinstance(self._framing, StreamFraming):
                return "amqps" if self._stream.secure else "amqp"
            return "wss" if self._stream.secure else "ws"
        return default


class StreamFraming:
    """No framing at all: AMQP straight over a stream the admin HTTP server accepted, when its
    first bytes (in TLS or not) were AMQP's header (AMQPS on a port that also answers HTTPS,
    sbemu.runtime.endpoints); it runs through the same loop as a WebSocket."""

    def __init__(self, leftover: bytes = b"") -> None:
        self._pending = leftover
        self._out = bytearray()
        self._closing = False

    def receive_data(self, data: bytes | None) -> WebSocketInput:
        result = WebSocketInput()
        if self._pending:
            data, self._pending = self._pending + (data or b""), b""
        if data:
            result.amqp.append(data)
        result.closed = data is None
        return result

    def send(self, amqp: bytes) -> None:
        if not self._closing:
            self._out += amqp

    def close(self) -> None:
        self._closing = True  # the AMQP close went out; the peer drops the socket

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out


async def serve_stream(stream: ByteStream, protocol: AmqpProtocol) -> None:
    """Run one AMQP connection straight over ``stream`` (see StreamFraming)."""
    await serve_websocket(stream, protocol, StreamFraming(stream.leftover))


async def serve_websocket(
    stream: ByteStream,
    protocol: AmqpProtocol,
    framing: WebSocketFraming | StreamFraming | None = None,
) -> None:
    """Run one AMQP connection over an upgraded WebSocket until either side ends it: the same
    AmqpProtocol (and sans-IO AmqpConnection) as TCP, fed the payloads of binary messages."""
    if framing is None:
        framing = WebSocketFraming(stream.leftover)
    transport = _WebSocketTransport(stream, framing, protocol)
    protocol.connection_made(transport)  # type: ignore[arg-type]  # the transport's duck type
    data: bytes | None = b""
    try:
        while True:
            received = framing.receive_data(data)
            transport._write_out()  # pongs and close answers
            if not transport.is_closing():  # after our close, only the peer's close matters
                for amqp in received.amqp:
                    protocol.data_received(amqp)
            if received.closed or data is None:
                break
            await transport.reading.wait()
            data = await stream.recv() or None
    except (ConnectionError, OSError) as exc:
        log.debug("WebSocket connection dropped: %r", exc)
    finally:
        protocol.connection_lost(None)
        transport.close()  # the WebSocket close, if the peer's came first
        transport.abort()
