"""Refusals the SDK must see as the right exceptions (brief items 8, 9, 10, 14).

Unknown entities, bad/expired/foreign SAS tokens, rights, oversize messages, and a client that
sends garbage. Clients use retry_total=0 so refusals come back at once.
"""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusError,
)
from integration_support import (
    KEY,
    KEY_NAME,
    LISTEN_ONLY_KEY,
    LISTEN_ONLY_KEY_NAME,
    SEND_ONLY_KEY,
    SEND_ONLY_KEY_NAME,
    body_text,
    cbs_put_token,
    make_sas_token,
    proton_connect,
    queue_def,
    receive_n,
)

SBEMU_QUEUES = [
    queue_def("q1"),
    queue_def("pq", partitioned=True),
    queue_def("e-rights"),
    queue_def("e-big"),
    queue_def("e-garbage"),
    queue_def("e-token"),
]

AUTH_ERRORS = (ServiceBusAuthenticationError, ServiceBusAuthorizationError)


def _client(conn_str: str) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(conn_str, retry_total=0)


def _send_one(client: ServiceBusClient, queue: str, body: str = "x") -> None:
    with client, client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage(body))


def _receive_one(client: ServiceBusClient, queue: str) -> list:
    with client, client.get_queue_receiver(queue, max_wait_time=1) as receiver:
        return receiver.receive_messages(max_message_count=1, max_wait_time=1)


# ------------------------------------------------------------------------------- entities


def test_send_to_unknown_entity_raises_not_found(server):
    # Azure refuses the token put for an entity that does not exist (404 on $cbs), which the
    # SDK raises as ServiceBusAuthenticationError (its test_sb_client_bad_entity) [issue 23]
    t0 = time.monotonic()
    with pytest.raises(ServiceBusAuthenticationError):
        _send_one(_client(server.conn_str), "nope")
    assert time.monotonic() - t0 < 10, "not-found must not be retried until a timeout"


def test_receive_from_unknown_entity_raises_not_found(server):
    with pytest.raises(ServiceBusAuthenticationError):
        _receive_one(_client(server.conn_str), "nope-either")


def test_attach_to_unknown_entity_without_a_token_is_refused_not_found(server):
    """A client authenticated by SASL PLAIN puts no token: its attach is refused with
    amqp:not-found, which the SDKs read as entity not found."""
    conn = proton_connect(server)
    try:
        with pytest.raises(Exception, match="amqp:not-found"):
            conn.create_sender("nope-plain")
    finally:
        conn.close()


# ------------------------------------------------------------------------------- SAS


def test_wrong_key_raises_authentication_error(server):
    with pytest.raises(ServiceBusAuthenticationError):
        _send_one(_client(server.conn_str_for(KEY_NAME, "not-the-key")), "q1")


def test_unknown_key_name_raises_authentication_error(server):
    with pytest.raises(ServiceBusAuthenticationError):
        _send_one(_client(server.conn_str_for("NoSuchPolicy", KEY)), "q1")


def _token_send_arrives(server, token: str, body: str) -> None:
    """A send to e-token with ``token`` is accepted and its message is there to receive."""
    _send_one(_client(server.conn_str_with_token(token)), "e-token", body)
    with _client(server.conn_str) as c, c.get_queue_receiver("e-token", max_wait_time=5) as r:
        got = receive_n(r, 1)
        assert [body_text(m) for m in got] == [body]
        r.complete_message(got[0])


def test_precomputed_token_for_the_entity_works(server):
    """Control for the token tests below: a token made by make_sas_token is accepted."""
    token = make_sas_token(server.audience("e-token"), KEY_NAME, KEY, int(time.time()) + 600)
    _token_send_arrives(server, token, "with-token")


def test_namespace_wide_token_covers_every_entity(server):
    token = make_sas_token(server.audience(""), KEY_NAME, KEY, int(time.time()) + 600)
    _token_send_arrives(server, token, "ns-token")


def test_expired_token_is_refused(server):
    token = make_sas_token(server.audience("e-token"), KEY_NAME, KEY, int(time.time()) - 60)
    with pytest.raises(AUTH_ERRORS):
        _send_one(_client(server.conn_str_with_token(token)), "e-token")


def test_token_for_another_entity_is_refused(server):
    token = make_sas_token(server.audience("q1"), KEY_NAME, KEY, int(time.time()) + 600)
    with pytest.raises(AUTH_ERRORS):
        _send_one(_client(server.conn_str_with_token(token)), "pq")


def test_raw_cbs_status_codes(server):
    """The server's own verdicts, without the SDK's client-side expiry bookkeeping in the way:
    good token 200/202, expired 401, bad signature 401, foreign entity refused."""
    now = int(time.time())
    conn = proton_connect(server, mech="ANONYMOUS")
    try:
        status, desc = cbs_put_token(
            conn,
            server.audience("e-token"),
            make_sas_token(server.audience("e-token"), KEY_NAME, KEY, now + 600),
        )
        assert status in (200, 202), f"valid token refused: {status} {desc}"
        status, desc = cbs_put_token(
            conn,
            server.audience("e-token"),
            make_sas_token(server.audience("e-token"), KEY_NAME, KEY, now - 60),
        )
        assert status == 401, f"expired token: {status} {desc}"
        status, desc = cbs_put_token(
            conn,
            server.audience("e-token"),
            make_sas_token(server.audience("e-token"), KEY_NAME, "wrong-key", now + 600),
        )
        assert status == 401, f"bad signature: {status} {desc}"
        status, desc = cbs_put_token(
            conn,
            server.audience("pq"),
            make_sas_token(server.audience("q1"), KEY_NAME, KEY, now + 600),
        )
        assert status in (401, 403), f"token for q1 used for pq: {status} {desc}"
    finally:
        conn.close()


def test_raw_cbs_token_then_send_over_anonymous_connection(server):
    from proton import Message

    conn = proton_connect(server, mech="ANONYMOUS")
    try:
        audience = server.audience("e-token")
        status, desc = cbs_put_token(
            conn, audience, make_sas_token(audience, KEY_NAME, KEY, int(time.time()) + 600)
        )
        assert status in (200, 202), desc
        sender = conn.create_sender("e-token")
        sender.send(Message(body="after-cbs", id="after-cbs-1"))
    finally:
        conn.close()
    with _client(server.conn_str) as c, c.get_queue_receiver("e-token", max_wait_time=5) as r:
        got = receive_n(r, 1)
        assert [m.message_id for m in got] == ["after-cbs-1"]
        r.complete_message(got[0])


def test_anonymous_connection_without_token_cannot_attach(server):
    """Authorisation happens only through CBS [contract §1.2]: no token, no link."""
    from proton import Message
    from proton.utils import LinkDetached, SendException

    conn = proton_connect(server, mech="ANONYMOUS")
    try:
        with pytest.raises((LinkDetached, SendException)):
            sender = conn.create_sender("e-token")
            sender.send(Message(body="sneaky"))
    finally:
        try:
            conn.close()
        except Exception:
            pass


def test_send_only_policy_cannot_receive(server):
    conn_str = server.conn_str_for(SEND_ONLY_KEY_NAME, SEND_ONLY_KEY)
    _send_one(_client(conn_str), "e-rights", "sent-with-send-right")
    with pytest.raises(AUTH_ERRORS):
        _receive_one(_client(conn_str), "e-rights")
    with _client(server.conn_str) as c, c.get_queue_receiver("e-rights", max_wait_time=5) as r:
        got = receive_n(r, 1)
        assert [body_text(m) for m in got] == ["sent-with-send-right"]
        r.complete_message(got[0])


def test_listen_only_policy_cannot_send(server):
    conn_str = server.conn_str_for(LISTEN_ONLY_KEY_NAME, LISTEN_ONLY_KEY)
    with pytest.raises(AUTH_ERRORS):
        _send_one(_client(conn_str), "e-rights", "must-not-arrive")
    assert _receive_one(_client(conn_str), "e-rights") == []


# ------------------------------------------------------------------------------- size


def test_oversize_message_raises_message_size_exceeded(server):
    with pytest.raises(MessageSizeExceededError):
        _send_one(_client(server.conn_str), "e-big", "x" * (300 * 1024))


def test_oversize_message_rejected_by_server(server):
    """The SDK checks size client-side (from the attach's max-message-size), so check the broker
    with proton: the transfer is rejected with amqp:link:message-size-exceeded."""
    from proton import Delivery, Message

    conn = proton_connect(server)
    try:
        sender = conn.create_sender("e-big")
        delivery = sender.send(Message(body=b"y" * (300 * 1024)), error_states=[])
        assert delivery.remote_state == Delivery.REJECTED, f"remote state {delivery.remote_state}"
        condition = delivery.remote.condition
        assert condition is not None and condition.name == "amqp:link:message-size-exceeded", (
            condition
        )
        # The link stays usable for normal messages.
        ok = sender.send(Message(body=b"small", id="after-big"), error_states=[])
        assert ok.remote_state == Delivery.ACCEPTED
    finally:
        conn.close()
    with _client(server.conn_str) as c, c.get_queue_receiver("e-big", max_wait_time=5) as r:
        got = receive_n(r, 1)
        assert [m.message_id for m in got] == ["after-big"]
        r.complete_message(got[0])
        assert r.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_message_just_under_the_limit_round_trips(server):
    body = "z" * (250 * 1000)
    _send_one(_client(server.conn_str), "e-big", body)
    with _client(server.conn_str) as c, c.get_queue_receiver("e-big", max_wait_time=5) as r:
        got = receive_n(r, 1)
        assert len(got) == 1 and body_text(got[0]) == body
        r.complete_message(got[0])


# ------------------------------------------------------------------------------- robustness


def _read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    sock.settimeout(0.5)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def _sdk_round_trip(server, queue: str) -> None:
    marker = f"alive-{uuid.uuid4()}"
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as c:
        with c.get_queue_sender(queue) as s:
            s.send_messages(ServiceBusMessage(marker))
        with c.get_queue_receiver(queue, max_wait_time=5) as r:
            got = receive_n(r, 1)
            assert [body_text(m) for m in got] == [marker]
            r.complete_message(got[0])


def test_garbage_after_header_does_not_hurt_other_clients(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"AMQP\x00\x01\x00\x00" + b"\xff" * 64)
        _, closed = _read_until_closed(sock, 5.0)
        assert closed, "the server should close a connection that sends a malformed frame"
    _sdk_round_trip(server, "e-garbage")


@pytest.mark.parametrize(
    "header",
    [b"AMQP\x00\x02\x00\x00", b"\x00\x00\x00\x08garbage!", b"amqp\x00\x01\x00\x00"],
    ids=["unsupported-version", "binary", "lower-case"],
)
def test_wrong_protocol_header_gets_amqp_header_and_close(server, header):
    """[AMQP 2.2] an unsupported header is answered with a supported one, then the socket
    closes (HTTP and TLS, which the port serves too, are told apart by their first byte)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(header)
        data, closed = _read_until_closed(sock, 5.0)
        assert data[:4] == b"AMQP", f"reply {data[:16]!r}"
        assert closed
    _sdk_round_trip(server, "e-garbage")


def test_idle_and_half_open_connections_do_not_block_others(server):
    socks = []
    try:
        for i in range(5):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            if i % 2:
                s.sendall(b"AMQP\x03\x01")  # half a header, then silence
            socks.append(s)
        _sdk_round_trip(server, "e-garbage")
    finally:
        for s in socks:
            s.close()


_ORPHAN_SCRIPT = r"""
import sys, time
from proton.utils import BlockingConnection
conn = BlockingConnection(sys.argv[1], timeout=10, sasl_enabled=True, allowed_mechs="PLAIN",
                          user=sys.argv[2], password=sys.argv[3])
receiver = conn.create_receiver(sys.argv[4])
msg = receiver.receive(timeout=10)
print("got", msg.id, flush=True)
time.sleep(60)
"""


def test_abrupt_disconnect_releases_locks(server):
    """A receiver process that dies (no detach, no close) must not wedge the queue: its lock is
    released at the latest when LockDuration (5 s) runs out."""
    import subprocess
    import sys

    from proton import Message

    conn = proton_connect(server)
    try:
        conn.create_sender("e-garbage").send(Message(body="orphan", id="orphan-1"))
    finally:
        conn.close()
    child = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT, server.amqp_url(), KEY_NAME, KEY, "e-garbage"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()
        assert line.strip() == "got orphan-1", line
    finally:
        child.kill()
        child.wait(timeout=10)
    killed_at = time.monotonic()
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as c:
        with c.get_queue_receiver("e-garbage", max_wait_time=1) as r:
            # Short polls: this test is about the orphaned lock being released, not about a
            # waiting receiver being woken (test_settlement covers that).
            got = receive_n(r, 1, timeout=10, max_wait_time=1)
            waited = time.monotonic() - killed_at
            assert [m.message_id for m in got] == ["orphan-1"], "orphaned lock never released"
            assert waited < 5.0 + 2.5, f"lock released only after {waited:.1f}s (LockDuration 5 s)"
            r.complete_message(got[0])


def test_server_error_types_are_service_bus_errors():
    """Sanity of the exception hierarchy the tests above rely on."""
    for exc in (MessagingEntityNotFoundError, MessageSizeExceededError) + AUTH_ERRORS:
        assert issubclass(exc, ServiceBusError)
