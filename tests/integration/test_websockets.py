"""AMQP over WebSockets (/$servicebus/websocket, AMQPWSB10): ws and wss on the admin port and on
the WebSocket port (--ws-port 0 here), driven by the Python SDK's AmqpOverWebsocket transport
(sync: websocket-client; async: aiohttp) and, byte by byte, by websocket-client itself.

The SDK's WebSocket transport goes to port 443 unless ``custom_endpoint_address`` names another
(test_default_ports.py covers 443 itself); with the emulator flag it speaks plain ``ws``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import socket
import ssl
import time
import urllib.request
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.exceptions import ServiceBusConnectionError, ServiceBusError
from integration_support import (
    DEFAULT_QUEUES,
    KEY,
    KEY_NAME,
    ServerProcess,
    make_config,
    queue_def,
)
from tls_support import async_round_trip, refused_by_cbs, round_trip, sdk_client
from websocket import ABNF, WebSocketBadStatusException, create_connection

SBEMU_QUEUES = [*DEFAULT_QUEUES, queue_def("sessq", RequiresSession=True)]
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


def ws_client(server: ServerProcess, port: int, **kwargs: Any) -> ServiceBusClient:
    """A client without the emulator flag over wss to ``port`` (trusting the local CA)."""
    return sdk_client(server, port, TransportType.AmqpOverWebsocket, **kwargs)


@pytest.mark.parametrize("queue", ["q1", "pq"])
def test_wss_on_the_admin_port(server: ServerProcess, queue: str) -> None:
    with ws_client(server, server.admin_port) as client:
        round_trip(client, queue, f"wss admin port {queue}")


def test_wss_on_the_websocket_port(server: ServerProcess) -> None:
    with ws_client(server, server.ws_port) as client:
        round_trip(client, "q1", "wss websocket port")


def test_plain_ws_with_the_emulator_flag(server: ServerProcess) -> None:
    """UseDevelopmentEmulator=true: the SDK speaks ws:// (no TLS) to the custom endpoint."""
    client = ServiceBusClient.from_connection_string(
        server.conn_str,
        custom_endpoint_address=f"sb://localhost:{server.admin_port}",
        transport_type=TransportType.AmqpOverWebsocket,
        retry_total=0,
    )
    with client:
        round_trip(client, "q1", "plain ws")


def test_a_large_message_spans_websocket_frames(server: ServerProcess) -> None:
    body = bytes(range(256)) * 800  # 200 KB: many AMQP transfer frames and WebSocket messages
    with ws_client(server, server.ws_port) as client:
        round_trip(client, "q1", body)


def test_sessions_scheduling_and_deferral_over_wss(server: ServerProcess) -> None:
    with ws_client(server, server.admin_port) as client:
        with client.get_queue_sender("sessq") as sender:
            sender.send_messages(
                [ServiceBusMessage(f"s{i}", session_id="ws-session") for i in range(3)]
            )
        with client.get_queue_receiver(
            "sessq", session_id="ws-session", max_wait_time=10
        ) as receiver:
            receiver.session.set_state(b"over websockets")
            got = receiver.receive_messages(max_message_count=3, max_wait_time=10)
            assert [str(m) for m in got] == ["s0", "s1", "s2"]
            receiver.defer_message(got[0])
            for message in got[1:]:
                receiver.complete_message(message)
            (deferred,) = receiver.receive_deferred_messages([got[0].sequence_number])
            receiver.complete_message(deferred)
            assert receiver.session.get_state() == b"over websockets"
        with client.get_queue_sender("q1") as sender:
            when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
            (seq,) = sender.schedule_messages(ServiceBusMessage("later"), when)
            sender.cancel_scheduled_messages(seq)
        with client.get_queue_receiver("q1", max_wait_time=1) as receiver:
            assert receiver.peek_messages(max_message_count=5) == []


def test_async_client_over_wss(server: ServerProcess) -> None:
    got = asyncio.run(
        async_round_trip(
            server, server.admin_port, TransportType.AmqpOverWebsocket, "pq", "async wss"
        )
    )
    assert got == ["async wss"]


def test_a_wrong_key_is_refused_over_websockets(server: ServerProcess) -> None:
    with ws_client(
        server, server.admin_port, conn_str=server.tls_conn_str(KEY_NAME, KEY + "x")
    ) as client:
        with pytest.raises(ServiceBusConnectionError) as info:
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("refused"))
    assert "Status code: 401" in refused_by_cbs(info.value)


# ------------------------------------------------------------------------- the wire, directly
def raw(server: ServerProcess, port: int | None = None, **kwargs: Any) -> Any:
    kwargs.setdefault("subprotocols", ["AMQPWSB10"])
    return create_connection(
        f"ws://127.0.0.1:{port or server.admin_port}/$servicebus/websocket", timeout=10, **kwargs
    )


def test_amqp_bytes_in_binary_messages(server: ServerProcess) -> None:
    ws = raw(server)
    try:
        assert ws.getheaders()["sec-websocket-protocol"] == "AMQPWSB10"
        ws.send_binary(SASL_HEADER[:3])  # a header split over two messages is still a header
        ws.send_binary(SASL_HEADER[3:])
        data = b""
        while len(data) < 8:
            data += ws.recv()
        assert data[:8] == SASL_HEADER  # the server's SASL header, then its mechanisms
    finally:
        ws.close()


def test_wss_handshake_on_the_websocket_port(server: ServerProcess) -> None:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    ws = create_connection(
        f"wss://localhost:{server.ws_port}/$servicebus/websocket",
        timeout=10,
        subprotocols=["AMQPWSB10"],
        sslopt={"context": context},
    )
    try:
        ws.send_binary(AMQP_HEADER)
        assert ws.recv()[:8] in (AMQP_HEADER, SASL_HEADER)
    finally:
        ws.close()


def test_a_text_message_closes_with_1003(server: ServerProcess) -> None:
    ws = raw(server)
    try:
        ws.send("AMQP as text")
        opcode, frame = ws.recv_data_frame(control_frame=True)
        assert opcode == ABNF.OPCODE_CLOSE
        assert int.from_bytes(frame.data[:2], "big") == 1003
    finally:
        ws.close()


def test_ping_is_answered_with_pong(server: ServerProcess) -> None:
    ws = raw(server)
    try:
        ws.ping(b"are you there")
        opcode, frame = ws.recv_data_frame(control_frame=True)
        assert (opcode, frame.data) == (ABNF.OPCODE_PONG, b"are you there")
    finally:
        ws.close()


def test_without_the_subprotocol_the_upgrade_is_refused(server: ServerProcess) -> None:
    with pytest.raises(WebSocketBadStatusException) as info:
        raw(server, subprotocols=["mqtt"])
    assert info.value.status_code == 400


def test_a_plain_get_on_the_path_is_426(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.admin_port), timeout=10) as sock:
        sock.sendall(b"GET /$servicebus/websocket HTTP/1.1\r\nHost: localhost\r\n\r\n")
        head = sock.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 426 "), head
    assert "upgrade: websocket" in head.lower()


def _upgrade(server: ServerProcess, version: str, key: str) -> str:
    request = (
        f"GET /$servicebus/websocket HTTP/{version}\r\nHost: localhost\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.admin_port), timeout=10) as sock:
        sock.sendall(request.encode())
        return sock.recv(4096).decode("latin-1")


@pytest.mark.parametrize(
    ("version", "key"),
    [
        ("1.0", "dGhlIHNhbXBsZSBub25jZQ=="),  # [RFC 6455 4.1] an HTTP/1.1 GET
        ("1.1", "not-base64!"),
        ("1.1", "c2hvcnQ="),  # base64, but of 5 bytes
        ("1.1", "dGhlIHNhbXBsZSBub25jZSBsb25n"),  # base64 of 20 bytes
    ],
)
def test_an_upgrade_that_is_not_rfc_6455_is_400(server: ServerProcess, version: str, key: str):
    head = _upgrade(server, version, key)
    assert head.split(" ", 2)[1] == "400", head


def test_the_rfc_6455_key_is_switched(server: ServerProcess) -> None:
    head = _upgrade(server, "1.1", "dGhlIHNhbXBsZSBub25jZQ==")
    assert head.startswith("HTTP/1.1 101 "), head
    assert "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head  # [RFC 6455 1.3]'s accept for that key


def test_the_dashboard_names_each_connections_transport(server: ServerProcess) -> None:
    clients = [
        ws_client(server, server.admin_port),  # wss
        ServiceBusClient.from_connection_string(server.conn_str),  # amqp
        ServiceBusClient.from_connection_string(  # amqps
            server.tls_conn_str(),
            custom_endpoint_address=f"sb://localhost:{server.tls_port}",
            transport_type=TransportType.Amqp,
            connection_verify=str(server.ca_file),
        ),
    ]
    with contextlib.ExitStack() as stack:
        for client in clients:
            stack.enter_context(stack.enter_context(client).get_queue_sender("q1"))
        url = f"http://127.0.0.1:{server.admin_port}/api/connections"
        with urllib.request.urlopen(url, timeout=10) as resp:
            seen = {c["transport"] for c in json.load(resp)["connections"]}
    assert {"wss", "amqp", "amqps"} <= seen, seen


def test_sigterm_with_open_websocket_and_amqps_connections_stops_cleanly(
    own_server: ServerProcess,
) -> None:
    ws = raw(own_server)
    tls = ssl.create_default_context(cafile=str(own_server.ca_file)).wrap_socket(
        socket.create_connection(("127.0.0.1", own_server.tls_port), timeout=10),
        server_hostname="localhost",
    )
    try:
        ws.send_binary(SASL_HEADER)
        assert ws.recv()[:8] == SASL_HEADER
        tls.sendall(SASL_HEADER)
        assert tls.recv(8) == SASL_HEADER
        assert own_server.stop() == 0
    finally:
        ws.close()
        tls.close()
    log = own_server.stderr_text()
    assert "Traceback" not in log and "ERROR" not in log, log


# ------------------------------------------------------------------ the same limits as TCP
@pytest.fixture()
def limited(tmp_path: Any) -> Any:
    """A server allowing 2 connections, each 2 s to reach its AMQP open (sbemu.protocol.limits)."""
    from sbemu.testing import SbemuProcess

    config = tmp_path / "config.json"
    config.write_text(json.dumps(make_config([queue_def("q1")])))
    env = {**os.environ, "SBEMU_MAX_CONNECTIONS": "2", "SBEMU_HANDSHAKE_TIMEOUT": "2"}
    process = SbemuProcess(
        config=config, data_dir=tmp_path / "data", env=env, stderr=tmp_path / "server.stderr"
    )
    try:
        yield process.start()
    finally:
        process.cleanup()


def test_a_silent_websocket_is_closed_after_the_handshake_timeout(limited: Any) -> None:
    ws = create_connection(
        f"ws://127.0.0.1:{limited.admin_port}/$servicebus/websocket",
        timeout=15,
        subprotocols=["AMQPWSB10"],
    )
    try:
        started = time.monotonic()
        opcode, _ = ws.recv_data_frame(control_frame=True)  # nothing sent: the server gives up
        assert opcode == ABNF.OPCODE_CLOSE
        assert 1.5 < time.monotonic() - started < 12
    finally:
        ws.close()


def test_websocket_connections_count_against_the_connection_cap(limited: Any) -> None:
    key = "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
    ca = str(limited.ca_file)

    def client() -> ServiceBusClient:
        return ServiceBusClient.from_connection_string(
            f"Endpoint=sb://localhost/;{key}",
            connection_verify=ca,
            retry_total=0,
            transport_type=TransportType.AmqpOverWebsocket,
            custom_endpoint_address=f"sb://localhost:{limited.admin_port}",
        )

    with contextlib.ExitStack() as stack:
        for _ in range(2):  # the cap: two open connections (one over wss, one over ws is alike)
            stack.enter_context(stack.enter_context(client()).get_queue_sender("q1"))
        with pytest.raises(ServiceBusError) as info:
            with client() as third, third.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("over the cap"))
    assert "maximum number of connections" in str(info.value) + repr(info.value.__context__)


def test_wss_through_an_http_proxy(server: ServerProcess) -> None:
    """Why many users need WebSockets: only an HTTP proxy leads out. The SDK's http_proxy sends
    CONNECT to the proxy (proxy.py here, a real one) and speaks wss through the tunnel; once the
    proxy is gone the same client cannot connect (it never went around it)."""
    import proxy

    flags = [
        "--hostname",
        "127.0.0.1",
        "--port",
        "0",
        "--num-acceptors",
        "1",
        "--num-workers",
        "1",
        "--log-level",
        "WARNING",
    ]
    with proxy.Proxy(flags) as running:
        tunnel = {"proxy_hostname": "127.0.0.1", "proxy_port": running.flags.port}
        with ws_client(server, server.admin_port, http_proxy=tunnel) as client:
            round_trip(client, "q1", "through a proxy")
    with ws_client(server, server.admin_port, http_proxy=tunnel) as client:
        with pytest.raises(ServiceBusConnectionError):
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("no proxy, no way"))
