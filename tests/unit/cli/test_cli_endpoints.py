"""--tls-port and --ws-port: parsing, the lines serve prints, and a port asked for but taken."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sbemu.cli import UsageError, build_parser, resolve_settings
from sbemu.config import default_config
from sbemu.ready import connection_string, endpoint_lines


def settings(argv: list[str], env: dict[str, str] | None = None):  # noqa: ANN201
    return resolve_settings(build_parser().parse_args(["serve", *argv]), env or {}, Path("/w"))


def test_defaults_are_5671_and_443_and_optional() -> None:
    s = settings([])
    assert (s.tls_port, s.ws_port) == ((5671, False), (443, False))


@pytest.mark.parametrize(
    ("argv", "env", "tls", "ws"),
    [
        (["--tls-port", "0"], {}, (0, True), (443, False)),
        (["--tls-port", "off", "--ws-port", "8443"], {}, None, (8443, True)),
        ([], {"SBEMU_TLS_PORT": "OFF", "SBEMU_WS_PORT": "0"}, None, (0, True)),
        (["--ws-port", "off"], {"SBEMU_WS_PORT": "9000"}, (5671, False), None),
        ([], {"SBEMU_TLS_PORT": ""}, (5671, False), (443, False)),  # empty = unset
    ],
)
def test_tls_and_ws_ports(argv: list[str], env: dict[str, str], tls: object, ws: object) -> None:
    s = settings(argv, env)
    assert (s.tls_port, s.ws_port) == (tls, ws)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            ["--tls-port", "70000"],
            {},
            "invalid --tls-port '70000': must be an integer from 0 to 65535 or off",
        ),
        ([], {"SBEMU_WS_PORT": "no"}, "invalid SBEMU_WS_PORT 'no'"),
    ],
)
def test_unusable_ports(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        settings(argv, env)


def test_endpoint_lines() -> None:
    lines = endpoint_lines(default_config(), "127.0.0.1", 5300, 5671, 443, [], "/d/tls/rootCA.pem")
    assert lines == [
        "amqps on amqps://127.0.0.1:5671 (certificate from the CA /d/tls/rootCA.pem)",
        "connection string (TLS): Endpoint=sb://localhost/;SharedAccessKeyName="
        "RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;",
        "websockets on ws://127.0.0.1:5300/$servicebus/websocket and wss:// (AMQPWSB10)",
        "websockets on wss://127.0.0.1:443/$servicebus/websocket and ws:// (AMQPWSB10)",
    ]


def test_endpoint_lines_for_other_ports_and_unserved_defaults() -> None:
    lines = endpoint_lines(
        default_config(), "::1", 5300, 15671, None, ["websocket port not served: why"], "/ca"
    )
    assert lines == [
        "amqps on amqps://[::1]:15671 (certificate from the CA /ca)",
        "connection string (TLS): Endpoint=sb://localhost:15671/;SharedAccessKeyName="
        "RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;",
        # the Python SDK drops that port without the emulator flag: the form that works
        "python (azure-servicebus drops this port from the Endpoint): "
        'ServiceBusClient.from_connection_string(<TLS string>, custom_endpoint_address="sb://'
        'localhost:15671", transport_type=TransportType.Amqp, connection_verify="/ca") (7.13 and '
        "older take custom_endpoint_address as WebSockets: give the wss port there)",
        "websockets on ws://[::1]:5300/$servicebus/websocket and wss:// (AMQPWSB10)",
        "websocket port not served: why",
    ]


def test_strings_name_the_bound_address_beyond_loopback() -> None:
    lines = endpoint_lines(default_config(), "127.0.0.2", 5300, 5671, None, [], "/ca")
    assert lines[1].startswith("connection string (TLS): Endpoint=sb://127.0.0.2/;")
    config = default_config()
    assert connection_string(config, 5674, host="127.0.0.2").startswith(
        "Endpoint=sb://127.0.0.2:5674;"
    )
    assert connection_string(config, 5674, host="0.0.0.0").startswith(
        "Endpoint=sb://localhost:5674;"
    )
    assert connection_string(config, 5672, host="fd00::5").startswith("Endpoint=sb://[fd00::5];")


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
