"""Integration fixtures: a real ``python -m sbemu serve`` subprocess on loopback, real SDKs.

One server per test module (``server``), configured from the module's ``SBEMU_QUEUES`` list when
it defines one (else ``DEFAULT_QUEUES``). Tests that stop, kill or restart the process take
``own_server`` (one per test). Everything here speaks to the server only over its public surface:
the three ready lines on stdout, AMQP on the printed port, SIGTERM/SIGKILL.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbemu.admin.access import is_loopback
from sbemu.auth.sas import make_sas_token  # noqa: F401  (the suite's tests import it from here)
from sbemu.testing import Ready, SbemuProcess, StartError

NAMESPACE = "sbemulatorns"
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
SEND_ONLY_KEY_NAME = "sendonly"
SEND_ONLY_KEY = "SEND_ONLY_KEY_VALUE"
LISTEN_ONLY_KEY_NAME = "listenonly"
LISTEN_ONLY_KEY = "LISTEN_ONLY_KEY_VALUE"

START_TIMEOUT = (
    120.0  # upper bound on the wait for the ready lines (make test starts ~20 processes at once)
)
STOP_TIMEOUT = 20.0  # seconds to wait for a clean exit after SIGTERM
PARTITIONS = 16  # Standard-tier partition count [SB partitioning P2]


# ------------------------------------------------------------------------------- configuration


def queue_def(
    name: str,
    *,
    lock_duration: str = "PT5S",
    max_delivery_count: int = 3,
    partitioned: bool = False,
    duplicate_detection: bool = False,
    ttl: str = "PT1H",
    dead_letter_on_expiration: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """One queue entry of a Config.json (Microsoft's keys plus sbemu's EnablePartitioning)."""
    props: dict[str, Any] = {
        "LockDuration": lock_duration,
        "MaxDeliveryCount": max_delivery_count,
        "RequiresSession": False,
        "RequiresDuplicateDetection": duplicate_detection,
        "DeadLetteringOnMessageExpiration": dead_letter_on_expiration,
        "DefaultMessageTimeToLive": ttl,
        "DuplicateDetectionHistoryTimeWindow": "PT20S",
        "ForwardTo": "",
        "ForwardDeadLetteredMessagesTo": "",
    }
    if partitioned:
        props["EnablePartitioning"] = True
    props.update(extra)
    return {"Name": name, "Properties": props}


def sql_rule(name: str, expression: str, action: str | None = None) -> dict[str, Any]:
    """A subscription rule with a SQL filter (and a SQL action when ``action`` is given)."""
    props: dict[str, Any] = {"FilterType": "Sql", "SqlFilter": {"SqlExpression": expression}}
    if action is not None:
        props["Action"] = {"SqlExpression": action}
    return {"Name": name, "Properties": props}


def correlation_rule(name: str, **fields: Any) -> dict[str, Any]:
    """A subscription rule with a correlation filter on ``fields``."""
    return {"Name": name, "Properties": {"FilterType": "Correlation", "CorrelationFilter": fields}}


def sub_def(name: str, rules: list[dict[str, Any]] | None = None, **props: Any) -> dict[str, Any]:
    """One subscription entry of a Config.json (no ``rules``: the ``$Default`` rule)."""
    properties: dict[str, Any] = {"LockDuration": "PT5S", "MaxDeliveryCount": 3}
    properties.update(props)
    sub: dict[str, Any] = {"Name": name, "Properties": properties}
    if rules is not None:
        sub["Rules"] = rules
    return sub


def topic_def(
    name: str, subs: list[dict[str, Any]], *, partitioned: bool = False, **props: Any
) -> dict[str, Any]:
    """One topic entry of a Config.json with its subscriptions."""
    properties: dict[str, Any] = {"DefaultMessageTimeToLive": "PT1H"}
    if partitioned:
        properties["EnablePartitioning"] = True
    properties.update(props)
    return {"Name": name, "Properties": properties, "Subscriptions": subs}


# The queues the brief asks for, plus a few spare ones so tests in one module need not share.
DEFAULT_QUEUES: list[dict[str, Any]] = [
    queue_def("q1"),
    queue_def("pq", partitioned=True),
    queue_def("pqdup", partitioned=True, duplicate_detection=True),
    queue_def("lockq"),
]


def make_config(queues: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A full Config.json document for namespace sbemulatorns with three SAS policies."""
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": NAMESPACE,
                    "SharedAccessPolicies": [
                        {"KeyName": KEY_NAME, "Key": KEY, "Rights": ["Manage", "Send", "Listen"]},
                        {"KeyName": SEND_ONLY_KEY_NAME, "Key": SEND_ONLY_KEY, "Rights": ["Send"]},
                        {
                            "KeyName": LISTEN_ONLY_KEY_NAME,
                            "Key": LISTEN_ONLY_KEY,
                            "Rights": ["Listen"],
                        },
                    ],
                    "Queues": list(queues),
                    "Topics": [],
                }
            ],
            "Logging": {"Type": "File"},
        }
    }


# ------------------------------------------------------------------------------- the process


class ServerError(RuntimeError):
    """The server process did not start, or did not stop as expected."""


class ServerProcess:
    """A ``python -m sbemu serve`` subprocess (``sbemu.testing``) with a known config file and
    data directory, kept across restarts."""

    def __init__(
        self, config_path: Path, data_dir: Path, log_dir: Path, *, ephemeral: bool = False
    ) -> None:
        self.config_path = Path(config_path)
        # serve --ephemeral: a temporary data dir of its own (not data_dir), no fsync, commits
        # on the event loop (sbemu.runtime.commitloop); gone at every stop
        self.ephemeral = ephemeral
        self.data_dir = Path(data_dir)
        self.log_dir = Path(log_dir)
        self.port = 0
        self.admin_port = 0
        self.conn_str = ""
        self.tls_port = 0  # AMQPS (the launcher passes --tls-port 0)
        self.ws_port = 0  # AMQP over WebSockets, ws and wss (--ws-port 0)
        self.host = "127.0.0.1"
        self.test_clock = True  # SBEMU_TEST_CLOCK=1: advance_clock() works
        self._launcher: SbemuProcess | None = None

    @property
    def ready(self) -> Ready:
        """The ready document of the running server (sbemu.cli.ready)."""
        assert self._launcher is not None and self._launcher.ready is not None
        return self._launcher.ready

    def wait_for_output(self, pattern: str) -> re.Match[str]:
        """The first stdout line matching ``pattern`` (sbemu.testing), waiting for it."""
        assert self._launcher is not None
        return self._launcher.wait_for_output(pattern, START_TIMEOUT)

    @property
    def proc(self) -> subprocess.Popen[str] | None:
        return self._launcher.proc if self._launcher is not None else None

    # -- life cycle
    def start(self) -> ServerProcess:
        """Start the process and wait (up to START_TIMEOUT s) for it to be ready."""
        assert not self.running, "already running"
        if self._launcher is None:
            env = dict(os.environ)
            # advance_clock(): lock expiry, TTL, schedules without sleeping
            # (loopback only: a server bound beyond it, SBEMU_HOST=0.0.0.0, refuses the switch)
            host = env.get("SBEMU_HOST") or "127.0.0.1"
            env["SBEMU_TEST_CLOCK"] = "1" if self.test_clock and is_loopback(host) else ""
            self._launcher = SbemuProcess(
                config=self.config_path, data_dir=None if self.ephemeral else self.data_dir,
                ephemeral=self.ephemeral, host=host, env=env,
                stderr=self.log_dir / "server.stderr",
            )  # fmt: skip
        try:
            ready = self._launcher.start(START_TIMEOUT)
        except StartError as exc:
            raise ServerError(str(exc)) from None
        self.port, self.admin_port, self.conn_str = (
            ready.amqp_port, ready.admin_port, ready.connection_string,
        )  # fmt: skip
        assert ready.tls_port is not None and ready.ws_port is not None, ready.document
        self.tls_port, self.ws_port = ready.tls_port, ready.ws_port
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait for exit; returns the exit code (0 expected)."""
        assert self._launcher is not None
        try:
            rc = self._launcher.stop(timeout)
        except StartError as exc:
            raise ServerError(str(exc)) from None
        assert rc is not None
        return rc

    def kill(self) -> int:
        """SIGKILL (the crash test) and wait; returns the exit code (-9)."""
        assert self._launcher is not None
        rc = self._launcher.kill()
        assert rc is not None
        return rc

    def restart(self, *, kill: bool = False) -> ServerProcess:
        """Stop (SIGTERM, or SIGKILL when ``kill``) and start again on the same data dir."""
        if kill:
            self.kill()
        else:
            rc = self.stop()
            if rc != 0:
                raise ServerError(f"SIGTERM exit code {rc}; stderr={self.stderr_text()!r}")
        return self.start()

    def admin_headers(self) -> dict[str, str]:
        """What a real client sends to the admin port's state-changing routes: a SAS token of
        a Manage key for the namespace (docs/security.md). Valid for a week of server time, so
        tests that advance the server's clock keep it."""
        token = make_sas_token(
            f"sb://localhost:{self.admin_port}/", KEY_NAME, KEY, int(time.time()) + 7 * 86400
        )
        return {"Authorization": token}

    def advance_clock(self, seconds: float) -> int:
        """Move the server's clock ``seconds`` forward (its TestClock, SBEMU_TEST_CLOCK=1): locks,
        time-to-live, schedules and idle deletion come due as if that time had passed; the
        server has swept them when this returns. Returns the server's new time (Unix ms).

        The client's clock does not move: a message's ``locked_until_utc`` (server time) is
        then later than the client's now, so the SDK's own lock check passes and settling an
        expired lock reaches the server, which refuses it (MessageLockLostError). Keep the
        steps to minutes: SAS tokens are checked on the server's clock (the SDK's last 1 h)."""
        req = urllib.request.Request(
            f"http://{self.host}:{self.admin_port}/test-clock/advance/{seconds}",
            data=b"",
            method="POST",
            headers=self.admin_headers(),
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(json.loads(resp.read())["now_ms"])

    def now(self) -> dt.datetime:
        """The server's current time (its clock may be ahead of ours: ``advance_clock``).
        Tests on a server whose clock moved compare server-stamped times with this."""
        return dt.datetime.fromtimestamp(self.advance_clock(0) / 1000, dt.timezone.utc)

    @property
    def running(self) -> bool:
        return self._launcher is not None and self._launcher.alive()

    def stderr_text(self) -> str:
        return self._launcher.stderr_tail() if self._launcher is not None else ""

    # -- addresses and credentials
    @property
    def endpoint(self) -> str:
        return f"sb://localhost:{self.port}"

    def conn_str_for(self, key_name: str = KEY_NAME, key: str = KEY) -> str:
        """A connection string for this server with the given SAS key name and key."""
        return (
            f"Endpoint=sb://localhost:{self.port};SharedAccessKeyName={key_name};"
            f"SharedAccessKey={key};UseDevelopmentEmulator=true;"
        )

    def conn_str_with_token(self, token: str) -> str:
        """A connection string carrying a precomputed SharedAccessSignature."""
        return f"Endpoint=sb://localhost:{self.port};SharedAccessSignature={token};UseDevelopmentEmulator=true"

    def audience(self, entity: str = "") -> str:
        """The CBS audience the Python SDK uses: sb://localhost:<port>/<entity>."""
        return f"sb://localhost:{self.port}/{entity}"

    def amqp_url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The local CA the AMQPS, wss and HTTPS certificates chain to (trust it to connect)."""
        return self.data_dir / "tls" / "rootCA.pem"

    def tls_conn_str(self, key_name: str = KEY_NAME, key: str = KEY) -> str:
        """A connection string without the emulator flag (TLS; the SDKs' default ports)."""
        return f"Endpoint=sb://localhost/;SharedAccessKeyName={key_name};SharedAccessKey={key}"


def start_server(
    tmp: Path, queues: Iterable[dict[str, Any]], *, ephemeral: bool = False
) -> ServerProcess:
    """Write a config under ``tmp`` and start a server on ``tmp/data`` (``ephemeral``: on a
    temporary data dir of its own, ``serve --ephemeral``)."""
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(make_config(queues), indent=2))
    server = ServerProcess(cfg, tmp / "data", tmp, ephemeral=ephemeral)
    return server.start()


def start_topics_server(
    tmp: Path, queues: Iterable[dict[str, Any]], topics: list[dict[str, Any]]
) -> ServerProcess:
    """Write a config with ``queues`` and ``topics`` (console logging) under ``tmp`` and start a
    server on ``tmp/data``."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = make_config(queues)
    config["UserConfig"]["Namespaces"][0]["Topics"] = topics
    config["UserConfig"]["Logging"] = {"Type": "Console"}
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(config, indent=2))
    return ServerProcess(cfg, tmp / "data", tmp).start()


def shutdown(server: ServerProcess) -> None:
    """Stop ``server`` if it still runs (a fixture's teardown: a failed stop is not the test's)."""
    if server.running:
        try:
            server.stop()
        except ServerError:
            pass


@pytest.fixture(scope="module")
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server for the whole module (queues from the module's SBEMU_QUEUES; a module with
    SBEMU_EPHEMERAL = True gets a ``serve --ephemeral`` one)."""
    queues = getattr(request.module, "SBEMU_QUEUES", DEFAULT_QUEUES)
    ephemeral = getattr(request.module, "SBEMU_EPHEMERAL", False)
    srv = start_server(tmp_path_factory.mktemp("sbemu"), queues, ephemeral=ephemeral)
    try:
        yield srv
    finally:
        shutdown(srv)


@pytest.fixture()
def own_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    """A server for one test (tests that stop, kill or restart it)."""
    queues = getattr(request.module, "SBEMU_QUEUES", DEFAULT_QUEUES)
    srv = start_server(tmp_path / "sbemu", queues)
    try:
        yield srv
    finally:
        shutdown(srv)


TEST_TIMEOUT = float(os.environ.get("SBEMU_IT_TIMEOUT", "90"))  # seconds per test call


class IntegrationTestTimeout(BaseException):
    """Raised into a test that ran past TEST_TIMEOUT: a BaseException, so the SDK's broad
    ``except Exception`` retry loops cannot swallow it."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A per-test watchdog (no pytest-timeout here): a hung server must fail one test, not
    stall the suite."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise IntegrationTestTimeout(f"{item.nodeid} still running after {TEST_TIMEOUT:.0f}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the server's stderr (warnings, tracebacks) to a failing test's report."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for name in ("own_server", "server"):
        srv = getattr(item, "funcargs", {}).get(name)
        if isinstance(srv, ServerProcess):
            text = srv.stderr_text().strip()
            alive = (
                "running"
                if srv.running
                else f"exited rc={srv.proc.returncode if srv.proc else None}"
            )
            report.sections.append((f"sbemu server stderr ({alive})", text or "(empty)"))
            ports = {"amqp": srv.port, "admin": srv.admin_port, "amqps": srv.tls_port,
                     "ws": srv.ws_port}  # fmt: skip
            # (imported here: the scenario scripts import this module from tests/integration
            # alone, where tests/ is not on the path)
            from serverprobe import section as refusal_section

            refusal = refusal_section(ports, str(report.longrepr), [f"server {alive}"])
            if refusal is not None:
                report.sections.append(("sbemu server after a refused connection", refusal))


# ------------------------------------------------------------------------------- SDK helpers


@pytest.fixture()
def sb_client(server: ServerProcess) -> Iterator[Any]:
    """A sync ServiceBusClient on the module's server (retry_total=1 keeps failures quick)."""
    from azure.servicebus import ServiceBusClient

    client = ServiceBusClient.from_connection_string(
        server.conn_str, retry_total=1, retry_backoff_factor=0.2
    )
    with client:
        yield client


def partition_of(sequence_number: int) -> int:
    """The partition id carried in the top 16 bits of a sequence number [SB partitioning P11]."""
    return sequence_number >> 48


def receive_n(
    receiver: Any, n: int, *, timeout: float = 15.0, max_wait_time: float = 1.0
) -> list[Any]:
    """Receive until ``n`` messages arrived or ``timeout`` s passed (works sync only)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        batch = receiver.receive_messages(
            max_message_count=min(n - len(got), 100), max_wait_time=max_wait_time
        )
        got.extend(batch)
    return got


def drain(
    client: Any, queue_name: str, *, sub_queue: Any = None, max_wait_time: float = 1.0
) -> int:
    """Receive-and-delete everything currently receivable on a queue; returns the count."""
    from azure.servicebus import ServiceBusReceiveMode

    total = 0
    with client.get_queue_receiver(
        queue_name,
        sub_queue=sub_queue,
        receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
        max_wait_time=max_wait_time,
    ) as receiver:
        while True:
            batch = receiver.receive_messages(max_message_count=100, max_wait_time=max_wait_time)
            if not batch:
                return total
            total += len(batch)


def send_plain(client: Any, queue_name: str, messages: Iterable[Any]) -> None:
    """Send each message on its own (one transfer each), on one sender link."""
    with client.get_queue_sender(queue_name) as sender:
        for m in messages:
            sender.send_messages(m)


def body_text(message: Any) -> str:
    """The body of a received message as text (data sections joined)."""
    body = message.body
    if isinstance(body, (bytes, bytearray)):
        return bytes(body).decode()
    if isinstance(body, str):
        return body
    return b"".join(bytes(b) for b in body).decode()


# ------------------------------------------------------------------------------- raw AMQP helpers


def proton_connect(
    server: ServerProcess,
    *,
    mech: str = "PLAIN",
    user: str = KEY_NAME,
    password: str = KEY,
    timeout: float = 10.0,
) -> Any:
    """A python-qpid-proton BlockingConnection to the server (SASL PLAIN by default)."""
    from proton.utils import BlockingConnection

    kwargs: dict[str, Any] = {"sasl_enabled": True, "allowed_mechs": mech}
    if mech == "PLAIN":
        kwargs.update(user=user, password=password)
    return BlockingConnection(server.amqp_url(), timeout=timeout, **kwargs)


def cbs_put_token(
    conn: Any, audience: str, token: str, *, timeout: float = 10.0
) -> tuple[int, str]:
    """Send one put-token on ``$cbs`` over a proton BlockingConnection (the JS SDK's shape:
    string message-id, reply-to = the response link's name); returns (status-code, description)."""
    import uuid as _uuid

    from proton import Message

    reply_name = f"cbs-{_uuid.uuid4()}"
    receiver = conn.create_receiver("$cbs", name=reply_name)
    sender = conn.create_sender("$cbs", name=f"cbs-req-{_uuid.uuid4()}")
    request_id = str(_uuid.uuid4())
    request = Message(
        id=request_id,
        reply_to=reply_name,
        properties={
            "operation": "put-token",
            "type": "servicebus.windows.net:sastoken",
            "name": audience,
        },
        body=token,
    )
    sender.send(request, timeout=timeout)
    response = receiver.receive(timeout=timeout)
    if receiver.fetcher.unsettled:  # the contract says pre-settled; tolerate either
        receiver.accept()
    assert response.correlation_id == request_id, (
        f"CBS response correlation-id {response.correlation_id!r} != request id {request_id!r}"
    )
    sender.close()
    receiver.close()
    props = response.properties or {}
    return int(props.get("status-code", -1)), str(props.get("status-description", ""))


# the management-plane tests' clients (admin_support.py): fixtures, so they are imported here
from admin_support import admin, sb  # noqa: E402, F401

# Test modules import the helpers above as ``from integration_support import ...``: the name
# "conftest" is ambiguous once other test directories grow their own conftest.py, an alias is
# not (pytest imports this file before any test module of this directory).
sys.modules.setdefault("integration_support", sys.modules[__name__])
