"""Celery on kombu's stock Azure Service Bus transport, unchanged, through a hosts-file line
(issue 33, item 6; kombu#2370: the transport appends ``.servicebus.windows.net`` to the
namespace and builds a connection string without the emulator flag, so no emulator can be
named to it). With ``127.0.0.1 sbemulatorns.servicebus.windows.net`` in /etc/hosts, sbemu's
certificate (``*.servicebus.windows.net``), its host check and its namespace lookup by host
name make it work as against Azure.

The hosts file and Azure's fixed ports (5671, 443) stay private: the scenario
(celery_scenario.py) runs under ``unshare --mount --net`` (root) with a hosts file of its own
bind-mounted over /etc/hosts, on a loopback where nothing else listens; sbemu's CA is added to
the system's and certifi's bundles there the same way.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import certifi
import pytest

from sbemu.admin.certs import ensure_certificates, system_ca_file

HERE = Path(__file__).resolve().parent
HOSTS = "127.0.0.1 localhost\n::1 localhost\n127.0.0.1 sbemulatorns.servicebus.windows.net\n"


def _unavailable() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs root with unshare and ip (a mount and network namespace of its own)"
    probe = subprocess.run(["unshare", "--mount", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"cannot make a mount and network namespace here: {probe.stderr.decode().strip()}"
    for module in ("celery", "kombu", "azure.servicebus"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (the test extras: make install)"
    return None


def test_a_celery_worker_runs_tasks_over_kombus_azure_transport(tmp_path: Path) -> None:
    why = _unavailable()
    if why:
        pytest.skip(why)
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    # The CA trusted as a user trusts one: added to the system's bundle (update-ca-certificates;
    # requests and OpenSSL defaults read it, REQUESTS_CA_BUNDLE often names it) and to certifi's
    # (azure-servicebus' AMQP verifies against certifi). Here a copy of each with it is
    # bind-mounted over the original in the private mount namespace (the server reuses this CA).
    ca_file, _, _ = ensure_certificates(tmp_path / "data")
    mounts = []
    for index, original in enumerate({certifi.where(), str(system_ca_file() or certifi.where())}):
        trusted = tmp_path / f"trusted-{index}.pem"
        trusted.write_text(Path(original).read_text() + "\n" + ca_file.read_text())
        mounts.append(f"mount --bind {shlex.quote(str(trusted))} {shlex.quote(original)}")
    script = " && ".join(
        ["ip link set lo up", 'mount --bind "$1" /etc/hosts', *mounts, 'shift && exec "$@"']
    )
    # trust comes from the bundles above only: a CA bundle another test's server left in this
    # process's environment (the sbemu_server fixture's, for a whole session) names another CA
    bundles = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE")
    env = {k: v for k, v in os.environ.items() if k not in bundles}
    result = subprocess.run(
        ["unshare", "--mount", "--net", "sh", "-c", script, "sh", str(hosts),
         sys.executable, str(HERE / "celery_scenario.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["resolves"] == "127.0.0.1"
    assert report["results"] == [100, 101, 102, 103, 104], report["worker_tail"]
    assert "Traceback" not in report["server_stderr"], report["server_stderr"]
    assert "Traceback" not in report["worker_tail"], report["worker_tail"]
