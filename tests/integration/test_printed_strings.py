"""The connection strings sbemu prints work as printed (issue 33, item 4), with the real Python
SDK, for the host and port flags: the emulator string (plain AMQP), the TLS string (with the
`custom_endpoint_address` line sbemu prints for Python on a port other than 5671: the SDK drops
the Endpoint's port without the emulator flag) and the admin string.

Each server binds 127.0.0.2 or 127.0.0.1 on ephemeral ports (``sbemu.testing``); before, every
string named ``localhost`` (127.0.0.1), so a server on 127.0.0.2 was unreachable as printed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.management import ServiceBusAdministrationClient
from integration_support import make_config, queue_def

from sbemu.testing import SbemuProcess


@pytest.fixture(params=["127.0.0.1", "127.0.0.2"])
def printed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SbemuProcess]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(make_config([queue_def("printed")])))
    proc = SbemuProcess(
        config=config, data_dir=tmp_path / "data", host=request.param, log_level="info"
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        proc.cleanup()


def _line(proc: SbemuProcess, pattern: str) -> re.Match[str]:
    return proc.wait_for_output(pattern, 30)


def _round_trip(client: ServiceBusClient, body: str) -> None:
    with client:
        with client.get_queue_sender("printed") as sender:
            sender.send_messages(ServiceBusMessage(body))
        with client.get_queue_receiver("printed", max_wait_time=10) as receiver:
            got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert [str(m) for m in got] == [body]
            receiver.complete_message(got[0])


def test_the_emulator_string_works_as_printed(printed: SbemuProcess) -> None:
    conn = _line(printed, r"^connection string: (\S+)$").group(1)
    assert printed.ready is not None and conn == printed.ready.connection_string
    _round_trip(ServiceBusClient.from_connection_string(conn, retry_total=0), "emulator")


def test_the_tls_string_works_with_the_printed_python_line(printed: SbemuProcess) -> None:
    conn = _line(printed, r"^connection string \(TLS\): (\S+)$").group(1)
    python = _line(printed, r"^python .*custom_endpoint_address=\"([^\"]+)\".*")
    ca = re.search(r'connection_verify="([^"]+)"', python.group(0))
    assert ca is not None
    assert printed.ready is not None and printed.ready.tls_port is not None
    assert f":{printed.ready.tls_port}" in conn  # JS, Java and Go honour it
    assert python.group(1) == printed.ready.document["tls_custom_endpoint_address"]
    client = ServiceBusClient.from_connection_string(
        conn,
        custom_endpoint_address=python.group(1),
        transport_type=TransportType.Amqp,
        connection_verify=ca.group(1),
        retry_total=0,
    )
    _round_trip(client, "amqps")


def test_the_admin_string_works_as_written(printed: SbemuProcess) -> None:
    assert printed.ready is not None
    with ServiceBusAdministrationClient.from_connection_string(
        printed.ready.admin_connection_string,
        connection_verify=str(printed.ready.ca_file),
        retry_total=0,
    ) as admin:
        assert admin.get_queue("printed").name == "printed"
