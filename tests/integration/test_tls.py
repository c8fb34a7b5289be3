"""AMQPS (--tls-port): connection strings without UseDevelopmentEmulator, with the local CA trusted.

The Python SDK connects to port 5671 whatever the Endpoint's port says (it strips it when the
emulator flag is absent), so these tests point it at the ephemeral TLS port with
``custom_endpoint_address`` and ``transport_type=TransportType.Amqp``; the default port itself
is tested in tests/integration/test_default_ports.py. Trust comes from ``connection_verify``
(a CA file) or ``ssl_context`` (an ``ssl.create_default_context()``, which reads
``SSL_CERT_FILE``; the SDK's own default is certifi's bundle, which ignores that variable).
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.exceptions import (
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusConnectionError,
)
from integration_support import KEY, KEY_NAME, SEND_ONLY_KEY, SEND_ONLY_KEY_NAME, ServerProcess
from tls_support import async_round_trip, old_sdk_python, refused_by_cbs, round_trip, sdk_client


def tls_client(server: ServerProcess, **kwargs: Any) -> ServiceBusClient:
    """A client as production code builds it (no emulator flag), aimed at the TLS port."""
    return sdk_client(server, server.tls_port, TransportType.Amqp, **kwargs)


@pytest.mark.parametrize("queue", ["q1", "pq"])
def test_connection_verify_with_the_ca_file(server: ServerProcess, queue: str) -> None:
    with tls_client(server) as client:
        round_trip(client, queue, f"over amqps to {queue}")


def test_ssl_cert_file_through_a_default_context(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_file))
    context = ssl.create_default_context()  # what OpenSSL's SSL_CERT_FILE feeds
    with tls_client(server, connection_verify=None, ssl_context=context) as client:
        round_trip(client, "q1", "trusted through SSL_CERT_FILE")


def test_ssl_cert_file_alone_is_not_read_by_the_sdk(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What docs/clients.md says: without connection_verify or ssl_context the SDK verifies
    against certifi's bundle, so SSL_CERT_FILE by itself does not make it trust the CA."""
    monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_file))
    with tls_client(server, connection_verify=None) as client:
        with pytest.raises((ServiceBusConnectionError, ServiceBusAuthenticationError)) as info:
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("never sent"))
    assert "CERTIFICATE_VERIFY_FAILED" in repr(info.value) + repr(info.value.__cause__)


def test_async_client_over_amqps(server: ServerProcess) -> None:
    got = asyncio.run(
        async_round_trip(server, server.tls_port, TransportType.Amqp, "q1", "async amqps")
    )
    assert got == ["async amqps"]


def test_a_client_without_the_ca_refuses_the_server(server: ServerProcess) -> None:
    """The SDK's own default trust (certifi's bundle) does not know the local CA: its TLS
    verification fails the connection, before any AMQP is spoken."""
    with tls_client(server, connection_verify=None) as client:
        with pytest.raises((ServiceBusConnectionError, ServiceBusAuthenticationError)) as info:
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("never sent"))
    assert "CERTIFICATE_VERIFY_FAILED" in repr(info.value) + repr(info.value.__cause__)
    with tls_client(server) as client:  # the server is unharmed
        round_trip(client, "q1", "after a refused client")


def test_a_wrong_key_is_refused_over_amqps(server: ServerProcess) -> None:
    bad = server.tls_conn_str(KEY_NAME, KEY + "x")
    with tls_client(server, conn_str=bad) as client:
        with pytest.raises(ServiceBusConnectionError) as info:
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("refused"))
    assert "Status code: 401" in refused_by_cbs(info.value)


def test_send_only_key_cannot_receive_over_amqps(server: ServerProcess) -> None:
    send_only = server.tls_conn_str(SEND_ONLY_KEY_NAME, SEND_ONLY_KEY)
    with tls_client(server, conn_str=send_only) as client:
        with client.get_queue_sender("lockq") as sender:
            sender.send_messages(ServiceBusMessage("send-only key"))
        with pytest.raises(ServiceBusAuthorizationError, match="'Listen' claim"):
            with client.get_queue_receiver("lockq", max_wait_time=2) as receiver:
                receiver.receive_messages(max_message_count=1, max_wait_time=2)
    with tls_client(server) as client:
        with client.get_queue_receiver("lockq", max_wait_time=10) as receiver:
            got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert [str(m) for m in got] == ["send-only key"]
            receiver.complete_message(got[0])


def test_plain_amqp_on_the_tls_port_gets_no_amqp(server: ServerProcess) -> None:
    """An AMQP header sent in the clear to the TLS port is not taken for a TLS handshake."""
    with socket.create_connection(("127.0.0.1", server.tls_port), timeout=10) as sock:
        sock.sendall(b"AMQP\x00\x01\x00\x00")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    assert not data.startswith(b"AMQP")


# ---------------------------------------------------------------------- an SDK before the flag
OLD_SDK_SCRIPT = """
import sys
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType, __version__
conn_str, port, ca = sys.argv[1:4]
client = ServiceBusClient.from_connection_string(
    conn_str, custom_endpoint_address=f"sb://localhost:{port}",
    transport_type=TransportType.AmqpOverWebsocket, connection_verify=ca, retry_total=0)
with client:
    with client.get_queue_sender("q1") as sender:
        sender.send_messages(ServiceBusMessage("from " + __version__))
    with client.get_queue_receiver("q1", max_wait_time=10) as receiver:
        got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        for message in got:
            receiver.complete_message(message)
print("received:", [str(m) for m in got])
"""


def test_an_sdk_older_than_the_emulator_flag(server: ServerProcess) -> None:
    python = old_sdk_python()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SSL_CERT_FILE")}
    result = subprocess.run(
        [
            str(python),
            "-c",
            OLD_SDK_SCRIPT,
            server.tls_conn_str(),
            str(server.admin_port),
            str(server.ca_file),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "received: ['from 7.13.0']"
