"""A TLS front for sbemu's plain AMQP port, while sbemu has no TLS listener of its own.

The SDK's messaging tests connect without ``UseDevelopmentEmulator``, so with TLS on port 5671.
Until sbemu serves ``amqps`` itself (``serve --tls-port``, issue 26), the harness terminates TLS
on ``127.0.0.1:5671`` (and ``[::1]:5671``) with a certificate from the run's local CA and
forwards the bytes unchanged to sbemu's plain AMQP port. ``servers.start_shared`` uses it only
when ``sbemu serve --help`` lists no ``--tls-port``, and says so in the run's output.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import tempfile
import threading
from pathlib import Path

from sbemu.admin.certs import CA_FILE, ensure_certificates

CHUNK = 64 * 1024


class TlsFront:
    """Accepts TLS on ``port``, forwards each connection to ``127.0.0.1:target_port``."""

    def __init__(self, ca_folder: Path, port: int, target_port: int) -> None:
        self.port = port
        self.target_port = target_port
        data = Path(tempfile.mkdtemp(prefix="tls-front-"))
        (data / "tls").mkdir()
        for file in (CA_FILE, "rootCA-key.pem"):
            shutil.copy2(ca_folder / file, data / "tls" / file)
        _, cert, key = ensure_certificates(data)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.loop = asyncio.new_event_loop()
        self.servers: list[asyncio.AbstractServer] = []
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="tls-front", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self.ready.wait(30)
        if self.error is not None:
            raise RuntimeError(f"TLS front on port {self.port}: {self.error}") from self.error

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._listen())
        except BaseException as exc:  # reported by start()
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()

    async def _listen(self) -> None:
        self.servers.append(await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, ssl=self.context, reuse_address=True))
        with contextlib.suppress(OSError):  # no IPv6 loopback on this machine
            self.servers.append(await asyncio.start_server(
                self._serve, "::1", self.port, ssl=self.context, reuse_address=True))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer),
                             return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
            writer.close()
