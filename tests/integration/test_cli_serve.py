"""`python -m sbemu serve` as a subprocess: one-line start-up errors with exit 2, the ready lines,
health, and a clean stop on SIGTERM (the settings themselves: tests/unit/cli/test_cli.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from sbemu import __version__

# ------------------------------------------------------------------------------------------------
# python -m sbemu serve, as a subprocess
# ------------------------------------------------------------------------------------------------


def sbemu(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
    return subprocess.run(
        [sys.executable, "-m", "sbemu", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_broken_config_exits_2_with_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"UserConfig": {"Namespaces": [\n')
    result = sbemu(
        "serve", "--config", str(broken), "--port", "0", "--admin-port", "0", cwd=tmp_path
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"sbemu: config error: {broken}: line 2 column 1: invalid JSON")
    assert result.stdout == ""


def test_invalid_config_exits_2_with_json_path(tmp_path: Path) -> None:
    config = tmp_path / "Config.json"
    config.write_text(
        json.dumps(
            {
                "UserConfig": {
                    "Namespaces": [
                        {
                            "Name": "sbemulatorns",
                            "Queues": [{"Name": "q", "Properties": {"LockDuration": "PT1S"}}],
                        }
                    ]
                }
            }
        )
    )
    result = sbemu("serve", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        f"sbemu: config error: {config}: UserConfig.Namespaces[0].Queues[0].Properties.LockDuration: "
        "PT1S is out of range: must be between PT5S and PT5M\n"
    )


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    result = sbemu("serve", "--config", "nope.json", cwd=tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr
        == f"sbemu: config error: {tmp_path / 'nope.json'}: cannot read file: No such file or directory\n"
    )


def test_out_of_range_port_exits_2_with_one_line(tmp_path: Path) -> None:
    result = sbemu("serve", "--port", "99999", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "sbemu: invalid --port '99999': must be an integer from 0 to 65535\n"


def test_port_in_use_exits_2_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = sbemu(
            "serve", "--port", str(port), "--admin-port", "0", "--data-dir", str(tmp_path / "data"),
            "--log-level", "warning",  # the one line is the CLI's; info chatter is not under test
            cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sbemu: ") and str(port) in lines[0]
    assert result.stdout == ""


def test_serve_prints_ready_lines_serves_health_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
    env["SBEMU_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sbemu", "serve", "--port", "0", "--admin-port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().rstrip("\n") for _ in range(3)]
        assert lines[0].startswith(f"sbemu {__version__} listening on amqp://127.0.0.1:"), lines
        assert lines[0].endswith(" for namespace sbemulatorns")
        amqp_port = int(lines[0].split("amqp://127.0.0.1:")[1].split()[0])
        assert amqp_port not in (0, 5672)
        assert lines[1].startswith("health on http://127.0.0.1:") and lines[1].endswith("/health")
        assert lines[2] == (
            f"connection string: Endpoint=sb://localhost:{amqp_port};"
            "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
            "UseDevelopmentEmulator=true;"
        )
        health_url = lines[1].removeprefix("health on ")
        with urllib.request.urlopen(health_url, timeout=10) as response:
            assert response.status == 200
            assert json.load(response)["status"] == "healthy"
        with socket.create_connection(("127.0.0.1", amqp_port), timeout=10):
            pass  # the AMQP port accepts connections
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
