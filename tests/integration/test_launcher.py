"""sbemu.testing's launcher and the two serve options it rests on: --ready-file, --ephemeral."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from sbemu.testing import SbemuProcess


def test_ready_file_names_what_a_client_needs_and_ephemeral_leaves_nothing() -> None:
    server = SbemuProcess(ephemeral=True)
    try:
        ready = server.start()
        doc = json.loads(server.ready_path.read_text())
        assert doc["pid"] == server.pid == ready.pid
        assert doc["ephemeral"] is True
        assert ready.connection_string.startswith(f"Endpoint=sb://localhost:{ready.amqp_port};")
        assert f"sb://localhost:{ready.admin_port};" in ready.admin_connection_string
        assert [ns["name"] for ns in ready.namespaces] == ["sbemulatorns"]
        assert ready.namespaces[0]["amqp_port"] == ready.amqp_port
        assert ready.data_dir.is_dir() and ready.ca_file.is_file()
        url = f"http://127.0.0.1:{ready.admin_port}/health"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200
        # SIGTERM the moment the server is ready: a clean stop, and the data dir is gone
        assert server.stop() == 0
        assert not ready.data_dir.exists()
    finally:
        server.cleanup()


def test_a_restart_keeps_the_data_dir_and_reports_this_starts_stderr(tmp_path: Path) -> None:
    server = SbemuProcess(
        data_dir=tmp_path / "data", stderr=tmp_path / "server.stderr", log_level="info"
    )
    try:
        first = server.start()
        assert server.stop() == 0
        second = server.start()
        assert second.data_dir == first.data_dir == tmp_path / "data"
        assert server.stderr_text().startswith("--- start 2")
        assert "--- start 1" in server.stderr_text(all_starts=True)
        assert server.kill() == -9
    finally:
        server.cleanup()


def test_ephemeral_refuses_a_data_dir(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sbemu", "serve", "--ephemeral", "--data-dir", str(tmp_path),
         "--port", "0", "--admin-port", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--ephemeral uses a temporary data dir of its own: drop --data-dir" in proc.stderr
