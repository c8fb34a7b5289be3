"""Session queues (``RequiresSession``) against a real sbemu process with the azure-servicebus
SDK: named and next-available session receivers, one receiver per session, FIFO per session,
session lock renew and expiry, session state (also across a restart), listing sessions,
partitioned session queues, and the refusals between session and non-session entities.

Queues come from ``SBEMU_QUEUES`` through conftest's ``server`` / ``own_server`` fixtures.
"""

from __future__ import annotations

import datetime as dt
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
)
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)
from integration_support import (
    PARTITIONS,
    body_text,
    partition_of,
    queue_def,
    receive_n,
)


def session_queue(name: str, *, partitioned: bool = False) -> dict[str, Any]:
    return queue_def(name, lock_duration="PT5S", partitioned=partitioned, RequiresSession=True)


SBEMU_QUEUES = [
    session_queue("s-nosid"),
    session_queue("s-fifo"),
    session_queue("s-excl"),
    session_queue("s-next"),
    session_queue("s-empty"),
    session_queue("s-state"),
    session_queue("s-renew"),
    session_queue("s-expire"),
    session_queue("s-list"),
    session_queue("s-peek"),
    session_queue("s-async"),
    session_queue("s-persist"),
    session_queue("s-part", partitioned=True),
    queue_def("s-plain"),
]


@pytest.fixture()
def client(server) -> Iterator[ServiceBusClient]:
    """retry_total=0: a refused lock or a timeout surfaces at once, not after retries."""
    c = ServiceBusClient.from_connection_string(
        server.conn_str, retry_total=0, retry_backoff_factor=0.2
    )
    with c:
        yield c


def send(client: ServiceBusClient, queue: str, messages: list[ServiceBusMessage]) -> None:
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(messages)


def smsg(session: str, i: int) -> ServiceBusMessage:
    return ServiceBusMessage(f"{session}-{i}", session_id=session, message_id=f"{session}-{i}")


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def server_time(ms: int) -> dt.datetime:
    """The server's time (Unix ms, from ``server.advance_clock``) as a UTC datetime."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def drain_session(conn_str: str, queue: str, session: str, n: int) -> list[Any]:
    """Receive-and-delete ``n`` messages of one session on a client of its own (thread-safe)."""
    with (
        ServiceBusClient.from_connection_string(conn_str, retry_total=0) as c,
        c.get_queue_receiver(
            queue,
            session_id=session,
            receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
            max_wait_time=1,
        ) as r,
    ):
        return receive_n(r, n, timeout=10)


def parallel(calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run the calls in threads: each SDK link costs about a second to open and close, so
    independent receivers run side by side to keep the module fast."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = {k: pool.submit(fn) for k, fn in calls.items()}
        return {k: f.result(timeout=30) for k, f in futures.items()}


# ------------------------------------------------------------------------------- sending


def test_send_without_session_id_is_refused(client):
    with pytest.raises(ServiceBusError, match="SessionId") as info:
        send(client, "s-nosid", [ServiceBusMessage("no session")])
    assert "amqp:not-allowed" in str(info.value)


# ------------------------------------------------------------------------------- receiving


def test_named_session_receiver_gets_only_its_messages_in_order(server, client):
    messages = [smsg(s, i) for i in range(5) for s in ("a", "b", "c")]
    send(client, "s-fifo", messages)
    with client.get_queue_receiver("s-fifo", session_id="b", max_wait_time=1) as r:
        assert r.session.session_id == "b"
        until = r.session.locked_until_utc
        assert until is not None and until > server.now()
        got = receive_n(r, 5, timeout=10)
        got += r.receive_messages(max_message_count=10, max_wait_time=0.5)
        assert [body_text(m) for m in got] == [f"b-{i}" for i in range(5)]
        assert all(m.session_id == "b" for m in got)
        seqs = [m.sequence_number for m in got]
        assert seqs == sorted(seqs)
        for m in got:
            r.complete_message(m)
    # a and c are untouched, each in its own order.
    rest = parallel(
        {s: (lambda s=s: drain_session(server.conn_str, "s-fifo", s, 5)) for s in ("a", "c")}
    )
    for s, got in rest.items():
        assert [body_text(m) for m in got] == [f"{s}-{i}" for i in range(5)]


def test_second_receiver_for_a_locked_session_is_refused(client, server):
    send(client, "s-excl", [smsg("x", 0)])
    with client.get_queue_receiver("s-excl", session_id="x", max_wait_time=1) as first:
        (m,) = receive_n(first, 1, timeout=10)
        with pytest.raises(SessionCannotBeLockedError):
            with client.get_queue_receiver("s-excl", session_id="x", max_wait_time=1) as second:
                second.receive_messages(max_message_count=1, max_wait_time=1)
        first.complete_message(m)
    # Once the first receiver closed, the session can be locked again.
    with client.get_queue_receiver("s-excl", session_id="x", max_wait_time=1) as again:
        assert again.session.session_id == "x"
        assert again.session.locked_until_utc > server.now()


def test_next_available_session_picks_a_session_with_messages(client):
    send(client, "s-next", [smsg("only", 0), smsg("only", 1)])
    with client.get_queue_receiver(
        "s-next", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2
    ) as r:
        got = receive_n(r, 2, timeout=10)
        assert r.session.session_id == "only"
        assert [body_text(m) for m in got] == ["only-0", "only-1"]
        for m in got:
            r.complete_message(m)


def test_next_available_session_times_out_when_none_is_available(client):
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError):
        with client.get_queue_receiver(
            "s-empty", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1
        ) as r:
            r.receive_messages(max_message_count=1, max_wait_time=1)
    assert time.monotonic() - started < 15


def test_peek_on_session_receiver_shows_only_that_session(server, client):
    send(client, "s-peek", [smsg(s, i) for i in range(3) for s in ("p", "q")])
    with client.get_queue_receiver("s-peek", session_id="q", max_wait_time=1) as r:
        peeked = r.peek_messages(max_message_count=10)
        assert [body_text(m) for m in peeked] == ["q-0", "q-1", "q-2"]
        assert all(m.session_id == "q" for m in peeked)
    # Peeking settles nothing: the messages are all still there.
    rest = parallel(
        {s: (lambda s=s: drain_session(server.conn_str, "s-peek", s, 3)) for s in ("p", "q")}
    )
    assert {s: len(got) for s, got in rest.items()} == {"p": 3, "q": 3}


# ------------------------------------------------------------------------------- session lock


def test_session_state_set_and_get(client):
    send(client, "s-state", [smsg("st", 0)])
    with client.get_queue_receiver("s-state", session_id="st", max_wait_time=1) as r:
        assert r.session.get_state() in (None, b"")
        r.session.set_state(b"checkpoint-1")
        assert r.session.get_state() == b"checkpoint-1"
        r.session.set_state(b"checkpoint-2")
        (m,) = receive_n(r, 1, timeout=10)
        r.complete_message(m)
    with client.get_queue_receiver("s-state", session_id="st", max_wait_time=1) as r:
        assert r.session.get_state() == b"checkpoint-2"
        r.session.set_state(None)
        assert r.session.get_state() in (None, b"")


def test_session_renew_lock_moves_locked_until_forward(client, server):
    send(client, "s-renew", [smsg("rn", 0)])
    with client.get_queue_receiver("s-renew", session_id="rn", max_wait_time=1) as r:
        (m,) = receive_n(r, 1, timeout=10)
        first = r.session.locked_until_utc
        now = server_time(server.advance_clock(1.0))  # the server's clock, not a sleep
        renewed = r.session.renew_lock()
        assert renewed >= first + dt.timedelta(seconds=0.8)
        assert r.session.locked_until_utc == renewed
        assert renewed > now + dt.timedelta(seconds=4)  # LockDuration PT5S from now
        # past the first lock's expiry, within the renewed one
        past = server_time(server.advance_clock((first - now).total_seconds() + 0.5))
        assert first < past < renewed
        r.complete_message(m)


def test_session_lock_expiry_loses_the_session(client, server):
    send(client, "s-expire", [smsg("ex", 0), smsg("ex", 1)])
    with client.get_queue_receiver("s-expire", session_id="ex", max_wait_time=1) as r:
        (m,) = receive_n(r, 1, timeout=10)
        # LockDuration PT5S, never renewed. Only the server's clock moves past the lock: the
        # SDK's own locked-until check still passes, so the completion reaches the server,
        # which must answer session-lock-lost (not message-lock-lost) as Azure does.
        lock_left = (r.session.locked_until_utc - server.now()).total_seconds()
        server.advance_clock(max(0.0, lock_left) + 1.0)
        with pytest.raises(SessionLockLostError):
            r.complete_message(m)
        with pytest.raises(SessionLockLostError):
            r.session.renew_lock()
    # The session is free again and nothing was lost: ex-0 comes back with a higher count.
    with client.get_queue_receiver("s-expire", session_id="ex", max_wait_time=1) as r:
        got = receive_n(r, 2, timeout=10)
        assert [body_text(x) for x in got] == ["ex-0", "ex-1"]
        assert got[0].delivery_count >= 1
        for x in got:
            r.complete_message(x)


# ------------------------------------------------------------------------------- listing


def test_list_sessions(client, server):
    if not hasattr(client, "list_queue_sessions"):
        pytest.skip("this azure-servicebus has no ServiceBusClient.list_queue_sessions")
    send(client, "s-list", [smsg("l1", 0), smsg("l2", 0), smsg("l2", 1)])
    marker = server.now()  # state updates are stamped with the server's clock
    with client.get_queue_receiver("s-list", session_id="l3", max_wait_time=1) as r:
        r.session.set_state(b"only-state")  # a session with state and no messages
    assert sorted(client.list_queue_sessions("s-list")) == ["l1", "l2", "l3"]
    # state_updated_after: only the sessions whose state changed after the time.
    updated = list(
        client.list_queue_sessions("s-list", state_updated_after=marker - dt.timedelta(seconds=1))
    )
    assert updated == ["l3"]
    # A session whose messages are all gone (and has no state) drops out of the list.
    with client.get_queue_receiver(
        "s-list",
        session_id="l1",
        receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
        max_wait_time=1,
    ) as r:
        assert len(receive_n(r, 1, timeout=10)) == 1
    assert sorted(client.list_queue_sessions("s-list")) == ["l2", "l3"]


# ------------------------------------------------------------------------------- partitioned


def test_partitioned_session_queue_keeps_a_session_on_one_partition(server, client):
    sessions = [f"ps-{i}" for i in range(8)]
    send(client, "s-part", [smsg(s, i) for i in range(3) for s in sessions])
    received = parallel(
        {s: (lambda s=s: drain_session(server.conn_str, "s-part", s, 3)) for s in sessions}
    )
    parts: dict[str, set[int]] = {}
    for s, got in received.items():
        assert [body_text(m) for m in got] == [f"{s}-{i}" for i in range(3)]
        parts[s] = {partition_of(m.sequence_number) for m in got}
    assert all(len(p) == 1 for p in parts.values()), parts
    for s, (p,) in parts.items():
        # The SessionId is the partition key: CRC-32 mod the partition count (docs/architecture.md).
        assert p == zlib.crc32(s.encode()) % PARTITIONS, (s, p)
    assert len({p for ps in parts.values() for p in ps}) > 1


# ------------------------------------------------------------------------------- refusals


def test_non_session_receiver_on_session_queue_is_refused(client):
    with pytest.raises(ServiceBusError, match="requires sessions") as info:
        with client.get_queue_receiver("s-fifo", max_wait_time=1) as r:
            r.receive_messages(max_message_count=1, max_wait_time=1)
    assert "amqp:not-allowed" in str(info.value)


def test_session_receiver_on_plain_queue_is_refused(client):
    with pytest.raises(ServiceBusError, match="does not require sessions") as info:
        with client.get_queue_receiver("s-plain", session_id="a", max_wait_time=1) as r:
            r.receive_messages(max_message_count=1, max_wait_time=1)
    assert "amqp:not-allowed" in str(info.value)


# ------------------------------------------------------------------------------- restart


def test_session_state_survives_restart(own_server):
    with ServiceBusClient.from_connection_string(own_server.conn_str, retry_total=0) as c:
        send(c, "s-persist", [smsg("keep", 0)])
        with c.get_queue_receiver("s-persist", session_id="keep", max_wait_time=1) as r:
            r.session.set_state(b"\x00\x01persisted\xff")
    own_server.restart()
    with ServiceBusClient.from_connection_string(own_server.conn_str, retry_total=0) as c:
        with c.get_queue_receiver("s-persist", session_id="keep", max_wait_time=1) as r:
            assert r.session.get_state() == b"\x00\x01persisted\xff"
            (m,) = receive_n(r, 1, timeout=10)
            assert body_text(m) == "keep-0"
            r.complete_message(m)


def test_restart_keeps_fifo_per_session_while_session_lines_are_rebuilt(own_server):
    # The server listens before it has read the session backlog (the lines are rebuilt by a
    # scan after start-up; the unit tests pin its interleavings with new sends): through
    # the SDK, the oldest session comes first and a message sent after the restart comes
    # after the older ones of its session.
    with ServiceBusClient.from_connection_string(own_server.conn_str, retry_total=0) as c:
        with c.get_queue_sender("s-persist") as sender:
            for start in range(0, 600, 300):
                sender.send_messages([smsg("abc"[i % 3], i) for i in range(start, start + 300)])
    own_server.restart()
    with ServiceBusClient.from_connection_string(own_server.conn_str, retry_total=0) as c:
        send(c, "s-persist", [smsg("c", 9999)])
        with c.get_queue_receiver(
            "s-persist", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5
        ) as r:
            assert r.session.session_id == "a"  # the session of the oldest message
        with c.get_queue_receiver(
            "s-persist",
            session_id="c",
            receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
            max_wait_time=5,
        ) as r:
            got = receive_n(r, 201, timeout=60)
        assert [body_text(m) for m in got] == [f"c-{i}" for i in range(2, 600, 3)] + ["c-9999"]


# ------------------------------------------------------------------------------- async


async def test_async_session_receiver_and_state(server):
    from azure.servicebus.aio import ServiceBusClient as AsyncClient

    async with AsyncClient.from_connection_string(server.conn_str, retry_total=0) as c:
        async with c.get_queue_sender("s-async") as sender:
            await sender.send_messages([smsg(s, i) for i in range(3) for s in ("u", "v")])
        async with c.get_queue_receiver(
            "s-async", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2
        ) as r:
            sid = r.session.session_id
            assert sid in ("u", "v")
            got: list[Any] = []
            for _ in range(10):
                got.extend(await r.receive_messages(max_message_count=10, max_wait_time=1))
                if len(got) >= 3:
                    break
            assert [body_text(m) for m in got] == [f"{sid}-{i}" for i in range(3)]
            await r.session.set_state(b"async-state")
            assert await r.session.get_state() == b"async-state"
            until = r.session.locked_until_utc
            assert await r.session.renew_lock() >= until
            for m in got:
                await r.complete_message(m)
            with pytest.raises(SessionCannotBeLockedError):
                async with c.get_queue_receiver("s-async", session_id=sid, max_wait_time=1) as r2:
                    await r2.receive_messages(max_message_count=1, max_wait_time=1)
        other = "v" if sid == "u" else "u"
        async with c.get_queue_receiver(
            "s-async",
            session_id=other,
            receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
            max_wait_time=1,
        ) as r:
            got = []
            for _ in range(10):
                got.extend(await r.receive_messages(max_message_count=10, max_wait_time=1))
                if len(got) >= 3:
                    break
            assert [body_text(m) for m in got] == [f"{other}-{i}" for i in range(3)]
