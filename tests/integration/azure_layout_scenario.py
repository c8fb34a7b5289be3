"""Run by test_azure_layout.py inside ``tests/sdk_run.py --azure-ports`` (a network namespace of
its own where sbemu listens on 5672, 5671 and 443): the Python and JS admin clients, and the
Python messaging client, each given the application's own connection string unchanged.

Reads ``SBEMU_AZURE_CONNECTION_STRING`` (Azure's form, no port, no flag),
``SBEMU_CONNECTION_STRING`` (the string sbemu printed, no port, ``UseDevelopmentEmulator=true``)
and ``SBEMU_CA_FILE``; prints one JSON report.
Usage: python azure_layout_scenario.py <tests/js dir>
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient


def python_admin(conn: str, ca: str, name: str) -> list[str]:
    with ServiceBusAdministrationClient.from_connection_string(conn, connection_verify=ca) as c:
        c.create_queue(name, max_delivery_count=4)
        assert c.get_queue(name).max_delivery_count == 4
        names = [q.name for q in c.list_queues() if q.name == name]
        c.delete_queue(name)
    return names


def messaging(conn: str) -> list[str]:
    """The printed string's messaging side: AMQP on 5672, on a queue the admin client made."""
    with ServiceBusAdministrationClient.from_connection_string(
        conn, connection_verify=os.environ["SBEMU_CA_FILE"]
    ) as admin:
        admin.create_queue("one-string")
    with ServiceBusClient.from_connection_string(conn) as client:
        with client.get_queue_sender("one-string") as sender:
            sender.send_messages(ServiceBusMessage("over 5672"))
        with client.get_queue_receiver("one-string", max_wait_time=10) as receiver:
            got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            for message in got:
                receiver.complete_message(message)
    return [str(m) for m in got]


def js_admin(js_dir: str, conn: str, ca: str) -> str:
    run = subprocess.run(
        ["node", str(Path(js_dir) / "admin_client.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=js_dir,
        env={**os.environ, "NODE_EXTRA_CA_CERTS": ca, "SBEMU_ADMIN_CONNECTION_STRING": conn},
    )
    out = run.stdout.strip().splitlines()
    return out[-1] if run.returncode == 0 and out else (run.stdout + run.stderr)[-1500:]


def main() -> None:
    js_dir = sys.argv[1]
    ca = os.environ["SBEMU_CA_FILE"]
    strings = {
        "azure": os.environ["SBEMU_AZURE_CONNECTION_STRING"],
        "printed": os.environ["SBEMU_CONNECTION_STRING"],
    }
    report: dict[str, object] = {"strings": strings}
    for form, conn in strings.items():
        report[f"python_{form}"] = python_admin(conn, ca, f"py-{form}")
        report[f"js_{form}"] = js_admin(js_dir, conn, ca)
    report["messaging"] = messaging(strings["printed"])
    print(json.dumps(report))


if __name__ == "__main__":
    main()
