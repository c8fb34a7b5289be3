"""The connection's byte streams: plain TCP (or TLS the listener's transport already did), TLS
through memory BIOs over sniffed first bytes, and what an upgraded (101) connection is handed."""

from __future__ import annotations

import asyncio
import ssl

READ_CHUNK = 64 * 1024
WRITE_TIMEOUT = 5.0  # seconds to hand a response to a slow reader


class UpgradedStream:
    """A connection after a 101 answer, for the protocol it switched to: ``leftover`` holds the
    bytes that followed the request head, ``recv()`` reads more (b"" at the end), ``write()``
    queues bytes without waiting, ``close()`` ends it."""

    def __init__(
        self, transport: PlainStream | TlsStream, leftover: bytes, peer: tuple[str, int] | None
    ):
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


class PlainStream:
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


class TlsStream:
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
