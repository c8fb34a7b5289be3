"""``sbemu serve --container`` (SBEMU_CONTAINER=1, set in sbemu's image): Microsoft's emulator
image's defaults under the user's own settings, the SQL Server settings ignored with one line,
the up line the Java Testcontainers module waits for, and Microsoft's /health body. The image
itself is driven in tests/container."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from sbemu.cli import Settings, build_parser, resolve_settings
from sbemu.cli.container import UP_LINE, container_defaults, ignored_settings_line


def settings(argv: list[str], env: dict[str, str]) -> Settings:
    return resolve_settings(build_parser().parse_args(["serve", *argv]), env, Path("/work"))


def test_container_defaults_bind_all_and_take_emulator_http_port() -> None:
    s = settings([], {"SBEMU_CONTAINER": "1", "EMULATOR_HTTP_PORT": "5301"})
    assert (s.container, s.host, s.admin_port, s.port) == (True, "0.0.0.0", 5301, 5672)
    assert s.config_path is None  # no Config.json mounted: the embedded default
    assert settings(["--container"], {}).host == "0.0.0.0"


def test_the_users_own_settings_win_over_the_container_defaults() -> None:
    env = {
        "SBEMU_CONTAINER": "1",
        "EMULATOR_HTTP_PORT": "5301",
        "SBEMU_ADMIN_PORT": "5400",
        "SBEMU_HOST": "127.0.0.1",
    }
    s = settings([], env)
    assert (s.host, s.admin_port) == ("127.0.0.1", 5400)
    assert settings(["--admin-port", "5500"], env).admin_port == 5500


def test_without_container_mode_microsofts_variables_change_nothing() -> None:
    s = settings([], {"EMULATOR_HTTP_PORT": "5301", "SBEMU_CONTAINER": "0"})
    assert (s.container, s.host, s.admin_port) == (False, "127.0.0.1", 5300)


def test_the_mounted_config_json_is_read_when_there(tmp_path: Path) -> None:
    config = tmp_path / "Config.json"
    assert "config" not in container_defaults({}, config)
    config.write_text("{}")
    assert container_defaults({}, config)["config"] == str(config)


def test_sql_server_settings_are_named_in_one_line() -> None:
    assert ignored_settings_line({"EMULATOR_HTTP_PORT": "5300"}) is None
    line = ignored_settings_line(
        {"SQL_SERVER": "sqledge", "ACCEPT_EULA": "Y", "MSSQL_SA_PASSWORD": "x"}
    )
    assert line is not None and "\n" not in line
    assert line.startswith("ignoring SQL_SERVER, MSSQL_SA_PASSWORD, ACCEPT_EULA:")
    assert "x" not in line.split(":", 1)[1].split()  # never the password's value


def test_container_mode_serves_and_prints_the_up_line_last(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
    env |= {
        "SBEMU_CONTAINER": "1",
        "SBEMU_DATA_DIR": str(tmp_path / "data"),
        "SBEMU_HOST": "127.0.0.1",  # a test binds loopback only (the user's setting wins)
        "SBEMU_PORT": "0",
        "EMULATOR_HTTP_PORT": "0",
        "SBEMU_TLS_PORT": "off",
        "SBEMU_WS_PORT": "off",
        "SQL_SERVER": "sqledge",
        "SQL_WAIT_INTERVAL": "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "sbemu", "serve"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.rstrip("\n") == UP_LINE:
                break
        assert lines[-1] == UP_LINE and lines.count(UP_LINE) == 1, lines
        health_url = next(x for x in lines if x.startswith("health on ")).removeprefix("health on ")
        with urllib.request.urlopen(health_url, timeout=10) as response:
            body = json.load(response)
        assert response.status == 200
        assert body["status"] == "healthy" and body["message"] == "Service is healthy."
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        stderr = proc.stderr.read()
        ignored = [x for x in stderr.splitlines() if "ignoring SQL_SERVER" in x]
        assert len(ignored) == 1 and "SQL_WAIT_INTERVAL" in ignored[0], stderr
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
