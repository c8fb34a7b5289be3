"""`sbemu serve` with an AMQPS or WebSocket port asked for but taken: exit 2 with one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(("flag", "what"), [("--tls-port", "AMQPS"), ("--ws-port", "WebSockets")])
def test_a_port_asked_for_but_taken_stops_the_start(tmp_path: Path, flag: str, what: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
    other = "--ws-port" if flag == "--tls-port" else "--tls-port"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "sbemu",
                "serve",
                "--port",
                "0",
                "--admin-port",
                "0",
                flag,
                str(port),
                other,
                "off",
                "--data-dir",
                str(tmp_path / "data"),
                "--log-level",
                "warning",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=tmp_path,
        )
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines == [f"sbemu: cannot listen on 127.0.0.1:{port} ({what}): Address already in use"]
