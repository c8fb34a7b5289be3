"""Microsoft's docker-compose template (Azure/azure-service-bus-emulator-installer,
Docker-Compose-Template/docker-compose-default.yml) as a user switching to sbemu has it
(tests/container/compose/docker-compose.yml): the image line changed, ``pull_policy: always``
dropped (a locally built image cannot be pulled), the SQL Edge service and the emulator's
``depends_on`` on it removed; everything else verbatim, its SQL settings included. Brought up
with podman-compose on the template's fixed ports (5672, 5300) under /tmp/fixed-ports.lock;
the Python SDK sends and receives on the standard connection string, the admin client creates a
queue through 5300."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from container_support import CONNECTION_STRING, Running, podman, podman_env, wait_healthy

COMPOSE_FILE = Path(__file__).resolve().parent / "compose" / "docker-compose.yml"
CONFIG = """{
  "UserConfig": {
    "Namespaces": [
      { "Name": "sbemulatorns", "Queues": [{ "Name": "compose-queue" }], "Topics": [] }
    ],
    "Logging": { "Type": "File" }
  }
}
"""


def compose(*args: str, env: dict[str, str], cwd: Path) -> str:
    tool = Path(sys.executable).parent / "podman-compose"
    result = subprocess.run(
        [str(tool), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        raise AssertionError(f"podman-compose {' '.join(args)}: {result.stdout}{result.stderr}")
    return result.stdout


@pytest.fixture
def fixed_ports() -> Iterator[None]:
    """The template publishes 5672 and 5300 on the host: one user of those ports at a time."""
    with open("/tmp/fixed-ports.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def test_microsofts_compose_template_with_the_image_line_changed(
    sbemu_image: str, fixed_ports: None, tmp_path: Path
) -> None:
    shutil.copy(COMPOSE_FILE, tmp_path / "docker-compose.yml")
    config = tmp_path / "Config.json"
    config.write_text(CONFIG)
    config.chmod(0o644)
    # the template's .env variables (Microsoft's README); SQL ones are ignored by sbemu
    env = podman_env() | {
        "CONFIG_PATH": str(config),
        "ACCEPT_EULA": "Y",
        "SQL_PASSWORD": "Unused-Passw0rd",
        "SQL_WAIT_INTERVAL": "0",
    }
    started = time.monotonic()
    try:
        compose("up", "-d", env=env, cwd=tmp_path)
        running = Running("servicebus-emulator", {5300: 5300}, started)
        print(f"podman-compose up to /health 200: {wait_healthy(running):.2f} s")
        conn = CONNECTION_STRING.format(port="")  # the standard one: sb://localhost, 5672
        body = f"through compose {uuid.uuid4()}"
        with ServiceBusClient.from_connection_string(conn) as client:
            with client.get_queue_sender("compose-queue") as sender:
                sender.send_messages(ServiceBusMessage(body))
            with client.get_queue_receiver("compose-queue", max_wait_time=10) as receiver:
                got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
                assert [str(m) for m in got] == [body]
                receiver.complete_message(got[0])
        ca = tmp_path / "rootCA.pem"
        podman("cp", "servicebus-emulator:/data/tls/rootCA.pem", str(ca))
        admin_conn = CONNECTION_STRING.format(port=":5300")
        with ServiceBusAdministrationClient.from_connection_string(
            admin_conn, connection_verify=str(ca)
        ) as admin:
            admin.create_queue("created-through-compose")
            assert {q.name for q in admin.list_queues()} == {
                "compose-queue",
                "created-through-compose",
            }
    finally:
        compose("down", "-v", env=env, cwd=tmp_path)
