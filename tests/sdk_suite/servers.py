"""The sbemu servers the azure-servicebus suite talks to, and how the tests reach them.

The SDK's messaging tests connect with ``ServiceBusClient(f"{namespace}{suffix}", credential)``:
no connection string, so no ``UseDevelopmentEmulator`` flag, so the SDK speaks AMQP over TLS on
port 5671 of that host (it drops any port given). One **shared** sbemu serves them, started by
the pytest controller (``start_shared``) for every xdist worker: namespace ``localhost``, TLS on
``127.0.0.1:5671``, a certificate from a local CA that ``SSL_CERT_FILE`` / ``REQUESTS_CA_BUNDLE``
make the SDK trust. Each test gets fresh entities there (``servicebus_preparer``).

The management tests empty the whole namespace (``clear_queues``) and count what is left, so
each pytest process gets a **private** sbemu for them (``private_namespace``), reached over
HTTPS on its admin port, which the admin client keeps.

Coordinates travel to the workers in the environment variable ``SBEMU_SDK_SUITE``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tls_front import TlsFront

from sbemu.admin.certs import CA_FILE, ensure_certificates
from sbemu.pytest_plugin import SbemuServer, _ca_bundle, start_server, stop_server

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
    config = {"UserConfig": {
        "Namespaces": [{"Name": "sbemulatorns", "SharedAccessPolicies": policies,
                        "Queues": [], "Topics": []}],
        "Logging": {"Type": "File"},
    }}
    path = folder / "Config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def _serve_options() -> str:
    out = subprocess.run([sys.executable, "-m", "sbemu", "serve", "--help"],
                         capture_output=True, text=True, check=False)
    return out.stdout


def _start(root: Path, name: str, ca_folder: Path, extra: list[str]) -> SbemuServer:
    data = root / name
    (data / "tls").mkdir(parents=True)
    for file in (CA_FILE, "rootCA-key.pem"):
        shutil.copy2(ca_folder / file, data / "tls" / file)
    return start_server(data, str(_config(root)), extra_args=extra)


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_shared() -> tuple[Target, list[object]]:
    """Start the shared server (and, while sbemu has no TLS listener, the TLS front)."""
    if not _port_free(AMQPS_PORT):
        raise RuntimeError(
            f"127.0.0.1:{AMQPS_PORT} is in use (another SDK-suite run on this machine?): the "
            f"SDK's tests connect to the AMQPS port {AMQPS_PORT} and no other")
    root = Path(tempfile.mkdtemp(prefix="sbemu-sdk-suite-"))
    ca_folder = root / "ca"
    ensure_certificates(ca_folder.parent / "ca-data")
    shutil.copytree(ca_folder.parent / "ca-data" / "tls", ca_folder)
    options = _serve_options()
    extra: list[str] = []
    if "--tls-port" in options:
        extra += ["--tls-port", str(AMQPS_PORT)]
    if "--ws-port" in options:
        extra += ["--ws-port", str(WSS_PORT)]
    server = _start(root, "shared", ca_folder, extra)
    handles: list[object] = [server]
    if "--tls-port" in options:
        _wait_port(AMQPS_PORT)
    else:
        front = TlsFront(ca_folder, AMQPS_PORT, server.amqp_port)
        front.start()
        handles.append(front)
        print(f"sdk-suite: this sbemu has no --tls-port; AMQPS on {AMQPS_PORT} is the harness's "
              f"TLS front to the plain AMQP port {server.amqp_port}", flush=True)
    target = Target(
        host="localhost",
        admin_connection_string=_admin_connection_string(server),
        ca_folder=str(ca_folder),
        ca_bundle=str(_ca_bundle(ca_folder / CA_FILE, root)),
        data_root=str(root),
    )
    return target, handles


def stop_all(handles: list[object]) -> None:
    for handle in reversed(handles):
        if isinstance(handle, SbemuServer):
            stop_server(handle)
        else:
            handle.stop()  # type: ignore[attr-defined]


def _admin_connection_string(server: SbemuServer) -> str:
    return (f"Endpoint=sb://localhost:{server.admin_port};SharedAccessKeyName={KEY_NAME};"
            f"SharedAccessKey={KEY};UseDevelopmentEmulator=true")


def publish(target: Target) -> None:
    """Hand the coordinates to this process's children (the xdist workers)."""
    os.environ[ENV] = json.dumps(asdict(target))


def trust_ca(bundle: str) -> None:
    """Make this process's clients trust the run's CA, as a user does with its ``rootCA.pem``.

    The HTTP clients (requests, aiohttp) read ``REQUESTS_CA_BUNDLE`` / ``SSL_CERT_FILE``. The
    SDK's AMQP transport verifies against ``certifi.where()`` unless given ``connection_verify``
    (which the tests do not pass), so in this process certifi's answer is the bundle: certifi's
    own roots plus the run's CA.
    """
    import certifi

    os.environ["SSL_CERT_FILE"] = os.environ["REQUESTS_CA_BUNDLE"] = bundle
    certifi.where = lambda: bundle


def target() -> Target:
    raw = os.environ.get(ENV)
    if not raw:
        raise RuntimeError(f"{ENV} is not set: run the SDK suite with -p sdk_suite_plugin")
    return Target(**json.loads(raw))


_private: SbemuServer | None = None


def private_namespace() -> SbemuServer:
    """This process's own sbemu for the management tests (started on first use)."""
    global _private
    if _private is None or (_private.process and _private.process.poll() is not None):
        shared = target()
        root = Path(tempfile.mkdtemp(prefix="mgmt-", dir=shared.data_root))
        _private = _start(root, "private", Path(shared.ca_folder), [])
        atexit.register(stop_server, _private)
    return _private


def private_admin_host() -> str:
    """``localhost:<admin port>``: the admin client keeps the port and speaks HTTPS to it."""
    return f"localhost:{private_namespace().admin_port}"
