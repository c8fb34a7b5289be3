"""The management-plane tests' shared set-up (test_admin_api, test_admin_parity,
test_cbs_entities): the real azure-servicebus clients on the pytest plugin's sbemu_server,
unique entity names, and @azure/service-bus's admin-client scripts run with node.

The fixtures reach the tests through tests/integration/conftest.py (which imports them); the
helpers are imported as ``from admin_support import ...`` (a name no other test directory uses).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient
from azure.servicebus.management import ServiceBusAdministrationClient

from sbemu.testing.pytest_plugin import SbemuServer

JS_ROOT = Path(__file__).resolve().parents[1] / "js"


@pytest.fixture
def admin(sbemu_server: SbemuServer) -> Iterator[ServiceBusAdministrationClient]:
    """The admin client on sbemu's admin connection string (HTTPS, the local CA trusted)."""
    with ServiceBusAdministrationClient.from_connection_string(
        sbemu_server.admin_connection_string
    ) as client:
        yield client


@pytest.fixture
def sb(sbemu_server: SbemuServer) -> Iterator[ServiceBusClient]:
    """An AMQP client on the same server."""
    with ServiceBusClient.from_connection_string(sbemu_server.connection_string) as client:
        yield client


def unique(prefix: str) -> str:
    """An entity name no other test (or earlier run on the shared server) uses."""
    return f"{prefix}-{os.urandom(4).hex()}"


def run_js_admin_script(server: SbemuServer, script: str, ok_line: str, amqp: bool = False) -> None:
    """Run tests/js/<script> with node against `server`'s admin port (skips when
    @azure/service-bus is not installed); it must exit 0 and print `ok_line`."""
    module = JS_ROOT / "node_modules" / "@azure" / "service-bus"
    node_path = os.environ.get("NODE_PATH", "")
    if not module.exists() and not any(
        (Path(p) / "@azure" / "service-bus").exists() for p in node_path.split(os.pathsep) if p
    ):
        pytest.skip("@azure/service-bus is not installed in tests/js/node_modules (make install)")
    env = dict(
        os.environ,
        NODE_EXTRA_CA_CERTS=str(server.ca_file),
        SBEMU_ADMIN_CONNECTION_STRING=server.admin_connection_string,
    )
    if amqp:  # the script also opens an AMQP client
        env["SBEMU_CONNECTION_STRING"] = server.connection_string
    out = subprocess.run(
        ["node", str(JS_ROOT / script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=JS_ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert ok_line in out.stdout
