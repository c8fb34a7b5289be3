"""What a started server announces: the ready lines on stdout and the ``--ready-file`` JSON.

The lines are for people (``make run``); the JSON file is for programs (``sbemu.testing``, the
benches, CI scripts): it is written atomically once every listener is up, before the lines are
printed, so a launcher that has read the first ready line can read the file, and a launcher
that waits for the file never reads a half-written one. Fields (all present):

``pid``, ``host``, ``amqp_port``, ``admin_port``, ``data_dir``, ``ephemeral``, ``ca_file``
(the local CA that signs the admin port's and TLS listeners' certificates),
``connection_string`` (the first namespace's first SAS policy, emulator flag set),
``admin_connection_string`` (the same key, endpoint on the admin port, for
ServiceBusAdministrationClient), ``tls_port`` (AMQPS; null when not served),
``tls_connection_string`` (no emulator flag; null without AMQPS),
``tls_custom_endpoint_address`` (what the Python SDK needs besides it on a port other than 5671,
as ``custom_endpoint_address`` with ``transport_type=TransportType.Amqp``; null on 5671),
``ws_port`` (AMQP over
WebSockets, ws and wss; null when not served; the admin port serves them too),
``websocket_path``, ``namespaces``: one object per namespace with ``name``,
``amqp_port`` (its own AmqpPort, or the main port) and ``connection_string``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sbemu import __version__
from sbemu.atomicfile import atomic_write
from sbemu.config import Config

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_TLS_PORT",
    "client_host",
    "connection_string",
    "endpoint_lines",
    "python_tls_line",
    "tls_custom_endpoint",
    "tls_connection_string",
    "namespace_port_lines",
    "ready_document",
    "ready_lines",
    "write_ready_file",
]

DEFAULT_PORT = 5672  # the AMQP port the SDKs assume under UseDevelopmentEmulator=true
DEFAULT_TLS_PORT = 5671  # AMQPS, the SDKs' port without the emulator flag
WEBSOCKET_PATH = "/$servicebus/websocket"


# the hosts a client reaches as "localhost": the loopback addresses and the wildcards
LOCALHOST_BINDS = frozenset({"127.0.0.1", "::1", "localhost", "0.0.0.0", "::", ""})


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def client_host(host: str) -> str:
    """The host a client names to reach a server bound to ``host``: ``localhost`` for the
    loopback addresses and the wildcards (what the SDKs and the certificate expect), else the
    bound address itself (``--host 127.0.0.2``: localhost would reach 127.0.0.1)."""
    return "localhost" if host.strip().lower() in LOCALHOST_BINDS else _shown(host)


def connection_string(
    config: Config, amqp_port: int, namespace: int = 0, host: str = "127.0.0.1"
) -> str:
    """The emulator connection string for a namespace's first SAS policy, for a server bound
    to ``host``."""
    policy = config.namespaces[namespace].sas_policies[0]
    name = client_host(host)
    endpoint = f"sb://{name}" if amqp_port == DEFAULT_PORT else f"sb://{name}:{amqp_port}"
    return (
        f"Endpoint={endpoint};SharedAccessKeyName={policy.key_name};"
        f"SharedAccessKey={policy.key};UseDevelopmentEmulator=true;"
    )


def ready_lines(config: Config, host: str, amqp_port: int, admin_port: int) -> list[str]:
    """The lines printed once the server listens."""
    shown_host = _shown(host)
    names = ", ".join(ns.name for ns in config.namespaces)
    return [
        f"sbemu {__version__} listening on amqp://{shown_host}:{amqp_port} for namespace {names}",
        f"health on http://{shown_host}:{admin_port}/health",
        f"connection string: {connection_string(config, amqp_port, host=host)}",
        f"dashboard on http://{shown_host}:{admin_port}/ (Prometheus metrics on /metrics)",
    ]


def namespace_port_lines(config: Config, host: str, ports: dict[str, int]) -> list[str]:
    """One line per namespace served on its own AmqpPort, with its connection string."""
    return [
        f"namespace {ns.name} on amqp://{_shown(host)}:{ports[ns.name]}: "
        + connection_string(config, ports[ns.name], i, host)
        for i, ns in enumerate(config.namespaces)
        if ns.name in ports
    ]


def tls_connection_string(config: Config, tls_port: int, host: str = "127.0.0.1") -> str:
    """The connection string a client that verifies TLS uses (no emulator flag). JS, Java
    and Go honour its port; Python drops it (see python_tls_line)."""
    policy = config.namespaces[0].sas_policies[0]
    name = client_host(host)
    endpoint = f"sb://{name}/" if tls_port == DEFAULT_TLS_PORT else f"sb://{name}:{tls_port}/"
    return (
        f"Endpoint={endpoint};SharedAccessKeyName={policy.key_name};SharedAccessKey={policy.key};"
    )


def tls_custom_endpoint(tls_port: int, host: str = "127.0.0.1") -> str | None:
    """What the Python SDK needs besides the TLS connection string to reach AMQPS on a port
    other than 5671 (its ``custom_endpoint_address``); None on 5671."""
    if tls_port == DEFAULT_TLS_PORT:
        return None
    return f"sb://{client_host(host)}:{tls_port}"


def python_tls_line(tls_port: int, host: str, ca_file: str) -> str | None:
    """The form that works for azure-servicebus on a non-default AMQPS port: without the
    emulator flag it drops the Endpoint's port and connects to 5671 (7.14 and later honour
    ``custom_endpoint_address`` with ``transport_type=TransportType.Amqp``; 7.13 and older take
    any custom endpoint as WebSockets)."""
    custom = tls_custom_endpoint(tls_port, host)
    if custom is None:
        return None
    return (
        "python (azure-servicebus drops this port from the Endpoint): "
        f'ServiceBusClient.from_connection_string(<TLS string>, custom_endpoint_address="{custom}", '
        f'transport_type=TransportType.Amqp, connection_verify="{ca_file}") '
        "(7.13 and older take custom_endpoint_address as WebSockets: give the wss port there)"
    )


def endpoint_lines(
    config: Config,
    host: str,
    admin_port: int,
    tls_port: int | None,
    ws_port: int | None,
    unserved: Sequence[str],
    ca_file: str,
) -> list[str]:
    """The AMQPS and WebSocket lines (after the ready lines): where, the CA to trust, and the
    connection string without the emulator flag; last, why a default port is not served."""
    shown_host = _shown(host)
    out: list[str] = []
    if tls_port is not None:
        out.append(f"amqps on amqps://{shown_host}:{tls_port} (certificate from the CA {ca_file})")
        out.append(f"connection string (TLS): {tls_connection_string(config, tls_port, host)}")
        python = python_tls_line(tls_port, host, ca_file)
        if python is not None:
            out.append(python)
    path = WEBSOCKET_PATH
    out.append(f"websockets on ws://{shown_host}:{admin_port}{path} and wss:// (AMQPWSB10)")
    if ws_port is not None:
        out.append(f"websockets on wss://{shown_host}:{ws_port}{path} and ws:// (AMQPWSB10)")
    out.extend(unserved)
    return out


def ready_document(
    config: Config,
    *,
    host: str,
    amqp_port: int,
    admin_port: int,
    namespace_ports: dict[str, int],
    data_dir: Path,
    ephemeral: bool,
    tls_port: int | None = None,
    ws_port: int | None = None,
) -> dict[str, Any]:
    """The ``--ready-file`` JSON object (see the module docstring)."""
    policy = config.namespaces[0].sas_policies[0]
    return {
        "version": __version__,
        "pid": os.getpid(),
        "host": host,
        "amqp_port": amqp_port,
        "admin_port": admin_port,
        "data_dir": str(data_dir),
        "ephemeral": ephemeral,
        "ca_file": str(data_dir / "tls" / "rootCA.pem"),
        "connection_string": connection_string(config, amqp_port, host=host),
        "admin_connection_string": (
            f"Endpoint=sb://{client_host(host)}:{admin_port};SharedAccessKeyName={policy.key_name};"
            f"SharedAccessKey={policy.key};UseDevelopmentEmulator=true;"
        ),
        "tls_port": tls_port,
        "tls_connection_string": (
            tls_connection_string(config, tls_port, host) if tls_port is not None else None
        ),
        "tls_custom_endpoint_address": (
            tls_custom_endpoint(tls_port, host) if tls_port is not None else None
        ),
        "ws_port": ws_port,
        "websocket_path": WEBSOCKET_PATH,
        "namespaces": [
            {
                "name": ns.name,
                "amqp_port": namespace_ports.get(ns.name, amqp_port),
                "connection_string": connection_string(
                    config, namespace_ports.get(ns.name, amqp_port), i, host
                ),
            }
            for i, ns in enumerate(config.namespaces)
        ],
    }


def write_ready_file(path: Path, document: dict[str, Any]) -> None:
    """Write the ready JSON atomically (a reader sees the whole document or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(document, indent=2).encode() + b"\n")
