"""The default ports, 5671 (AMQPS) and 443 (wss), with connection strings that name no port.

Other processes on a shared machine may hold 5671 or 443 at any moment (the SDKs' own test
suites listen on 5671), so the scenario (default_ports_scenario.py) runs in a network namespace
of its own (``unshare --net``, root): a loopback where nothing else listens. There the Python
SDK (7.15 and 7.13, the release before the emulator flag) and the JS SDK in Node reach sbemu
with ``Endpoint=sb://localhost/`` over AMQPS and WebSockets, and a second server, started while
5671 and 443 are held, runs without them and says so (exit status 0, a warning, the lines).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tls_support import old_sdk_python

HERE = Path(__file__).resolve().parent
JS = HERE.parent / "js"


def _namespace_missing() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs root with unshare and ip (a network namespace of its own)"
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot make a network namespace here: {probe.stderr.decode().strip()}"
    if shutil.which("node") is None or not (JS / "node_modules" / "@azure").exists():
        return "node or tests/js/node_modules missing (`make js-deps`)"
    return None


def test_default_ports_without_a_port_in_the_connection_string(tmp_path: Path) -> None:
    reason = _namespace_missing()
    if reason:
        pytest.skip(reason)
    old_python = old_sdk_python()
    script = 'ip link set lo up && exec "$0" "$@"'
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    result = subprocess.run(
        [
            "unshare",
            "--net",
            "sh",
            "-c",
            script,
            sys.executable,
            str(HERE / "default_ports_scenario.py"),
            str(tmp_path / "data"),
            str(old_python),
            shutil.which("node") or "node",
            str(JS),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    lines = report["lines"]
    assert any(line.startswith("amqps on amqps://127.0.0.1:5671 ") for line in lines), lines
    assert (
        "connection string (TLS): Endpoint=sb://localhost/;SharedAccessKeyName="
        "RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
    ) in lines
    assert any(
        line.startswith("websockets on wss://127.0.0.1:443/$servicebus/websocket") for line in lines
    ), lines
    assert report["amqps"] == ["default port TransportType.Amqp"]
    assert report["wss"] == ["default port TransportType.AmqpOverWebsocket"]
    assert report["old_sdk"] == "['old 7.13.0']"
    for mode in ("amqps", "wss"):
        assert json.loads(report["js"][mode]) == {
            "received": [f"over {mode}"],
            "left": 0,
            "session": f"s-{mode}",
            "sessionBodies": ["in a session"],
            "state": f"state over {mode}",
        }, report["js"]
    assert "Traceback" not in report["stderr"], report["stderr"]

    taken = report["taken_lines"]
    assert (
        "amqps not served: cannot listen on 127.0.0.1:5671 (AMQPS): Address already in use" in taken
    ), taken
    assert (
        "websocket port not served: cannot listen on 127.0.0.1:443 (WebSockets): Address "
        "already in use" in taken
    ), taken
    assert not any(line.startswith("amqps on") for line in taken), taken
    assert report["taken_health"] == "healthy"
    assert "serving without AMQPS" in report["taken_stderr"], report["taken_stderr"]
