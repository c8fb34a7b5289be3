"""Run inside a fresh network namespace by test_default_ports.py (nothing else listens there).

Starts ``sbemu serve`` with its default AMQPS and WebSocket ports (5671, 443) and drives it with
connection strings that name no port at all, as production code does; then holds 5671 and 443
and starts a second server, which must run without them and say so. Prints one JSON report.
Usage: python default_ports_scenario.py <data dir> <old-SDK python> <node> <tests/js dir>
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType

from conftest import make_config, queue_def

CONN = "Endpoint=sb://localhost/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
OLD_SDK_SCRIPT = """
import sys
from azure.servicebus import ServiceBusClient, ServiceBusMessage, __version__
with ServiceBusClient.from_connection_string(sys.argv[1], connection_verify=sys.argv[2]) as c:
    with c.get_queue_sender("queue.1") as s:
        s.send_messages(ServiceBusMessage("old " + __version__))
    with c.get_queue_receiver("queue.1", max_wait_time=10) as r:
        got = r.receive_messages(max_message_count=1, max_wait_time=10)
        for m in got:
            r.complete_message(m)
print([str(m) for m in got])
"""


def start(data_dir: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """sbemu with every port at its default except AMQP and admin (ephemeral)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
    config = data_dir.parent / "config.json"
    config.write_text(
        json.dumps(
            make_config([queue_def("queue.1"), queue_def("session-queue", RequiresSession=True)])
        )
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sbemu",
            "serve",
            "--port",
            "0",
            "--admin-port",
            "0",
            "--config",
            str(config),
            "--data-dir",
            str(data_dir),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        # the WebSocket port's line (or why it is not served) comes last
        if line.startswith(("websockets on wss://", "websocket port not served")):
            break
    return proc, lines


def stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    return err


def round_trip(**kwargs: object) -> list[str]:
    with ServiceBusClient.from_connection_string(CONN, retry_total=0, **kwargs) as client:
        with client.get_queue_sender("queue.1") as sender:
            sender.send_messages(ServiceBusMessage(f"default port {kwargs.get('transport_type')}"))
        with client.get_queue_receiver("queue.1", max_wait_time=10) as receiver:
            got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            for message in got:
                receiver.complete_message(message)
    return [str(m) for m in got]


def main() -> None:
    data, old_python, node, js_dir = sys.argv[1:5]
    ca = str(Path(data) / "tls" / "rootCA.pem")
    report: dict[str, object] = {}
    proc, lines = start(Path(data))
    report["lines"] = lines
    try:
        report["amqps"] = round_trip(connection_verify=ca, transport_type=TransportType.Amqp)
        report["wss"] = round_trip(
            connection_verify=ca, transport_type=TransportType.AmqpOverWebsocket
        )
        old = subprocess.run(
            [old_python, "-c", OLD_SDK_SCRIPT, CONN, ca],
            capture_output=True,
            text=True,
            timeout=120,
        )
        report["old_sdk"] = old.stdout.strip() or old.stderr[-1500:]
        js = {}
        for mode in ("amqps", "wss"):
            run = subprocess.run(
                [
                    node,
                    str(Path(js_dir) / "transport_client.mjs"),
                    mode,
                    CONN,
                    "queue.1",
                    "session-queue",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "NODE_EXTRA_CA_CERTS": ca},
            )
            js[mode] = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr
        report["js"] = js
    finally:
        report["stderr"] = stop(proc)

    # the default ports taken: the server runs without them and says why
    with socket.socket() as tls, socket.socket() as ws:
        for sock, port in ((tls, 5671), (ws, 443)):
            # the first server's closed connections may linger in TIME_WAIT; a listener
            # stays exclusive all the same (SO_REUSEADDR lets no second listener in)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen()
        proc, lines = start(Path(data))
        report["taken_lines"] = lines
        try:
            admin = int(re.search(r"health on http://\S+?:(\d+)/", "\n".join(lines)).group(1))
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/health", timeout=10) as resp:
                report["taken_health"] = json.load(resp)["status"]
        finally:
            report["taken_stderr"] = stop(proc)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
