"""Every admin route's rule, checked on the wire: the test walks the server's route table and
sends each route a request from loopback, from another address (a network namespace) and as a
forged browser request (``Origin: http://evil.example``, ``text/plain``, ``Host:
rebind.evil.example``), without and with each kind of credential, and checks the policy's answer
against the route's rule (sbemu.admin.policy). docs/security.md lists the same table.

Allowed means the request reached its handler (whatever it answered: 200, 400, 404); refused
means 401, 403, or the page's redirect to /login. The sample requests are harmless (an entity
that does not exist, a partition brought online that is online).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from adminnet import Call, InProcessServer, NetNamespace, send
from hardening.common import KEY, KEY_NAME, NAMESPACE, make_config, queue_def

from sbemu.admin.policy import Need
from sbemu.admin.routes import RouteInfo
from sbemu.auth.sas import make_sas_token

ROOT = Path(__file__).resolve().parents[2]
POLICIES = [
    {"KeyName": KEY_NAME, "Key": KEY, "Rights": ["Manage", "Send", "Listen"]},
    {"KeyName": "sendonly", "Key": "SEND_KEY", "Rights": ["Send"]},
]
CONFIG = make_config([queue_def("q1")], policies=POLICIES)
# what follows a prefix route's pattern in the sample request (harmless if it gets through)
SUFFIX = {
    "/partitions": f"/{NAMESPACE}/q1/0/online",
    "/entities": f"/{NAMESPACE}/q1/status/Active",
    "/purge": f"/{NAMESPACE}/no-such-entity",
    "/test-clock/advance": "/0",
    "/static": "/app.css",
    "/": "no-such-entity",
}
FORGED = {
    "Origin": "http://evil.example",
    "Content-Type": "text/plain",
    "Host": "rebind.evil.example",
}


def sample_path(route: RouteInfo) -> str:
    path = re.sub(r"\{[^}]+\}", "x", route.pattern)
    if route.prefix and route.pattern == "/":
        # the management API: reads name an entity that exists (a browser's unauthenticated
        # GET of a name that does not is answered with a plain 404: admin/notfound.py), writes
        # one that does not (harmless when allowed)
        return "/q1" if route.method in ("GET", "HEAD") else "/" + SUFFIX["/"]
    if route.prefix:
        path = path.rstrip("/") + SUFFIX.get(route.pattern, "/x")
    return path


def token(resource: str = "sb://localhost/", name: str = KEY_NAME, key: str = KEY) -> str:
    return make_sas_token(resource, name, key, int(time.time()) + 3600)


def refused(status: int, location: str) -> bool:
    return status in (401, 403) or (status == 303 and location == "/login")


@pytest.fixture(scope="module")
def loopback_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    srv = InProcessServer(
        CONFIG, tmp_path_factory.mktemp("policy-lo") / "data", test_clock=True
    ).start()
    yield srv
    srv.stop()
    assert srv.errors.records == []


@pytest.fixture(scope="module")
def netns() -> Iterator[NetNamespace]:
    why = NetNamespace.unavailable()
    if why is not None:
        pytest.skip(f"no network namespace: {why}")
    ns = NetNamespace()
    try:
        ns.create()
    except Exception as exc:  # the kernel or a container refused
        pytest.skip(f"cannot create a network namespace here: {exc}")
    yield ns
    ns.delete()


@pytest.fixture(scope="module")
def remote_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    srv = InProcessServer(
        CONFIG, tmp_path_factory.mktemp("policy-any") / "data", host="0.0.0.0"
    ).start()
    yield srv
    srv.stop()
    assert srv.errors.records == []


def routes_of(srv: InProcessServer) -> list[RouteInfo]:
    assert srv.server is not None and srv.server.routes is not None
    table: list[RouteInfo] = srv.server.routes.table()
    return table


def csrf_of(srv: InProcessServer) -> str:
    import json
    import urllib.request

    url = f"http://127.0.0.1:{srv.admin_port}/api/session"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(json.loads(resp.read())["csrf"])


def expected_loopback(route: RouteInfo, creds: str) -> bool:
    """Whether a request from loopback with ``creds`` gets through ``route``'s rule."""
    need, writes = route.rule.need, route.method not in ("GET", "HEAD")
    if need in (Need.PUBLIC, Need.LOGIN, Need.AMQP, Need.READ):
        return True
    if need is Need.MANAGE:
        return creds in ("csrf", "manage")
    assert need is Need.SAS, route
    return creds == "manage" or (creds == "send" and not writes)


def expected_remote(route: RouteInfo, creds: str) -> bool:
    """Beyond loopback (no CSRF-only path: a session is needed for that)."""
    need, writes = route.rule.need, route.method not in ("GET", "HEAD")
    if need in (Need.PUBLIC, Need.LOGIN, Need.AMQP):
        return True
    if need is Need.READ:
        return creds in ("manage", "send")
    if need is Need.MANAGE:
        return creds == "manage"
    return creds == "manage" or (creds == "send" and not writes)


def expected_forged(route: RouteInfo) -> bool:
    """A forged browser request: only public routes (not the login form) and AMQP pass."""
    return route.rule.need in (Need.PUBLIC, Need.AMQP)


def credentials(kind: str, csrf: str) -> dict[str, str]:
    return {
        "none": {},
        "csrf": {"X-CSRF-Token": csrf},
        "manage": {"Authorization": token()},
        "send": {"Authorization": token(name="sendonly", key="SEND_KEY")},
        # a Manage key, but signed for another entity: no audience covers these routes
        "audience": {"Authorization": token("sb://localhost/some-other-entity")},
    }[kind]


def check(
    calls: list[Call], answers: list[tuple[int, str]], wants: list[bool], labels: list[str]
) -> None:
    wrong = [
        f"{label}: {'allowed' if want else 'refused'} expected, got {status} {location}"
        for label, want, (status, location) in zip(labels, wants, answers, strict=True)
        if refused(status, location) == want
    ]
    assert wrong == [], "\n".join(wrong)


def test_every_route_from_loopback(loopback_server: InProcessServer) -> None:
    srv, table = loopback_server, routes_of(loopback_server)
    csrf = csrf_of(srv)
    calls, wants, labels = [], [], []
    for route in table:
        for kind in ("none", "csrf", "manage", "send", "audience"):
            headers = {"Host": f"127.0.0.1:{srv.admin_port}", **credentials(kind, csrf)}
            calls.append(Call(route.method, sample_path(route), headers, port=srv.admin_port))
            want = expected_loopback(route, kind)
            if kind == "audience":  # a Manage token for another entity
                want = route.rule.need in (Need.PUBLIC, Need.LOGIN, Need.AMQP, Need.READ)
            wants.append(want)
            labels.append(f"loopback {kind} {route.method} {sample_path(route)}")
    check(calls, send(calls), wants, labels)


def test_every_route_as_a_forged_browser_request_on_loopback(
    loopback_server: InProcessServer,
) -> None:
    srv, table = loopback_server, routes_of(loopback_server)
    csrf = csrf_of(srv)  # even a leaked CSRF token does not help a forged request
    calls = [
        Call(
            r.method,
            sample_path(r),
            {**FORGED, "X-CSRF-Token": csrf},
            body="{}",
            port=srv.admin_port,
        )
        for r in table
    ]
    labels = [f"forged {r.method} {sample_path(r)}" for r in table]
    check(calls, send(calls), [expected_forged(r) for r in table], labels)


def test_every_route_from_another_address(
    remote_server: InProcessServer, netns: NetNamespace
) -> None:
    srv, table = remote_server, routes_of(remote_server)
    calls, wants, labels = [], [], []
    for route in table:
        for kind in ("none", "manage", "send", "audience"):
            headers = {"Host": f"{netns.host_ip}:{srv.admin_port}", **credentials(kind, "")}
            calls.append(
                Call(
                    route.method,
                    sample_path(route),
                    headers,
                    host=netns.host_ip,
                    port=srv.admin_port,
                )
            )
            want = expected_remote(route, kind)
            if kind == "audience":
                want = route.rule.need in (Need.PUBLIC, Need.LOGIN, Need.AMQP)
            wants.append(want)
            labels.append(f"remote {kind} {route.method} {sample_path(route)}")
        calls.append(
            Call(
                route.method,
                sample_path(route),
                dict(FORGED),
                body="{}",
                host=netns.host_ip,
                port=srv.admin_port,
            )
        )
        wants.append(expected_forged(route))
        labels.append(f"remote forged {route.method} {sample_path(route)}")
    check(calls, send(calls, netns.name), wants, labels)


def test_loopback_peer_of_a_server_bound_beyond_loopback_gets_the_remote_rules(
    remote_server: InProcessServer,
) -> None:
    """Bound to 0.0.0.0, 127.0.0.1 is one address among others: no free pass."""
    srv, table = remote_server, routes_of(remote_server)
    calls = [
        Call(r.method, sample_path(r), {"Host": f"127.0.0.1:{srv.admin_port}"}, port=srv.admin_port)
        for r in table
    ]
    labels = [f"0.0.0.0 via loopback {r.method} {sample_path(r)}" for r in table]
    check(calls, send(calls), [expected_remote(r, "none") for r in table], labels)


def _docs_rows() -> dict[tuple[str, str], str]:
    rows: dict[tuple[str, str], str] = {}
    text = (ROOT / "docs" / "security.md").read_text()
    for line in text.splitlines():
        m = re.match(r"\|\s*`([A-Z]+)`\s*\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|", line)
        if m:
            rows[(m.group(1), m.group(2))] = m.group(3)
    return rows


def test_docs_table_lists_every_route_with_its_rule(loopback_server: InProcessServer) -> None:
    rows = _docs_rows()
    listed = {}
    for route in routes_of(loopback_server):
        pattern = route.pattern + ("/..." if route.prefix and route.pattern != "/" else "")
        if route.pattern == "/" and route.prefix:
            pattern = "/..."
        listed[(route.method, pattern)] = route.rule.describe(route.method)
    assert rows == listed


def test_cli_admin_commands_sign_with_the_connection_string_beyond_loopback(
    remote_server: InProcessServer,
) -> None:
    """`sbemu purge` / `sbemu partition` send the CSRF token on loopback (the integration tests
    use that path); a server bound beyond loopback needs SBEMU_CONNECTION_STRING's key."""
    import os
    import subprocess
    import sys

    url = f"http://127.0.0.1:{remote_server.admin_port}"
    env = {k: v for k, v in os.environ.items() if k != "SBEMU_CONNECTION_STRING"}
    cmd = [sys.executable, "-m", "sbemu", "purge", f"{NAMESPACE}/q1", "--admin-url", url]
    refused = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "login required" in refused.stderr, refused
    env["SBEMU_CONNECTION_STRING"] = (
        f"Endpoint=sb://localhost/;SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY}"
    )
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done
    status = subprocess.run(
        [sys.executable, "-m", "sbemu", "partition", "status", "--admin-url", url, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0 and '"entities"' in status.stdout, status
