"""pytest plugin (entry point ``pytest11``): a real sbemu per test session, fresh entities per test.

Fixtures:

``sbemu_server`` (session)
    Starts ``sbemu serve --ephemeral`` (sbemu.testing) on free loopback ports and yields
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
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

import pytest

from .process import SbemuProcess, StartError

__all__ = ["EntityFactory", "SbemuServer", "trusting_ca"]

START_TIMEOUT = 120.0  # an upper bound on the wait for the ready document
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
    tls_port: int | None = None  # AMQPS: Endpoint=sb://localhost/ clients (trust ca_file)
    ws_port: int | None = None  # AMQP over WebSockets, ws and wss (the admin port serves them too)
    process: SbemuProcess | None = field(default=None, repr=False)
    output: list[str] = field(default_factory=list, repr=False)

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """One signed admin API request over plain HTTP; (status, body)."""
        from sbemu.auth.sas import make_sas_token

        token = make_sas_token(
            f"sb://localhost:{self.admin_port}/", self.key_name, self.key, int(time.time()) + 3600
        )
        req = urllib.request.Request(
            f"{self.admin_url}/{path.lstrip('/')}",
            data=body,
            method=method,
            headers={
                "Authorization": token,
                "Content-Type": "application/atom+xml",
                **(headers or {}),
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


def _ca_bundle(ca_file: Path, folder: Path) -> Path:
    """The platform's CAs plus sbemu's CA, in one PEM file (as ``sbemu cert --bundle``)."""
    from sbemu.admin.certs import write_ca_bundle

    return write_ca_bundle(ca_file, folder / "ca-bundle.pem")[0]


@contextmanager
def trusting_ca(ca_file: Path, folder: Path) -> Iterator[Path]:
    """While inside: ``REQUESTS_CA_BUNDLE`` and ``SSL_CERT_FILE`` name a bundle of the
    platform's CAs plus ``ca_file`` written in ``folder`` (the admin clients' HTTPS and the
    SDKs' TLS trust sbemu); the two variables are restored on the way out."""
    names = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
    saved = {k: os.environ.get(k) for k in names}
    bundle = _ca_bundle(ca_file, folder)
    os.environ.update(dict.fromkeys(names, str(bundle)))
    try:
        yield bundle
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def start_server(data_dir: Path | None, config: str | None = None) -> SbemuServer:
    """Start ``sbemu serve`` on ephemeral ports (``sbemu.testing``) and wait until it is ready.
    ``data_dir`` None: ``--ephemeral`` (a temporary data dir deleted at exit, no fsync)."""
    launcher = SbemuProcess(config=config, data_dir=data_dir, ephemeral=data_dir is None)
    try:
        ready = launcher.start(START_TIMEOUT)
    except StartError as exc:
        launcher.cleanup()
        raise RuntimeError(str(exc)) from None
    fields = dict(p.split("=", 1) for p in ready.connection_string.split(";") if "=" in p)
    return SbemuServer(
        amqp_port=ready.amqp_port,
        admin_port=ready.admin_port,
        connection_string=ready.connection_string,
        admin_connection_string=ready.admin_connection_string,
        ca_file=ready.ca_file,
        data_dir=ready.data_dir,
        key_name=fields.get("SharedAccessKeyName", "RootManageSharedAccessKey"),
        key=fields.get("SharedAccessKey", "SAS_KEY_VALUE"),
        tls_port=ready.tls_port,
        ws_port=ready.ws_port,
        process=launcher,
        output=launcher.output,
    )


def stop_server(server: SbemuServer) -> None:
    if server.process is not None:
        server.process.cleanup()


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
    server = start_server(None, config)
    try:
        with trusting_ca(server.ca_file, folder):
            yield server
    finally:
        stop_server(server)
        shutil.rmtree(folder, ignore_errors=True)


def _xml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.timedelta):
        from sbemu.admin.atom import duration_text

        return duration_text(int(value.total_seconds() * 1000))
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

    def topic(
        self, name: str | None = None, subscriptions: tuple[str, ...] = ("s1",), **props: Any
    ) -> str:
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
def sbemu_entities(
    sbemu_server: SbemuServer, request: pytest.FixtureRequest
) -> Iterator[EntityFactory]:
    """Per test: create fresh entities by name-less calls; all deleted after the test."""
    factory = EntityFactory(sbemu_server, request.node.name)
    try:
        yield factory
    finally:
        factory.cleanup()
