"""Helpers of the TLS and WebSocket tests (test_tls, test_websockets, test_default_ports): the
client a production program builds (no emulator flag, the local CA trusted) aimed at one port
over one transport, a round trip through it, the azure-servicebus release before the flag.

Imported as ``from tls_support import ...`` (a name no other test directory uses)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusConnectionError

if TYPE_CHECKING:
    from integration_support import ServerProcess

ROOT = Path(__file__).resolve().parents[2]

# The last azure-servicebus release before UseDevelopmentEmulator support (added in 7.14.0):
# code written against it must reach sbemu with the CA trusted. It strips the Endpoint's port
# and takes any custom_endpoint_address as a WebSocket address (whatever transport_type says),
# so on a test port it speaks wss (websocket-client is its optional WebSocket dependency);
# AMQPS on the default port 5671 is tested in test_default_ports.py. Dependencies pinned too.
OLD_SDK = (
    "azure-servicebus==7.13.0",
    "websocket-client==1.9.0",
    "azure-core==1.41.0",
    "isodate==0.7.2",
    "typing-extensions==4.16.0",
)


def old_sdk_python() -> Path:
    """A virtual environment with azure-servicebus 7.13.0 from PyPI (made once, kept in .venv,
    rebuilt when the pins change)."""
    home = ROOT / ".venv" / "old-sdk" / OLD_SDK[0].replace("==", "-")
    python = home / "bin" / "python"
    stamp = home / ".installed"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time (xdist workers)
        if not stamp.exists() or stamp.read_text() != " ".join(OLD_SDK):
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
            result = subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    *OLD_SDK,
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if result.returncode != 0:
                pytest.fail(f"pip install {' '.join(OLD_SDK)} failed:\n{result.stderr[-2000:]}")
            stamp.write_text(" ".join(OLD_SDK))
    return python


def refused_by_cbs(error: BaseException) -> str:
    """The $cbs verdict behind an SDK error. With a custom_endpoint_address the Python SDK
    maps every authentication failure to ServiceBusConnectionError ("for uamqp parity"), so
    the class alone does not say it; the CBS status in the error's context does."""
    assert isinstance(error, (ServiceBusAuthenticationError, ServiceBusConnectionError)), error
    return repr(error.__context__)


def sdk_client(
    server: ServerProcess, port: int, transport: TransportType, **kwargs: Any
) -> ServiceBusClient:
    """A client as production code builds it (no emulator flag) aimed at `port` over
    `transport`, trusting the local CA (connection_verify) unless told otherwise; `conn_str`
    replaces the server's TLS connection string."""
    kwargs.setdefault("connection_verify", str(server.ca_file))
    return ServiceBusClient.from_connection_string(
        kwargs.pop("conn_str", server.tls_conn_str()),
        custom_endpoint_address=f"sb://localhost:{port}",
        transport_type=transport,
        retry_total=0,
        **kwargs,
    )


def round_trip(client: ServiceBusClient, queue: str, body: str | bytes) -> None:
    """Send one message, receive it, complete it; the queue is empty afterwards."""
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage(body))
    with client.get_queue_receiver(queue, max_wait_time=10) as receiver:
        got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        assert len(got) == 1
        assert b"".join(got[0].body) == (body.encode() if isinstance(body, str) else body)
        receiver.complete_message(got[0])
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


async def async_round_trip(
    server: ServerProcess, port: int, transport: TransportType, queue: str, body: str
) -> list[str]:
    """The async client (SDK retries as they come) sends `body` to `queue` over `transport` to
    `port` and receives and completes what came back; the bodies received."""
    from azure.servicebus.aio import ServiceBusClient as AsyncClient

    client = AsyncClient.from_connection_string(
        server.tls_conn_str(),
        custom_endpoint_address=f"sb://localhost:{port}",
        transport_type=transport,
        connection_verify=str(server.ca_file),
    )
    async with client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages(ServiceBusMessage(body))
        async with client.get_queue_receiver(queue) as receiver:
            got = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            for message in got:
                await receiver.complete_message(message)
            return [str(m) for m in got]
