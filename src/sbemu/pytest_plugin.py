"""pytest plugin (entry point ``pytest11``): a real sbemu per test session, fresh entities per test.

Fixtures:

``sbemu_server`` (session)
    Starts ``python -m sbemu serve`` on free loopback ports with a temporary data dir and yields
    an :class:`SbemuServer`: ``connection_string`` (AMQP, for ServiceBusClient),
    ``admin_connection_string`` (for ServiceBusAdministrationClient), ``ca_file``, ports, the
    data dir. For the session, ``REQUESTS_CA_BUNDLE`` and ``SSL_CERT_FILE`` name a bundle of the
    usual CAs plus sbemu's local CA, so the admin clients' HTTPS trusts the server.
    ``--sbemu-config PATH`` (or ``SBEMU_TEST_CONFIG``) serves a Config.json instead of the
    embedded default.

``sbemu_entities`` (function)
    Hands out fresh, uniquely named entities created over the admin API and deletes them after
    the test: ``queue(**props)``, ``topic(subscriptions=("s1",), **props)``,
    ``subscription(topic, name=None, **props)``; props are the admin clients' names
    (``requires_session=True``, ``enable_partitioning=True``, ``lock_duration=timedelta(...)``).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

import pytest

__all__ = ["EntityFactory", "SbemuServer"]

START_TIMEOUT = 60.0
_AMQP = re.compile(r"listening on amqp://[^:]+:(\d+)")
_ADMIN = re.compile(r"health on http://.+:(\d+)/health")
_CONN = re.compile(r"connection string: (\S+)")
_ATOM = "http://www.w3.org/2005/Atom"
_SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"


@dataclass
class SbemuServer:
    """A running sbemu started by the plugin."""

    amqp_port: int
    admin_port: int
    connection_string: str  # AMQP: ServiceBusClient.from_connection_string(...)
    admin_connection_string: str  # ServiceBusAdministrationClient.from_connection_string(...)
    ca_file: Path
    data_dir: Path
    namespace: str = "sbemulatorns"
    key_name: str = "RootManageSharedAccessKey"
    key: str = "SAS_KEY_VALUE"
    process: subprocess.Popen[str] | None = field(default=None, repr=False)
    output: list[str] = field(default_factory=list, repr=False)

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One signed admin API request over plain HTTP; (status, body)."""
        from sbemu.sas import make_sas_token

        token = make_sas_token(
            f"sb://localhost:{self.admin_port}/", self.key_name, self.key, int(time.time()) + 3600
        )
        req = urllib.request.Request(
            f"{self.admin_url}/{path.lstrip('/')}", data=body, method=method,
            headers={"Authorization": token, "Content-Type": "application/atom+xml",
                     **(headers or {})},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


def _ca_bundle(ca_file: Path, folder: Path) -> Path:
    """The platform's CAs (or certifi's) plus sbemu's CA, in one PEM file."""
    parts: list[str] = []
    try:
        import certifi

        parts.append(Path(certifi.where()).read_text())
    except (ImportError, OSError):
        import ssl

        cafile = ssl.get_default_verify_paths().cafile
        if cafile and Path(cafile).exists():
            parts.append(Path(cafile).read_text())
    parts.append(ca_file.read_text())
    bundle = folder / "ca-bundle.pem"
    bundle.write_text("\n".join(parts))
    return bundle


def start_server(data_dir: Path, config: str | None = None,
                 extra_args: Sequence[str] = ()) -> SbemuServer:
    """Start ``sbemu serve`` on ephemeral ports and wait for its ready lines."""
    cmd = [sys.executable, "-m", "sbemu", "serve", "--port", "0", "--admin-port", "0",
           "--data-dir", str(data_dir), "--host", "127.0.0.1"]
    if config:
        cmd += ["--config", config]
    cmd += list(extra_args)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    lines: list[str] = []
    found: dict[str, str] = {}
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            for key, pattern in (("amqp", _AMQP), ("admin", _ADMIN), ("conn", _CONN)):
                match = pattern.search(line)
                if match and key not in found:
                    found[key] = match.group(1)
            if len(found) == 3:
                ready.set()
        ready.set()

    threading.Thread(target=pump, name="sbemu-output", daemon=True).start()
    if not ready.wait(START_TIMEOUT) or len(found) < 3:
        proc.kill()
        raise RuntimeError("sbemu did not start:\n" + "\n".join(lines[-30:]))
    admin = int(found["admin"])
    conn = found["conn"]
    fields = dict(p.split("=", 1) for p in conn.split(";") if "=" in p)
    admin_conn = re.sub(r"Endpoint=sb://[^;]+", f"Endpoint=sb://localhost:{admin}", conn)
    return SbemuServer(
        amqp_port=int(found["amqp"]),
        admin_port=admin,
        connection_string=conn,
        admin_connection_string=admin_conn,
        ca_file=data_dir / "tls" / "rootCA.pem",
        data_dir=data_dir,
        key_name=fields.get("SharedAccessKeyName", "RootManageSharedAccessKey"),
        key=fields.get("SharedAccessKey", "SAS_KEY_VALUE"),
        process=proc,
        output=lines,
    )


def stop_server(server: SbemuServer) -> None:
    proc = server.process
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sbemu")
    group.addoption(
        "--sbemu-config",
        default=None,
        help="Config.json for the sbemu_server fixture [SBEMU_TEST_CONFIG; default: embedded]",
    )


@pytest.fixture(scope="session")
def sbemu_server(request: pytest.FixtureRequest) -> Iterator[SbemuServer]:
    """A real sbemu for the whole test session (free ports, temporary data dir)."""
    folder = Path(tempfile.mkdtemp(prefix="sbemu-test-"))
    config = request.config.getoption("--sbemu-config") or os.environ.get("SBEMU_TEST_CONFIG")
    server = start_server(folder / "data", config)
    saved = {k: os.environ.get(k) for k in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")}
    bundle = _ca_bundle(server.ca_file, folder)
    os.environ["REQUESTS_CA_BUNDLE"] = os.environ["SSL_CERT_FILE"] = str(bundle)
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stop_server(server)
        shutil.rmtree(folder, ignore_errors=True)


def _xml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.timedelta):
        from sbemu.admin.atom import _duration

        return _duration(int(value.total_seconds() * 1000))
    return escape(str(value))


def _element(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _entry(description: str, props: dict[str, Any]) -> bytes:
    inner = "".join(
        f"<{_element(k)}>{_xml_value(v)}</{_element(k)}>" for k, v in props.items() if v is not None
    )
    return (
        f'<entry xmlns="{_ATOM}"><content type="application/xml">'
        f'<{description} xmlns="{_SB}">{inner}</{description}></content></entry>'
    ).encode()


class EntityFactory:
    """Fresh, uniquely named entities for one test; deleted afterwards."""

    def __init__(self, server: SbemuServer, prefix: str) -> None:
        self.server = server
        self.prefix = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:24] or "t"
        self.created: list[str] = []

    def _name(self) -> str:
        return f"{self.prefix}-{uuid.uuid4().hex[:8]}"

    def _put(self, path: str, description: str, props: dict[str, Any]) -> None:
        status, body = self.server.request("PUT", quote(path), _entry(description, props))
        if status != 201:
            raise RuntimeError(f"creating {path} failed: {status} {body.decode(errors='replace')}")

    def queue(self, name: str | None = None, **props: Any) -> str:
        """Create a queue (admin client property names); returns its name."""
        name = name or self._name()
        self._put(name, "QueueDescription", props)
        self.created.append(name)
        return name

    def topic(self, name: str | None = None, subscriptions: tuple[str, ...] = ("s1",),
              **props: Any) -> str:
        """Create a topic and its subscriptions; returns the topic's name."""
        name = name or self._name()
        self._put(name, "TopicDescription", props)
        self.created.append(name)
        for sub in subscriptions:
            self.subscription(name, sub)
        return name

    def subscription(self, topic: str, name: str | None = None, **props: Any) -> str:
        """Create a subscription on a topic; returns its name."""
        name = name or f"s-{uuid.uuid4().hex[:8]}"
        self._put(f"{topic}/Subscriptions/{name}", "SubscriptionDescription", props)
        return name

    def cleanup(self) -> None:
        for name in reversed(self.created):
            self.server.request("DELETE", quote(name))
        self.created.clear()


@pytest.fixture
def sbemu_entities(sbemu_server: SbemuServer, request: pytest.FixtureRequest) -> Iterator[EntityFactory]:
    """Per test: create fresh entities by name-less calls; all deleted after the test."""
    factory = EntityFactory(sbemu_server, request.node.name)
    try:
        yield factory
    finally:
        factory.cleanup()
