"""One connection string for everything, on Azure's port layout (issue 33, items 1 and 2).

Azure serves the management API and AMQP over WebSockets on one port, 443; the admin clients
of Python (7.15), JS (7.9), Java and Go (1.11) call HTTPS on the connection string's host and
port whatever ``UseDevelopmentEmulator`` says. So sbemu's WebSocket port answers the management
API too (Azure's string ``Endpoint=sb://localhost/`` reaches it on 443), and every AMQP port
tells AMQP, TLS and HTTP apart by the first byte: the string sbemu prints, unchanged, works
for the admin client as for the messaging client. Here on free ports (the port in the string);
test_azure_layout.py runs the same with the default ports, where the strings name none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from integration_support import KEY, KEY_NAME, make_sas_token, queue_def

JS = Path(__file__).resolve().parents[1] / "js"
SBEMU_QUEUES = [queue_def("q1"), queue_def("sq", RequiresSession=True)]


def azure_string(port: int) -> str:
    """Azure's form (no emulator flag: TLS) with the port of sbemu's 443."""
    return f"Endpoint=sb://localhost:{port}/;SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY}"


def admin_round_trip(conn: str, ca: Path, name: str) -> list[str]:
    """Create a queue, read it back, list, delete: the admin client's everyday calls."""
    with ServiceBusAdministrationClient.from_connection_string(
        conn, connection_verify=str(ca)
    ) as admin:
        admin.create_queue(name, max_delivery_count=4)
        assert admin.get_queue(name).max_delivery_count == 4
        names = [q.name for q in admin.list_queues()]
        assert admin.get_queue_runtime_properties(name).active_message_count == 0
        admin.delete_queue(name)
        return names


def test_the_websocket_port_serves_the_management_api_as_azures_443(server: Any) -> None:
    names = admin_round_trip(azure_string(server.ws_port), server.ca_file, "on-443")
    assert "on-443" in names


def test_the_printed_emulator_string_serves_the_admin_client_unchanged(server: Any) -> None:
    conn = server.ready.connection_string  # exactly what sbemu printed
    assert "UseDevelopmentEmulator=true" in conn
    names = admin_round_trip(conn, server.ca_file, "printed-string")
    assert "printed-string" in names
    # and the same string still carries messages on the same port
    with ServiceBusClient.from_connection_string(conn) as client:
        with client.get_queue_sender("q1") as sender:
            sender.send_messages(ServiceBusMessage("one string"))
        with client.get_queue_receiver("q1", max_wait_time=5) as receiver:
            got = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert [str(m) for m in got] == ["one string"]
            receiver.complete_message(got[0])


def test_the_amqps_port_serves_https_too(server: Any) -> None:
    names = admin_round_trip(azure_string(server.tls_port), server.ca_file, "on-amqps")
    assert "on-amqps" in names


def test_plain_http_on_the_amqp_port_reaches_the_management_api(server: Any) -> None:
    """Admin clients that take the emulator flag for plain HTTP (.NET's; @azure/service-bus
    after 7.9) send it to the same port: the API answers, asking for a token without one."""
    url = f"http://localhost:{server.port}/$Resources/Queues?api-version=2021-05"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401 and b"MissingToken" in refused.value.read()
    token = make_sas_token(f"sb://localhost:{server.port}/", KEY_NAME, KEY, 2**31 - 1)
    request = urllib.request.Request(url, headers={"Authorization": token})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200 and b">q1</title>" in resp.read()


def test_the_namespace_root_answers_on_443_as_on_the_admin_port(server: Any) -> None:
    """GET / with an api-version (an admin client's empty entity name) is the API's empty feed
    on both ports (the admin port's / is otherwise the dashboard)."""
    import ssl

    context = ssl.create_default_context(cafile=str(server.ca_file))
    answers = []
    for port in (server.admin_port, server.ws_port):
        token = make_sas_token(f"sb://localhost:{port}/", KEY_NAME, KEY, 2**31 - 1)
        request = urllib.request.Request(
            f"https://localhost:{port}/?api-version=2021-05", headers={"Authorization": token}
        )
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            answers.append((resp.status, resp.headers["Content-Type"], b"<feed" in resp.read()))
    assert answers[0] == answers[1] == (200, "application/atom+xml;type=feed;charset=utf-8", True)


@pytest.mark.parametrize("which", ["amqp", "ws"])
def test_amqps_on_the_amqp_port_and_on_443(server: Any, which: str) -> None:
    """A TLS connection whose first bytes inside are AMQP's header is AMQPS on any port: the
    Python SDK pointed at the AMQP port or at the 443 port with Azure's string (JS keeps the
    Endpoint's port and does the same)."""
    from azure.servicebus import TransportType

    port = server.port if which == "amqp" else server.ws_port
    with ServiceBusClient.from_connection_string(
        server.tls_conn_str(),
        connection_verify=str(server.ca_file),
        transport_type=TransportType.Amqp,
        custom_endpoint_address=f"sb://localhost:{port}",
        retry_total=0,
    ) as client:
        with client.get_queue_sender("q1") as sender:
            sender.send_messages(ServiceBusMessage(f"amqps on {which}"))
        with client.get_queue_receiver("q1", max_wait_time=5) as receiver:
            got = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert [str(m) for m in got] == [f"amqps on {which}"]
            receiver.complete_message(got[0])


@pytest.mark.parametrize("form", ["azure", "printed"])
def test_js_admin_client_with_either_string(server: Any, form: str) -> None:
    if shutil.which("node") is None or not (JS / "node_modules" / "@azure").exists():
        pytest.skip("node or tests/js/node_modules missing (`make js-deps`)")
    conn = azure_string(server.ws_port) if form == "azure" else server.ready.connection_string
    env = {
        **os.environ,
        "NODE_EXTRA_CA_CERTS": str(server.ca_file),
        "SBEMU_ADMIN_CONNECTION_STRING": conn,
    }
    out = subprocess.run(
        ["node", str(JS / "admin_client.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=JS,
    )
    assert out.returncode == 0 and "admin client ok" in out.stdout, out.stdout + out.stderr


def test_js_amqps_on_the_amqp_port(server: Any) -> None:
    """@azure/service-bus keeps the Endpoint's port: Azure's string naming the AMQP port is
    AMQPS there, sessions included."""
    if shutil.which("node") is None or not (JS / "node_modules" / "@azure").exists():
        pytest.skip("node or tests/js/node_modules missing (`make js-deps`)")
    conn = azure_string(server.port)
    out = subprocess.run(
        ["node", str(JS / "transport_client.mjs"), "amqps", conn, "q1", "sq"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NODE_EXTRA_CA_CERTS": str(server.ca_file)},
        cwd=JS,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["received"] == ["over amqps"], out.stdout + out.stderr
    assert report["state"] == "state over amqps", report
