"""Microsoft's docker-compose template (Azure/azure-service-bus-emulator-installer,
Docker-Compose-Template/docker-compose-default.yml) as a user switching to sbemu has it
(tests/container/compose/docker-compose.yml): the image line changed, ``pull_policy: always``
dropped (a locally built image cannot be pulled), the SQL Edge service and the emulator's
``depends_on`` on it removed; everything else verbatim, its SQL settings included. Brought up
with podman-compose; a compose override file of the test's own (``ports: !override``) publishes
5672 and 5300 on ephemeral loopback ports instead of the template's fixed ones, so the test
needs no free port 5672 on the machine. The Python SDK sends and receives on the standard
connection string (the published port added), the admin client creates a queue through 5300."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from container_support import (
    Running,
    podman,
    podman_env,
    published_ports,
    wait_healthy,
)

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
# the test's own override (compose merges it over the template): ephemeral host ports
OVERRIDE = """services:
  emulator:
    ports: !override
      - "127.0.0.1::5672"
      - "127.0.0.1::5300"
"""


def compose(*args: str, env: dict[str, str], cwd: Path) -> str:
    tool = Path(sys.executable).parent / "podman-compose"
    result = subprocess.run(
        [str(tool), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        raise AssertionError(f"podman-compose {' '.join(args)}: {result.stdout}{result.stderr}")
    return result.stdout


def test_microsofts_compose_template_with_the_image_line_changed(
    sbemu_image: str, tmp_path: Path
) -> None:
    shutil.copy(COMPOSE_FILE, tmp_path / "docker-compose.yml")
    (tmp_path / "docker-compose.override.yml").write_text(OVERRIDE)
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
    # the template names its container and network: clear what an interrupted run left
    subprocess.run(
        [str(Path(sys.executable).parent / "podman-compose"), "down", "-v"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=300,
    )
    started = time.monotonic()
    try:
        compose("up", "-d", env=env, cwd=tmp_path)
        ports = published_ports("servicebus-emulator", (5672, 5300))
        running = Running("servicebus-emulator", ports, started)
        print(f"podman-compose up to /health 200: {wait_healthy(running):.2f} s")
        conn = running.connection_string()  # the standard one, with the published port
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
        admin_conn = running.connection_string(5300)
        with ServiceBusAdministrationClient.from_connection_string(
            admin_conn, connection_verify=str(ca)
        ) as admin:
            admin.create_queue("created-through-compose")
            assert {q.name for q in admin.list_queues()} == {
                "compose-queue",
                "created-through-compose",
            }
    finally:
        # down -v removes the project's named volumes; the image's anonymous /data volume too
        mounts = podman(
            "inspect",
            "servicebus-emulator",
            "--format",
            "{{range .Mounts}}{{.Name}} {{end}}",
            check=False,
        ).split()
        compose("down", "-v", env=env, cwd=tmp_path)
        if mounts:
            podman("volume", "rm", "-f", *mounts, check=False)
