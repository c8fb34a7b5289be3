"""Run by test_celery_kombu.py inside a private mount and network namespace whose /etc/hosts maps
``sbemulatorns.servicebus.windows.net`` to 127.0.0.1 (nothing else of the machine changes).

Starts sbemu with Azure's ports (AMQPS 5671; the management API on 443), then a Celery worker
whose broker is kombu's stock Azure Service Bus transport, configured as for Azure:
``azureservicebus://RootManageSharedAccessKey:SAS_KEY_VALUE@sbemulatorns`` (kombu appends
``.servicebus.windows.net`` and builds a connection string without the emulator flag, for its
AMQP client and its admin client alike). The CA is trusted as a user trusts one: the test
added it to the system's and certifi's bundles (in its private mount namespace). Sends tasks, waits for their results and prints one JSON report.
Usage: python celery_scenario.py <scratch dir>
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from sbemu.testing import SbemuProcess

HOST = "sbemulatorns.servicebus.windows.net"
TASKS = """
from celery import Celery

app = Celery(
    "tasks",
    broker="azureservicebus://RootManageSharedAccessKey:SAS_KEY_VALUE@sbemulatorns",
    backend="file://{results}",
)
app.conf.broker_connection_retry_on_startup = True


@app.task
def add(x, y):
    return x + y
"""


def main() -> None:
    scratch = Path(sys.argv[1])
    report: dict[str, object] = {"resolves": socket.gethostbyname(HOST)}
    server = SbemuProcess(
        data_dir=scratch / "data",
        stderr=scratch / "server.stderr",
        args=("--tls-port", "5671", "--ws-port", "443"),
    )
    server.start()
    worker: subprocess.Popen[str] | None = None
    try:
        (scratch / "results").mkdir()
        app_dir = scratch / "app"
        app_dir.mkdir()
        (app_dir / "tasks.py").write_text(TASKS.format(results=scratch / "results"))
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", "solo",
             "--loglevel", "info", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=app_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        sys.path.insert(0, str(app_dir))
        from tasks import add  # type: ignore[import-not-found]

        started = time.monotonic()
        results = [add.delay(i, 100) for i in range(5)]
        report["results"] = [r.get(timeout=120) for r in results]
        report["seconds"] = round(time.monotonic() - started, 1)
    finally:
        if worker is not None:
            worker.terminate()
            out, _ = worker.communicate(timeout=60)
            report["worker_tail"] = out[-3000:]
        server.stop()
        report["server_stderr"] = server.stderr_text(all_starts=True)[-3000:]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
