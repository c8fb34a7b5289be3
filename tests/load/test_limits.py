"""Load and abuse over real sockets: slowloris and stuck SASL (handshake timeout), the
connection cap, thousands of links on one connection, hundreds of idle connections, odd entity
names; a normal azure-servicebus client is served throughout."""

from __future__ import annotations

import socket
import time

import pytest
from hardening import amqpraw as raw
from hardening.common import (
    SdkProbe,
    Server,
    fd_count,
    make_config,
    plain_connection,
    queue_def,
    rss_parts_kb,
)
from hardening.fuzz import check_output, run_case

MAX_CONNECTIONS = 400
MAX_LINKS = 50


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = {
        "SBEMU_HANDSHAKE_TIMEOUT": "1",
        "SBEMU_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        "SBEMU_MAX_LINKS_PER_CONNECTION": str(MAX_LINKS),
    }
    srv = Server(
        tmp_path_factory.mktemp("load"),
        make_config([queue_def("lq"), queue_def("greedyq")]),
        env=env,
    ).start()
    probe = SdkProbe(srv.conn_str)
    probe.start()
    assert probe.wait_rounds(2), probe.errors
    srv.probe = probe  # type: ignore[attr-defined]
    yield srv
    probe.stop()
    assert probe.errors == [], probe.errors
    assert srv.tracebacks() == [], srv.tracebacks()
    srv.stop()


def _served(srv) -> None:
    """The SDK probe made progress since we last looked."""
    before = srv.probe.rounds
    assert srv.probe.wait_rounds(before + 1, timeout=30), srv.probe.errors


def _opened(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(raw.handshake("plain"))
    buf = b""
    while not any(f.code == raw.BEGIN for f in raw.parse(buf)[0]):
        chunk = s.recv(65536)
        assert chunk, f"closed during handshake: {raw.parse(buf)[0]}"
        buf += chunk
    return s


def _eof_within(s: socket.socket, seconds: float) -> tuple[bool, bytes]:
    s.settimeout(seconds)
    data = b""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                return True, data
            data += chunk
    except TimeoutError:
        return False, data
    except ConnectionResetError:
        return True, data
    return False, data


def test_never_finished_sasl_is_closed_by_the_handshake_timeout(server):
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(raw.SASL_HEADER)  # ... and never a sasl-init
    t0 = time.monotonic()
    eof, _ = _eof_within(s, 10)
    assert eof and time.monotonic() - t0 < 5
    s.close()
    _served(server)


def test_slowloris_one_byte_at_a_time_is_closed(server):
    s = socket.create_connection(("127.0.0.1", server.port))
    data = raw.handshake("plain")
    t0 = time.monotonic()
    closed = False
    for b in data:
        try:
            s.sendall(bytes([b]))
        except OSError:
            closed = True
            break
        time.sleep(0.25)
        if time.monotonic() - t0 > 6:
            break
    if not closed:
        closed, _ = _eof_within(s, 5)
    assert closed and time.monotonic() - t0 < 10
    s.close()
    _served(server)


def test_connection_cap_answers_resource_limit_exceeded(server):
    held = []
    try:
        base = server.health()["connections"]
        for _ in range(MAX_CONNECTIONS - base):
            held.append(_opened(server.port))
        out, eof = run_case(server.port, raw.handshake("plain"))
        frames = check_output(out, eof, "over the cap")
        closes = [f for f in frames if f.code == raw.CLOSE]
        assert closes and closes[-1].error() == "amqp:resource-limit-exceeded"
        _served(server)  # the probe's connection was there before the cap
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 10
    while server.health()["connections"] > 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    s = _opened(server.port)  # room again
    s.close()


def test_links_beyond_the_limit_are_refused_then_the_connection_closed(server):
    s = _opened(server.port)
    try:
        frames_out = b"".join(
            raw.attach_frame(f"l{i}", i, True, "lq") for i in range(MAX_LINKS + 5)
        )
        s.sendall(frames_out)
        eof, data = _eof_within(s, 2)
        frames = raw.parse(data)[0]
        detaches = [f for f in frames if f.code == raw.DETACH]
        assert len([f for f in frames if f.code == raw.ATTACH]) == MAX_LINKS + 5
        assert {f.error() for f in detaches} == {"amqp:resource-limit-exceeded"}
        assert len(detaches) == 5
        # a peer that ignores the refusals and doubles the limit loses the connection
        s.sendall(
            b"".join(raw.attach_frame(f"m{i}", 1000 + i, True, "lq") for i in range(MAX_LINKS + 5))
        )
        eof, data = _eof_within(s, 5)
        closes = [f for f in raw.parse(data)[0] if f.code == raw.CLOSE]
        assert closes and closes[-1].error() == "amqp:resource-limit-exceeded"
    finally:
        s.close()
    _served(server)


def test_hundreds_of_idle_connections_cost_little(server):
    fds_before = fd_count(server.pid)
    held = [_opened(server.port) for _ in range(300)]
    try:
        assert server.health()["connections"] >= 300
        _served(server)
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 10
    while fd_count(server.pid) > fds_before + 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert fd_count(server.pid) <= fds_before + 5


@pytest.mark.parametrize(
    "name",
    [
        "../../../../etc/passwd",
        "..%2f..%2fetc",
        "lq/../lq2",
        "x" * 3000,
        "q\u0000nul",
        "/",
        "%00",
        "Lq/$management/../..",
    ],
)
def test_odd_entity_names_are_not_found(server, name):
    steps = [
        raw.handshake("plain"),
        raw.attach_frame("odd", 0, False, name) + raw.attach_frame("odd2", 1, True, name),
    ]
    out, eof = run_case(server.port, steps + [raw.close_frame()], step_wait=1.0)
    frames = check_output(out, eof, name)
    errors = {f.error() for f in frames if f.code == raw.DETACH}
    assert errors and errors <= {"amqp:not-found", "amqp:not-allowed"}, frames
    for p in server.data_dir.rglob("*"):
        assert "passwd" not in p.name and "etc" != p.name


def test_large_prefetch_never_settling_is_bounded_and_others_are_served(server):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with (
        ServiceBusClient.from_connection_string(server.conn_str) as client,
        client.get_queue_sender("greedyq") as sender,
    ):
        for _ in range(20):
            sender.send_messages([ServiceBusMessage(b"g" * 1024) for _ in range(100)])
    heap_before = rss_parts_kb(server.pid)["RssAnon"]
    conn = plain_connection(f"amqp://127.0.0.1:{server.port}", timeout=20)
    try:
        greedy = conn.create_receiver("greedyq", credit=10_000)  # never settles anything
        got = 0
        while got < 2000:
            greedy.receive(timeout=20)
            got += 1
        _served(server)
        heap_grew_mib = (rss_parts_kb(server.pid)["RssAnon"] - heap_before) / 1024
        assert heap_grew_mib < 30, heap_grew_mib
    finally:
        conn.close()
    _served(server)
