"""The sbemu servers the azure-servicebus suite talks to, and how the tests reach them.

The SDK's messaging tests connect with ``ServiceBusClient(f"{namespace}{suffix}", credential)``:
no connection string, so no ``UseDevelopmentEmulator`` flag, so the SDK speaks AMQP over TLS on
port 5671 of that host (it drops any port given), and AMQP over WebSockets on 443. One
**shared** sbemu serves them, started by the pytest controller (``start_shared``) for every
xdist worker with ``--tls-port 5671 --ws-port 443``: namespace ``localhost``, a certificate from
the run's CA that the harness makes the SDK trust (``trust_ca``). Each test gets fresh entities
there (``servicebus_preparer``).

The management tests empty the whole namespace (``clear_queues``) and count what is left, so
each pytest process gets a **private** sbemu for them (``private_admin_host``), reached over
HTTPS on its admin port, which the admin client keeps.

Every server of a run shares one CA. Coordinates travel to the workers in ``SBEMU_SDK_SUITE``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from sbemu.admin.certs import CA_FILE, ensure_certificates, write_ca_bundle
from sbemu.testing import Ready, SbemuProcess

ENV = "SBEMU_SDK_SUITE"
AMQPS_PORT = 5671
WSS_PORT = 443
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
# Namespace-level SAS policies the namespace authorization-rule preparer hands out, by rights
# (Azure creates them through Resource Manager; sbemu reads namespace policies from Config.json).
POLICIES = {
    ("listen",): ("sdklisten", "SDK_LISTEN_KEY_VALUE"),
    ("send",): ("sdksend", "SDK_SEND_KEY_VALUE"),
    ("listen", "manage", "send"): ("sdkmanage", "SDK_MANAGE_KEY_VALUE"),
}


@dataclass
class Target:
    """Where the tests find the shared server (what crosses to the xdist workers)."""

    host: str  # the namespace host the SDK's TLS connections go to (port 5671)
    admin_connection_string: str  # plain HTTP admin API, for the preparers
    ca_folder: str  # rootCA.pem + rootCA-key.pem every server of the run shares
    ca_bundle: str
    data_root: str


def _config(folder: Path) -> Path:
    policies = [{"KeyName": KEY_NAME, "Key": KEY, "Rights": ["Manage", "Send", "Listen"]}]
    for rights, (name, key) in POLICIES.items():
        policies.append({"KeyName": name, "Key": key, "Rights": [r.title() for r in rights]})
    config = {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "SharedAccessPolicies": policies,
                    "Queues": [],
                    "Topics": [],
                }
            ],
            "Logging": {"Type": "File"},
        }
    }
    path = folder / "Config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def _start(root: Path, ca_folder: Path, args: list[str]) -> tuple[SbemuProcess, Ready]:
    data = root / "data"
    (data / "tls").mkdir(parents=True)
    for file in (CA_FILE, "rootCA-key.pem"):
        shutil.copy2(ca_folder / file, data / "tls" / file)
    process = SbemuProcess(
        config=_config(root), data_dir=data, args=args, stderr=root / "server.stderr"
    )
    return process, process.start()


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_shared() -> tuple[Target, list[SbemuProcess]]:
    """Start the shared server: AMQPS on 5671 and WebSockets on 443 of 127.0.0.1."""
    if not _port_free(AMQPS_PORT):
        raise RuntimeError(
            f"127.0.0.1:{AMQPS_PORT} is in use (another SDK-suite run on this machine?): the "
            f"SDK's tests connect to the AMQPS port {AMQPS_PORT} and no other"
        )
    root = Path(tempfile.mkdtemp(prefix="sbemu-sdk-suite-"))
    ensure_certificates(root / "ca-data")
    ca_folder = root / "ca-data" / "tls"
    process, ready = _start(
        root / "shared", ca_folder, ["--tls-port", str(AMQPS_PORT), "--ws-port", str(WSS_PORT)]
    )
    if ready.tls_port != AMQPS_PORT:
        process.cleanup()
        raise RuntimeError(f"sbemu serves no AMQPS on port {AMQPS_PORT}:\n{process.stderr_tail()}")
    if ready.ws_port != WSS_PORT:
        print(
            f"sdk-suite: sbemu could not bind the WebSocket port {WSS_PORT} (not root?): the "
            "SDK's WebSocket tests will fail",
            flush=True,
        )
    target = Target(
        host="localhost",
        admin_connection_string=ready.admin_connection_string,
        ca_folder=str(ca_folder),
        ca_bundle=str(write_ca_bundle(ca_folder / CA_FILE, root / "ca-bundle.pem")[0]),
        data_root=str(root),
    )
    return target, [process]


def stop_all(processes: list[SbemuProcess]) -> None:
    for process in processes:
        process.cleanup()


def publish(target: Target) -> None:
    """Hand the coordinates to this process's children (the xdist workers)."""
    os.environ[ENV] = json.dumps(asdict(target))


def trust_ca(bundle: str) -> None:
    """Make this process's clients trust the run's CA, as a user does with its ``rootCA.pem``.

    The HTTP clients (requests, aiohttp) read ``REQUESTS_CA_BUNDLE`` / ``SSL_CERT_FILE``. The
    SDK's AMQP transport verifies against ``certifi.where()`` unless given ``connection_verify``
    (which the tests do not pass), so in this process certifi's answer is the bundle: the
    system's roots plus the run's CA.
    """
    import certifi

    os.environ["SSL_CERT_FILE"] = os.environ["REQUESTS_CA_BUNDLE"] = bundle
    certifi.where = lambda: bundle


def target() -> Target:
    raw = os.environ.get(ENV)
    if not raw:
        raise RuntimeError(f"{ENV} is not set: run the SDK suite with -p sbemu_sdk_suite")
    return Target(**json.loads(raw))


_private: tuple[SbemuProcess, Ready] | None = None


def private_admin_host() -> str:
    """``localhost:<admin port>`` of this process's own sbemu for the management tests (started
    on first use): the admin client keeps the port and speaks HTTPS to it."""
    global _private
    if _private is None or not _private[0].alive():
        shared = target()
        root = Path(tempfile.mkdtemp(prefix="mgmt-", dir=shared.data_root))
        _private = _start(root, Path(shared.ca_folder), [])
        atexit.register(_private[0].cleanup)
    return f"localhost:{_private[1].admin_port}"
