"""sbemu.testcontainer.SbemuContainer, the Testcontainers-python class sbemu ships (Python has
none for Microsoft's emulator), on the podman Docker API: a mounted Config.json, the standard
connection string on the published port, the admin client on the management port."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from container_support import LABEL, run_label

CONFIG = """{
  // the test's own entities
  "UserConfig": {
    "Namespaces": [{ "Name": "sbemulatorns", "Queues": [{ "Name": "tc-python" }], "Topics": [] }],
    "Logging": { "Type": "Console" }
  }
}
"""


@pytest.fixture
def testcontainers_env(docker_host: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from testcontainers.core.config import ConnectionMode, testcontainers_config

    monkeypatch.setenv("DOCKER_HOST", docker_host)
    monkeypatch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")  # its image cannot be pulled here
    # this sandbox looks like a container to testcontainers, which would then aim at a gateway
    # address; the ports are published on this host (TESTCONTAINERS_CONNECTION_MODE, read at
    # import, says the same)
    monkeypatch.setattr(
        testcontainers_config, "connection_mode_override", ConnectionMode.docker_host
    )
    yield


def test_sbemu_container_in_a_pytest_fixture(
    sbemu_image: str, testcontainers_env: None, tmp_path: Path
) -> None:
    from sbemu.testcontainer import SbemuContainer

    config = tmp_path / "Config.json"
    config.write_text(CONFIG)
    config.chmod(0o644)
    with SbemuContainer(sbemu_image, config=config, labels={LABEL: run_label("tc-python")}) as sb:
        with urllib.request.urlopen(sb.get_health_url(), timeout=10) as response:
            assert json.load(response)["message"] == "Service is healthy."
        body = f"from testcontainers-python {uuid.uuid4()}"
        with ServiceBusClient.from_connection_string(sb.get_connection_string()) as client:
            with client.get_queue_sender("tc-python") as sender:
                sender.send_messages(ServiceBusMessage(body))
            with client.get_queue_receiver("tc-python", max_wait_time=10) as receiver:
                got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
                assert [str(m) for m in got] == [body]
                receiver.complete_message(got[0])
        ca = tmp_path / "rootCA.pem"
        ca.write_bytes(sb.get_ca_certificate())
        with ServiceBusAdministrationClient.from_connection_string(
            sb.get_admin_connection_string(), connection_verify=str(ca)
        ) as admin:
            assert [q.name for q in admin.list_queues()] == ["tc-python"]
