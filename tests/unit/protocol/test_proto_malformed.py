"""Malformed input at the byte level: first through the sans-IO AmqpConnection, then through a
real ``python -m sbemu serve`` socket. After each abuse a fresh, well-behaved connection must
still send and receive.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import uuid
from pathlib import Path

import pytest
from amqp_harness import (
    AMQP_HEADER,
    BEGIN,
    CLOSE,
    FLOW,
    KEY,
    KEY_NAME,
    OPEN,
    SASL_HEADER,
    SASL_MECHANISMS,
    SASL_OUTCOME,
    TRANSFER,
    EnginePair,
    codec,
    frame_bytes,
    parse_frames,
    sasl_init_frame,
)
from hardening.amqpraw import EncodedMessage
from hardening.common import plain_connection
from proton import Delivery, Message

from sbemu.protocol.connection import AmqpConnection
from sbemu.testing import SbemuProcess

GARBAGE = bytes(range(256))[::-1] * 2
OPEN_FRAME = frame_bytes(OPEN, [codec.enc_string("raw-client"), codec.enc_string("localhost")])
BEGIN_FRAME = frame_bytes(
    BEGIN, [codec.enc_null(), codec.enc_uint(0), codec.enc_uint(1000), codec.enc_uint(1000)]
)
TRANSFER_ON_HANDLE_9 = frame_bytes(
    TRANSFER,
    [
        codec.enc_uint(9),
        codec.enc_uint(0),
        codec.enc_binary(b"\x00\x00\x00\x01"),
        codec.enc_uint(0),
        codec.enc_bool(False),
    ],
    payload=codec.enc_described(0x77, codec.enc_string("orphan")),
)
FLOW_ON_HANDLE_7 = frame_bytes(
    FLOW,
    [
        codec.enc_uint(0),
        codec.enc_uint(1000),
        codec.enc_uint(0),
        codec.enc_uint(1000),
        codec.enc_uint(7),
        codec.enc_uint(0),
        codec.enc_uint(10),
    ],
)
# A frame whose performative cannot be decoded (a begin descriptor followed by a bad constructor).
UNDECODABLE_PERFORMATIVE = struct.pack(">IBBH", 12, 2, 0, 0) + b"\x00\x53\x11\xff"
UNKNOWN_PERFORMATIVE = frame_bytes(0x55, [codec.enc_uint(1)])

BAD_BODIES = {
    "not-a-section": b"\xde\xad\xbe\xef",
    "data-runs-past-end": b"\x00\x53\x75\xa0\x10abc",
    "truncated-properties": b"\x00\x53\x73\xc0\x03\x01\xa1\x05",
    "amqp-value-runs-past-end": b"\x00\x53\x77\xa1\x03ab",
    "descriptor-only": b"\x00\x53\x77",
}


# ------------------------------------------------------------------------------ helpers


def _raw(services, *chunks: bytes) -> tuple[AmqpConnection, bytes]:
    conn = AmqpConnection(services, time.time())
    out = bytearray()
    for chunk in chunks:
        conn.receive_data(chunk, time.time())
        out += conn.data_to_send()
    return conn, bytes(out)


def _close_error(frames) -> str | None:
    closes = [f for f in frames if f.code == CLOSE]
    if not closes:
        return None
    err = closes[-1].field(0)
    return str(err.value[0]) if err is not None else ""


def fresh_connection_works(services) -> None:
    """A well-behaved client on the same services: send one message and receive it back."""
    p = EnginePair(services, sasl="PLAIN").open()
    assert not p.server.closed
    snd = p.sender("queue.1")
    body = f"alive-{uuid.uuid4()}".encode()
    dlv = p.send(snd, Message(id="alive", body=body))
    assert dlv.remote_state == Delivery.ACCEPTED
    rcv = p.receiver("queue.1", credit=50)
    got = p.take(rcv)
    bodies = []
    for d, raw in got:
        m = Message()
        m.decode(raw)
        bodies.append(bytes(m.body) if m.body is not None else None)
        d.update(Delivery.ACCEPTED)
        d.settle()
    p.pump()
    assert body in bodies
    p.close()


# ------------------------------------------------------------------------------ in memory


@pytest.mark.parametrize(
    "header",
    [SASL_HEADER, AMQP_HEADER, SASL_HEADER + sasl_init_frame("ANONYMOUS") + AMQP_HEADER],
    ids=["after-sasl-header", "after-amqp-header", "after-sasl-done"],
)
def test_garbage_after_header(services, header):
    conn, out = _raw(services, header + GARBAGE)
    assert conn.closed
    frames = parse_frames(out)
    if header == SASL_HEADER:
        # SASL has no close frame: header + mechanisms, then the socket is dropped.
        assert frames[0].header == SASL_HEADER
        assert [f.code for f in frames[1:]] == [SASL_MECHANISMS]
    else:
        assert _close_error(frames) == "amqp:connection:framing-error"
    assert conn.data_to_send() == b""
    fresh_connection_works(services)


@pytest.mark.parametrize("layer", ["sasl", "amqp"])
@pytest.mark.parametrize("size", [0, 4, 7])
def test_frame_size_below_8(services, layer, size):
    if layer == "sasl":
        data = SASL_HEADER + struct.pack(">IBBH", size, 2, 1, 0)
    else:
        data = AMQP_HEADER + struct.pack(">IBBH", size, 2, 0, 0)
    conn, out = _raw(services, data)
    assert conn.closed
    frames = parse_frames(out)
    if layer == "amqp":
        assert _close_error(frames) == "amqp:connection:framing-error"
    else:
        assert not [f for f in frames if f.code == SASL_OUTCOME]
    fresh_connection_works(services)


@pytest.mark.parametrize(
    "header",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"AMQP\x02\x01\x00\x00",
        b"AMQP\x00\x00\x09\x01",
        b"AMQP\x03\x01\x00\x01",
        b"XYZ",
    ],
    ids=["http", "tls-header", "amqp-0-9-1", "sasl-wrong-revision", "short-prefix"],
)
def test_wrong_protocol_header(services, header):
    conn, out = _raw(services, header)
    # [AMQP 2.2] answer with the header we support, then close.
    assert out == SASL_HEADER
    assert conn.closed
    fresh_connection_works(services)


def test_truncated_sasl_frame_then_eof(services):
    init = sasl_init_frame("ANONYMOUS")
    conn, out = _raw(services, SASL_HEADER + init[: len(init) // 2])
    assert not conn.closed  # waiting for the rest
    frames = parse_frames(out)
    assert [f.code for f in frames[1:]] == [SASL_MECHANISMS]
    conn.connection_lost()  # EOF
    assert conn.closed
    assert conn.data_to_send() == b""
    fresh_connection_works(services)


def test_truncated_amqp_frame_then_eof(services):
    conn, out = _raw(services, AMQP_HEADER + OPEN_FRAME + BEGIN_FRAME[:7])
    assert [f.code for f in parse_frames(out) if f.code] == [OPEN]
    conn.connection_lost()
    assert conn.closed
    fresh_connection_works(services)


def test_eof_in_the_middle_of_a_link(services):
    p = EnginePair(services, sasl="PLAIN").open()
    snd = p.sender("queue.1")
    rcv = p.receiver("queue.1", credit=5)
    p.send(snd, Message(body=b"locked-then-dropped"))
    assert len(p.take(rcv)) == 1
    p.server.connection_lost()
    assert p.server.closed
    fresh_connection_works(services)


@pytest.mark.parametrize(
    "frame,conditions",
    [
        (TRANSFER_ON_HANDLE_9, {"amqp:session:unattached-handle", "amqp:invalid-field"}),
        (FLOW_ON_HANDLE_7, {"amqp:session:unattached-handle", "amqp:invalid-field"}),
        (frame_bytes(TRANSFER, [codec.enc_uint(0)], channel=3), {"amqp:not-allowed"}),
    ],
    ids=["transfer-unattached-handle", "flow-unattached-handle", "transfer-unbegun-channel"],
)
def test_frame_on_unattached_handle(services, frame, conditions):
    conn, out = _raw(services, AMQP_HEADER + OPEN_FRAME + BEGIN_FRAME, frame)
    frames = parse_frames(out)
    assert [f.code for f in frames if f.code in (OPEN, BEGIN)] == [OPEN, BEGIN]
    assert _close_error(frames) in conditions
    assert conn.closed
    fresh_connection_works(services)


@pytest.mark.parametrize("body", list(BAD_BODIES.values()), ids=list(BAD_BODIES))
def test_undecodable_message_body_rejected(services, body):
    p = EnginePair(services, sasl="PLAIN").open()
    snd = p.sender("queue.1")
    dlv = p.send(snd, body)
    assert dlv.settled
    link_cond = snd.remote_condition
    if link_cond is None:
        # delivery level: rejected{error} [contract 3.3]
        assert dlv.remote_state == Delivery.REJECTED
        assert dlv.remote.condition is not None and dlv.remote.condition.name
        # the link is still usable
        ok = p.send(snd, Message(id="after", body=b"fine"))
        assert ok.remote_state == Delivery.ACCEPTED
    else:
        assert link_cond.name
    assert not p.server.closed
    # nothing undecodable was stored
    rcv = p.receiver("queue.1", credit=10)
    ids = []
    for _, raw in p.take(rcv):
        m = Message()
        m.decode(raw)
        ids.append(m.id)
    assert ids in (["after"], [])
    p.close()
    fresh_connection_works(services)


def test_oversized_message_rejected_link_survives(services):
    p = EnginePair(services, sasl="PLAIN").open()
    snd = p.sender("queue.1")
    dlv = p.send(snd, Message(body=b"x" * 270_000))
    assert dlv.remote_state == Delivery.REJECTED
    assert dlv.remote.condition.name == "amqp:link:message-size-exceeded"
    assert snd.remote_condition is None
    assert p.send(snd, Message(body=b"small")).remote_state == Delivery.ACCEPTED
    p.close()
    fresh_connection_works(services)


def test_empty_transfer_payload_rejected_not_internal_error(services):
    p = EnginePair(services, sasl="PLAIN").open()
    snd = p.sender("queue.1")
    dlv = p.send(snd, b"")
    assert snd.remote_condition is None, snd.remote_condition
    assert dlv.remote_state == Delivery.REJECTED
    assert p.send(snd, Message(body=b"fine")).remote_state == Delivery.ACCEPTED


@pytest.mark.parametrize(
    "frame", [UNDECODABLE_PERFORMATIVE, UNKNOWN_PERFORMATIVE], ids=["undecodable", "unknown-code"]
)
def test_undecodable_performative_closes_connection(services, frame):
    conn, out = _raw(services, AMQP_HEADER + OPEN_FRAME, frame, BEGIN_FRAME)
    frames = parse_frames(out)
    assert conn.closed or _close_error(frames), (
        f"connection neither closed nor answered: {[f.code for f in frames]}"
    )


def test_undecodable_performative_does_not_break_others(services):
    conn, _ = _raw(services, AMQP_HEADER + OPEN_FRAME, UNDECODABLE_PERFORMATIVE)
    fresh_connection_works(services)


# ------------------------------------------------------------------------------ real socket


# Queues only (the default config's two queues): keeps these protocol tests independent of
# topic/subscription start-up work.
QUEUES_ONLY_CONFIG = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": "sbemulatorns",
                "Queues": [
                    {"Name": "queue.1", "Properties": {}},
                    {"Name": "queue.partitioned", "Properties": {"EnablePartitioning": True}},
                ],
            }
        ],
        "Logging": {"Type": "Console"},
    }
}


class ServerProc(SbemuProcess):
    """The queues-only server of these tests (sbemu.testing), its stderr in ``log_path``."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        config = log_path.parent / "config.json"
        config.write_text(json.dumps(QUEUES_ONLY_CONFIG))
        super().__init__(config=config, data_dir=data_dir, log_level="info", stderr=log_path)
        self.port = self.start(20).amqp_port
        self.url = f"amqp://127.0.0.1:{self.port}"

    def stderr(self) -> str:
        return self.stderr_tail(3000)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("sbemu-proto")
    srv = ServerProc(base / "data", base / "server.stderr")
    yield srv
    srv.stop()


class RawSocket:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.data = bytearray()
        self.eof = False

    def send(self, data: bytes, *, eof: bool = False) -> None:
        self.sock.sendall(data)
        if eof:
            self.sock.shutdown(socket.SHUT_WR)

    def read_until(self, predicate, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.eof:
                return predicate(self)
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.eof = True
            self.data += chunk
        return True

    def read_to_eof(self, timeout: float = 5.0) -> bool:
        return self.read_until(lambda s: s.eof, timeout)

    def frames(self):
        return parse_frames(self.data)

    def close(self) -> None:
        self.sock.close()


def socket_roundtrip_works(server: ServerProc) -> None:
    """A fresh python-qpid-proton BlockingConnection sends and receives on queue.1."""
    assert server.alive(), server.stderr()
    conn = plain_connection(server.url)
    try:
        body = f"alive-{uuid.uuid4()}"
        conn.create_sender("queue.1").send(Message(body=body))
        rcv = conn.create_receiver("queue.1", credit=50)
        for _ in range(50):
            msg = rcv.receive(timeout=5)
            rcv.accept()
            if msg.body == body:
                break
        else:
            raise AssertionError("own message not received")
    finally:
        conn.close()


def test_socket_baseline(server):
    socket_roundtrip_works(server)


@pytest.mark.parametrize("header", [SASL_HEADER, AMQP_HEADER], ids=["sasl", "amqp"])
def test_socket_garbage_after_header(server, header):
    s = RawSocket(server.port)
    try:
        s.send(header + GARBAGE)
        assert s.read_to_eof(), "server must drop the connection"
        frames = s.frames()
        assert frames[0].header == header
        if header == AMQP_HEADER:
            assert _close_error(frames) == "amqp:connection:framing-error"
    finally:
        s.close()
    socket_roundtrip_works(server)


@pytest.mark.parametrize("header,ftype", [(SASL_HEADER, 1), (AMQP_HEADER, 0)], ids=["sasl", "amqp"])
def test_socket_frame_size_below_8(server, header, ftype):
    s = RawSocket(server.port)
    try:
        s.send(header + struct.pack(">IBBH", 4, 2, ftype, 0))
        assert s.read_to_eof()
    finally:
        s.close()
    socket_roundtrip_works(server)


def test_socket_wrong_protocol_header(server):
    s = RawSocket(server.port)
    try:
        s.send(b"AMQP\x02\x01\x00\x00")  # AMQP's TLS header: we offer SASL instead
        assert s.read_to_eof(), "server must close after answering the header"
        assert bytes(s.data) == SASL_HEADER
    finally:
        s.close()
    socket_roundtrip_works(server)


def test_socket_http_gets_an_http_answer(server):
    """HTTP on the AMQP port goes to the management API (sbemu.runtime.endpoints.FirstByte): a request
    h11 refuses (no Host) gets a 400 and the close, and the port keeps serving AMQP."""
    s = RawSocket(server.port)
    try:
        s.send(b"GET / HTTP/1.1\r\n\r\n")
        assert s.read_to_eof(), "server must close after the error"
        assert bytes(s.data).startswith(b"HTTP/1.1 400 ")
    finally:
        s.close()
    socket_roundtrip_works(server)


def test_socket_truncated_sasl_frame_then_eof(server):
    init = sasl_init_frame("PLAIN", b"\x00" + KEY_NAME.encode() + b"\x00" + KEY.encode())
    s = RawSocket(server.port)
    try:
        s.send(SASL_HEADER + init[:11], eof=True)
        assert s.read_to_eof()
        frames = s.frames()
        assert frames[0].header == SASL_HEADER
        assert not [f for f in frames if f.code == SASL_OUTCOME]
    finally:
        s.close()
    socket_roundtrip_works(server)


def test_socket_transfer_on_unattached_handle(server):
    s = RawSocket(server.port)
    try:
        s.send(AMQP_HEADER + OPEN_FRAME + BEGIN_FRAME)
        assert s.read_until(lambda r: any(f.code == BEGIN for f in r.frames()))
        s.send(TRANSFER_ON_HANDLE_9)
        assert s.read_to_eof()
        assert _close_error(s.frames()) in {"amqp:session:unattached-handle", "amqp:invalid-field"}
    finally:
        s.close()
    socket_roundtrip_works(server)


@pytest.mark.parametrize("name", ["not-a-section", "data-runs-past-end"])
def test_socket_undecodable_body_rejected(server, name):
    conn = plain_connection(server.url)
    try:
        snd = conn.create_sender("queue.1")
        dlv = snd.send(EncodedMessage(BAD_BODIES[name]), error_states=[])
        assert dlv.remote_state == Delivery.REJECTED
        assert dlv.remote.condition is not None and dlv.remote.condition.name
        ok = snd.send(Message(body="after-bad"))
        assert ok.remote_state == Delivery.ACCEPTED
    finally:
        conn.close()
    socket_roundtrip_works(server)


def test_socket_undecodable_performative_closed(server):
    s = RawSocket(server.port)
    try:
        s.send(AMQP_HEADER + OPEN_FRAME)
        assert s.read_until(lambda r: any(f.code == OPEN for f in r.frames()))
        s.send(UNDECODABLE_PERFORMATIVE)
        answered = s.read_until(lambda r: r.eof or _close_error(r.frames()) is not None, timeout=2)
        assert answered, "no close and no EOF within 2 s"
    finally:
        s.close()
        socket_roundtrip_works(server)


def test_socket_server_survived_everything(server):
    socket_roundtrip_works(server)
    assert server.alive()
    assert "Traceback" not in server.stderr(), server.stderr()
