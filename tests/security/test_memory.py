"""Issue 24: the server's anonymous memory grew from 48 to 112 MB over ~700 attached connections
that each sent part of a frame, and stayed there after they closed. Three causes, three bounds:
a closed connection left proton's collector (whose pending events hold the C connection and
transport, input buffer included) alive, so every burst added ~20 MB for good; the SASL layer
kept each connection's first AMQP bytes (up to a frame) for the connection's life; and glibc
kept freed buffers in its arenas (sbemu.runtime.heap trims them after a burst of closes). Measured on
the real server process (RssAnon)."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
from hardening import amqpraw as raw
from hardening.common import Server, make_config, queue_def, rss_anon_mb

from sbemu.runtime.heap import ASK_INTERVAL, INTERVAL, SETTLE, HeapTrimmer, libc_malloc_trim

CONNECTIONS = 400
PARTIAL = 30_000  # bytes of a 60,000-byte frame each connection sends, then waits


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("mem"), make_config([queue_def("memq")])).start()
    yield srv
    assert srv.tracebacks() == []
    srv.stop()


def _burst(port: int) -> list[socket.socket]:
    opening = (
        raw.handshake("plain")
        + raw.attach_frame("s", 0, False, "memq")
        + raw.attach_frame("r", 1, True, "memq")
        + raw.flow_frame(1, 10)
    )
    socks = []
    for _ in range(CONNECTIONS):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(opening + struct.pack(">IBBH", 60_000, 2, 0, 0) + os.urandom(PARTIAL))
        socks.append(s)
    return socks


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.mark.skipif(libc_malloc_trim() is None, reason="the C library has no malloc_trim")
def test_memory_returns_after_a_burst_of_half_sent_frames(server) -> None:
    pid = server.proc.pid
    for _ in range(2):  # warm up: the first bursts grow caches that stay (imports, pools)
        for s in _burst(server.port):
            s.close()
        assert _wait(lambda: server.health()["connections"] == 0, 30)
    time.sleep(3)
    before = rss_anon_mb(pid)
    socks = _burst(server.port)
    assert _wait(lambda: server.health()["connections"] >= CONNECTIONS, 30)
    held = rss_anon_mb(pid) - before
    for s in socks:
        s.close()
    assert _wait(lambda: server.health()["connections"] == 0, 30)
    # the trim runs once the count stayed put 2 s (sbemu.runtime.heap.SETTLE), at the next timer tick
    # a regression keeps the whole burst (20+ MB); fragmentation leaves a few MB
    assert _wait(lambda: rss_anon_mb(pid) - before < 12, 25), (
        f"{CONNECTIONS} connections held {held:.1f} MB; {rss_anon_mb(pid) - before:.1f} MB "
        "were not given back after they closed"
    )
    # what each held connection costs, the partial frame included (was ~90 KB, with the
    # first AMQP bytes kept twice)
    assert held * 1024 / CONNECTIONS < 80, f"{held * 1024 / CONNECTIONS:.0f} KB a connection"


def test_trimmer_waits_for_closes_to_settle_and_spaces_trims() -> None:
    calls: list[int] = []
    t = HeapTrimmer(lambda: calls.append(1), min_closed=10, interval=30, settle=2)
    assert not t.due(100, 0.0)
    assert not t.due(95, 1.0)  # only 5 closed
    assert not t.due(80, 2.0)  # 20 closed, but the count just moved
    assert not t.due(80, 3.5)
    assert t.due(80, 4.1)  # settled for 2 s
    t.run()
    assert calls == [1]
    assert not t.due(50, 10.0) and not t.due(50, 20.0)  # within the interval
    assert t.due(50, 40.0)
    assert not HeapTrimmer(None).due(0, 100.0)  # no malloc_trim: never


def test_one_close_trims_when_the_heap_holds_much_free() -> None:
    free = [0]
    calls: list[int] = []
    t = HeapTrimmer(
        lambda: calls.append(1), free_bytes=lambda: free[0], min_closed=64, interval=10,
        settle=2, free_limit=16 << 20,
    )  # fmt: skip
    assert not t.due(3, 0.0)
    assert not t.due(2, 1.0)  # one closed, not settled
    assert not t.due(2, 3.5)  # settled, but little held free: nothing to give back
    free[0] = 100 << 20
    assert not t.due(2, 4.0)  # that close was written off
    assert not t.due(1, 5.0)
    assert t.due(1, 7.5)  # a big client closed: 100 MB free in the heap
    assert not t.due(0, 10.0) and not t.due(0, 16.0)  # within the interval
    assert t.due(0, 17.6)


def test_large_answers_ask_for_trims_at_once_then_spaced_and_merged() -> None:
    calls: list[int] = []
    t = HeapTrimmer(lambda: calls.append(1))
    assert t.ask(100.0) == 0.0  # the first: on the next pass
    assert t.ask(100.1) is None  # planned already: it covers this answer too
    t.run_asked()
    assert calls == [1]
    assert t.ask(100.2) == pytest.approx(ASK_INTERVAL - 0.2)  # spaced from the last
    assert t.ask(100.3) is None
    t.run_asked()
    assert t.ask(200.0) == 0.0
    assert calls == [1, 1]
    assert HeapTrimmer(None).ask(0.0) is None  # no malloc_trim: never


BIG_CLIENTS, BIG_SIZE = 6, 30 << 20  # at once, one message each way
# What may stay above the start once they closed (measured: 29 MB of 180 MB moved; before, 59 MB
# and more until 64 connections had closed)
HELD_MB = 40


@pytest.fixture(scope="module")
def premium(tmp_path_factory):
    config = make_config([])
    namespace = config["UserConfig"]["Namespaces"][0]
    namespace["PremiumMessagingPartitions"] = 1
    namespace["Queues"].append(queue_def("bigq", MaxMessageSizeInKilobytes=102_400))
    srv = Server(tmp_path_factory.mktemp("mem-premium"), config).start()
    yield srv
    assert srv.tracebacks() == []
    srv.stop()


def _big_client(conn_str: str) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender("bigq") as sender:
            sender.send_messages(ServiceBusMessage(b"b" * BIG_SIZE))
        with client.get_queue_receiver("bigq", max_wait_time=60) as receiver:
            for message in receiver.receive_messages(max_message_count=1, max_wait_time=60):
                receiver.complete_message(message)


@pytest.mark.skipif(libc_malloc_trim() is None, reason="the C library has no malloc_trim")
def test_memory_returns_after_a_few_big_clients_closed(premium) -> None:
    """Issue 35: after 10 clients of 50 MB the server sat 140 MB above its start until 64
    connections had closed. Now a close with more than 16 MiB held free in the heap is enough:
    within SETTLE + INTERVAL seconds (and 5 s of slack) the server is back within HELD_MB of
    where it started."""
    import threading

    time.sleep(SETTLE + 1)
    start = rss_anon_mb(premium.pid)
    clients = [
        threading.Thread(target=_big_client, args=(premium.conn_str,)) for _ in range(BIG_CLIENTS)
    ]
    for client in clients:
        client.start()
    for client in clients:
        client.join(120)
    peak = rss_anon_mb(premium.pid)
    joined = time.monotonic()
    back = _wait(lambda: rss_anon_mb(premium.pid) <= start + HELD_MB, SETTLE + INTERVAL + 5)
    after = rss_anon_mb(premium.pid)
    print(
        f"big clients: {start:.0f} MB -> {peak:.0f} MB -> {after:.0f} MB "
        f"{time.monotonic() - joined:.1f} s after they closed"
    )
    assert back, f"{start:.0f} MB at the start, {after:.0f} MB after the clients closed"


# Answers of 20 MB each (100 messages of 200 KB peeked at once) read by one client on one
# connection that stays open: what the server holds for it meanwhile is proton's buffers of
# that connection, which grew to the largest output framed at once (the transport's output
# buffer, the buffers of finished deliveries kept for reuse) and are freed with the
# connection. Measured: +38 MB after one answer, +70 to +108 MB after 4 or 12 (it does not grow
# with the count: backpressure.OutputGate lets no more than one answer and 4 MiB into the engine
# at a time; the output buffer grows by doubling, so where it stops depends on how much was
# framed at once); 290 MB after 12 before that bound. docs/large-messages.md says so.
ANSWER_MB = 20
OPEN_HELD_MB = 8 * ANSWER_MB


@pytest.fixture(scope="module")
def peeks(tmp_path_factory):
    from hardening import backpressure as bp

    srv = bp.start_server(tmp_path_factory.mktemp("mem-peeks"))
    bp.fill(srv)
    yield srv
    assert srv.tracebacks() == []
    srv.stop()


def _read_peeks(srv, peer, count: int) -> None:
    from hardening import backpressure as bp

    peer.send(b"".join(bp._peek_request(i) for i in range(count)))
    want, got = count * bp.MESSAGES * bp.MESSAGE_SIZE, 0
    peer.sock.settimeout(60)
    while got < want:
        n = peer.read()
        assert n, f"closed after {got} bytes of answers"
        got += n


@pytest.mark.skipif(libc_malloc_trim() is None, reason="the C library has no malloc_trim")
def test_memory_held_by_an_open_connection_is_bounded_by_its_largest_answer(peeks) -> None:
    from hardening import backpressure as bp

    time.sleep(SETTLE + 1)
    start = rss_anon_mb(peeks.pid)
    held = {}
    for count in (1, 12):
        peer = bp.Peer(peeks, "amqp", rcvbuf=None)
        try:
            bp.open_management(peer)
            _read_peeks(peeks, peer, count)
            time.sleep(1)
            held[count] = rss_anon_mb(peeks.pid) - start
        finally:
            peer.close()
        assert _wait(lambda: peeks.health()["connections"] == 0, 30)
    back = _wait(lambda: rss_anon_mb(peeks.pid) <= start + 15, SETTLE + INTERVAL + 5)
    after = rss_anon_mb(peeks.pid) - start
    print(f"open connection after 1 answer: +{held[1]:.0f} MB, after 12: +{held[12]:.0f} MB, "
          f"closed: {after:+.0f} MB")  # fmt: skip
    assert held[12] < OPEN_HELD_MB, held  # was +290 MB after twelve
    assert back, f"{after:+.0f} MB after the connections closed"
