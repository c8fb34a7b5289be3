"""--tls-port and --ws-port: parsing, the lines serve prints, and a port asked for but taken."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbemu.cli import UsageError, build_parser, resolve_settings
from sbemu.cli.ready import connection_string, endpoint_lines
from sbemu.config import default_config


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
