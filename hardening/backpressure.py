"""A peer that does not read (issue 35): what the server holds for it, on every transport.

The peek probe: 100 x 200 KB messages in a queue; a client with ``SO_RCVBUF`` 4096 attaches a
``$management`` sender and receiver (credit 100,000), sends 12 settled
``com.microsoft:peek-message`` requests (from-sequence-number 0, message-count 100: 20 MB of
answer each) and never reads. The ping probe (WebSockets): pings sent until the socket takes no
more, pongs never read. Each measures the server's anonymous memory (RssAnon) while the peer is
stuck, against the same requests made by a peer that reads (its peak: the answers pass through
the server either way), and whether the server closes the stuck peer after
SBEMU_WRITE_STALL_TIMEOUT and keeps serving others.

    python -m hardening.backpressure [amqp amqps ws wss]   # prints the figures per transport
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from proton import Message, int32
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, Ping, Request

from . import amqpraw as raw
from .common import Server, make_config, queue_def, rss_anon_mb

__all__ = [
    "QUEUE", "TRANSPORTS", "Peer", "delivery_probe", "fill", "peek_probe", "ping_probe",
    "start_server",
]  # fmt: skip

QUEUE = "bpq"
TRANSPORTS = ("amqp", "amqps", "ws", "wss")
MESSAGES, MESSAGE_SIZE = 100, 200_000
REQUESTS = 12
STALL_TIMEOUT = 6.0  # SBEMU_WRITE_STALL_TIMEOUT for the probe's server
WS_PATH = "/$servicebus/websocket"
STALL_LOG = "the peer read nothing for"  # the server's warning when it closes a stuck peer


def start_server(workdir: Path, stall_timeout: float = STALL_TIMEOUT) -> Server:
    """A server with the probe's queue, closing stuck peers after `stall_timeout` s."""
    env = {"SBEMU_WRITE_STALL_TIMEOUT": str(stall_timeout)}
    return Server(workdir, make_config([queue_def(QUEUE, LockDuration="PT1M")]), env=env).start()


def fill(srv: Server, count: int = MESSAGES, size: int = MESSAGE_SIZE) -> None:
    """Put `count` messages of `size` bytes in the probe's queue."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with ServiceBusClient.from_connection_string(srv.conn_str) as client:
        with client.get_queue_sender(QUEUE) as sender:
            for _ in range(count):
                sender.send_messages(ServiceBusMessage(b"x" * size))


def anon_mb(srv: Server) -> float:
    """The server's anonymous resident memory in MB."""
    return rss_anon_mb(srv.pid)


class Peer:
    """A raw AMQP client over one transport (amqp, amqps, ws or wss) with a small receive
    buffer; reading is up to the caller."""

    def __init__(self, srv: Server, transport: str, rcvbuf: int | None = 4096) -> None:
        ready = srv.ready
        assert ready is not None
        port = {
            "amqp": ready.amqp_port,
            "amqps": ready.tls_port,
            "ws": ready.ws_port,
            "wss": ready.ws_port,
        }[transport]
        assert port, f"no port for {transport}"
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect: the window it advertises
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        if transport in ("amqps", "wss"):
            context = ssl.create_default_context(cafile=str(ready.ca_file))
            sock = context.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.ws: WSConnection | None = None
        self._input = b""
        if transport in ("ws", "wss"):
            self.ws = WSConnection(ConnectionType.CLIENT)
            self.sock.sendall(
                self.ws.send(Request(host="localhost", target=WS_PATH, subprotocols=["AMQPWSB10"]))
            )
            while not self._ws_events(self.sock.recv(65536), accepted=True):
                pass

    def _ws_events(self, data: bytes, accepted: bool = False) -> bool:
        assert self.ws is not None
        self.ws.receive_data(data or None)
        done = False
        for event in self.ws.events():
            if isinstance(event, AcceptConnection):
                done = True
            elif isinstance(event, BytesMessage):
                self._input += bytes(event.data)
            elif not accepted and isinstance(event, Ping):
                pass  # the server sends none
        return done if accepted else bool(data)

    def send(self, amqp: bytes) -> None:
        if self.ws is not None:
            amqp = self.ws.send(BytesMessage(data=amqp))
        self.sock.sendall(amqp)

    def read(self) -> int:
        """Read once; bytes of AMQP that arrived (0 at EOF)."""
        data = self.sock.recv(1 << 20)
        if not data:
            return 0
        if self.ws is None:
            self._input += data
            return len(data)
        before = len(self._input)
        self._ws_events(data)
        return max(1, len(self._input) - before)

    def frames_until(self, code: int, count: int = 1) -> list[raw.Frame]:
        """Read until `count` frames of performative `code` arrived."""
        while True:
            frames, _, _ = raw.parse(self._input)
            if sum(1 for f in frames if f.code == code) >= count:
                return frames
            if not self.read():
                raise ConnectionError(f"closed before {count} frames {code:#x}: {frames}")

    def close(self) -> None:
        self.sock.close()


def _peek_request(delivery_id: int) -> bytes:
    message = Message(
        id=str(uuid.uuid4()),
        reply_to="probe-replies",
        properties={"operation": "com.microsoft:peek-message", "server-timeout": int32(60000)},
        body={"from-sequence-number": 0, "message-count": int32(MESSAGES)},
    )
    return raw.transfer_frame(0, delivery_id, message.encode(), settled=True)


def open_management(peer: Peer) -> None:
    """SASL PLAIN, open, begin, a $management sender (handle 0) and receiver (handle 1) with
    credit 100,000."""
    peer.send(raw.handshake("plain"))
    peer.frames_until(raw.BEGIN)
    node = f"{QUEUE}/$management"
    peer.send(raw.attach_frame("probe-requests", 0, False, node, reply_address="probe-replies"))
    peer.send(raw.attach_frame("probe-replies", 1, True, node, reply_address="probe-replies"))
    peer.frames_until(raw.ATTACH, 2)
    peer.send(raw.flow_frame(1, credit=100_000))


def _wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process `pid` has used, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(srv: Server, limit: float, window: float = 0.5, busy: float = 0.02) -> bool:
    """Wait until the server used less than `busy` s of CPU over `window` s (it has done what
    it will do for a stuck peer: produced its one answer and freed the rest), at most `limit`
    s; True if it went idle. A fixed wait misjudges a loaded machine, where producing one
    20 MB answer can take seconds."""
    deadline = time.monotonic() + limit
    last = cpu_seconds(srv.pid)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = cpu_seconds(srv.pid)
        if now - last < busy:
            return True
        last = now
    return False


def _sample_peak(srv: Server, seconds: float, stop: Any = None) -> float:
    peak, deadline = 0.0, time.monotonic() + seconds
    while time.monotonic() < deadline and (stop is None or not stop()):
        peak = max(peak, anon_mb(srv))
        time.sleep(0.05)
    return max(peak, anon_mb(srv))


def peek_probe(
    srv: Server, transport: str, *, read: bool, requests: int = REQUESTS, settle: float = 1.0
) -> dict[str, Any]:
    """`requests` peek requests of 20 MB answers each, read or (`read` False) left unread by a
    peer with SO_RCVBUF 4096. The server's anonymous memory in MB: before, at its peak, and
    `held` (after the answers were read, or, for a stuck peer, once the server went idle: at
    least `settle` s after the requests); for a stuck peer, whether it went idle before the
    stall timeout and when the server closed it."""
    peer = Peer(srv, transport, rcvbuf=None if read else 4096)
    open_management(peer)
    time.sleep(0.3)
    before = anon_mb(srv)
    stalls = srv.stderr_text().count(STALL_LOG)
    started = time.monotonic()
    peer.send(b"".join(_peek_request(i) for i in range(requests)))
    out: dict[str, Any] = {"transport": transport, "read": read, "requests": requests}
    if read:
        want, got, peak = requests * MESSAGES * MESSAGE_SIZE, 0, before
        peer.sock.settimeout(30)
        while got < want:
            n = peer.read()
            if not n:
                raise ConnectionError(f"closed after {got} bytes of answers")
            got += n
            peak = max(peak, anon_mb(srv))
        held = anon_mb(srv)
    else:
        peak = _sample_peak(srv, settle)
        # held: once the server is idle, before the stall timeout closes the peer
        out["idle"] = wait_idle(srv, started + STALL_TIMEOUT - 1.2 - time.monotonic())
        # what stays: the least of 0.5 s of samples (a busy machine's single sample caught
        # temporaries the server frees and gives back on a later pass, +17 MB once in CI)
        samples = [anon_mb(srv)]
        for _ in range(10):
            time.sleep(0.05)
            samples.append(anon_mb(srv))
        peak, held = max(peak, *samples), min(samples)
        # stuck: the server closes it after its stall timeout, saying so
        closed = _wait_for(lambda: srv.stderr_text().count(STALL_LOG) > stalls, STALL_TIMEOUT * 3)
        out["closed_after_s"] = round(time.monotonic() - started, 1) if closed else None
    peer.close()
    out["before_mb"] = round(before, 1)
    out["peak_growth_mb"] = round(max(peak, held) - before, 1)
    out["held_growth_mb"] = round(held - before, 1)
    return out


def delivery_probe(srv: Server, transport: str = "amqp", settle: float = 3.0) -> dict[str, Any]:
    """A receiver with credit 100,000 on the queue of 100 x 200 KB messages, never reading:
    the server's anonymous memory (MB) before and held after `settle` s, and whether/when the
    server closed the peer."""
    peer = Peer(srv, transport)
    peer.send(raw.handshake("plain"))
    peer.frames_until(raw.BEGIN)
    peer.send(raw.attach_frame("probe-receiver", 0, True, QUEUE))
    peer.frames_until(raw.ATTACH)
    time.sleep(0.3)
    before = anon_mb(srv)
    stalls = srv.stderr_text().count(STALL_LOG)
    started = time.monotonic()
    peer.send(raw.flow_frame(0, credit=100_000))
    peak = _sample_peak(srv, settle)
    held = anon_mb(srv)
    closed = _wait_for(lambda: srv.stderr_text().count(STALL_LOG) > stalls, STALL_TIMEOUT * 3)
    peer.close()
    return {
        "transport": transport,
        "before_mb": round(before, 1),
        "peak_growth_mb": round(peak - before, 1),
        "held_growth_mb": round(held - before, 1),
        "closed_after_s": round(time.monotonic() - started, 1) if closed else None,
    }


def ping_probe(srv: Server, transport: str = "ws", limit: int = 61 << 20) -> dict[str, Any]:
    """Pings until `limit` bytes were sent or the socket took nothing for 2 s; pongs unread."""
    peer = Peer(srv, transport)
    assert peer.ws is not None
    open_management(peer)
    time.sleep(0.3)
    before = anon_mb(srv)
    ping = peer.ws.send(Ping(payload=b"p" * 100))
    burst = ping * 600
    sent = 0
    peer.sock.settimeout(2.0)
    try:
        while sent < limit:
            peer.sock.sendall(burst)
            sent += len(burst)
    except (TimeoutError, OSError):
        pass
    peak = _sample_peak(srv, 2.0)
    peer.close()
    return {
        "transport": transport,
        "sent_mb": round(sent / 1e6, 1),
        "before_mb": round(before, 1),
        "peak_mb": round(peak, 1),
        "growth_mb": round(peak - before, 1),
    }


def main(argv: list[str] | None = None) -> int:
    transports = (argv if argv is not None else sys.argv[1:]) or list(TRANSPORTS)
    with tempfile.TemporaryDirectory(prefix="sbemu-bp-") as tmp:
        srv = start_server(Path(tmp))
        try:
            fill(srv)
            for transport in transports:
                print(peek_probe(srv, transport, read=True, requests=1), flush=True)
                print(peek_probe(srv, transport, read=True), flush=True)
                print(peek_probe(srv, transport, read=False), flush=True)
            if "ws" in transports:
                print(ping_probe(srv, "ws"), flush=True)
            print(delivery_probe(srv), flush=True)
        finally:
            srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
