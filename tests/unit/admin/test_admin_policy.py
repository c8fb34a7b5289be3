"""The admin port's access policy, decided on real Requests (the end-to-end check of every
route from every origin is tests/security/test_route_rules.py)."""

from __future__ import annotations

import base64
import logging

import pytest

from sbemu.admin.access import Access
from sbemu.admin.http import Request
from sbemu.admin.policy import (
    AMQP,
    MANAGE,
    PUBLIC,
    READ,
    AccessPolicy,
    Grant,
    NamespaceKeys,
    Need,
    Refusal,
    Resource,
    Rule,
    azure_namespace_host,
    cross_site,
    entity_in_path,
    loopback_host,
    peer_is_loopback,
)
from sbemu.auth.sas import make_sas_token

NOW = 1_700_000_000.0
KEYS = [
    NamespaceKeys(
        "ns1",
        {"Root": "ROOT_KEY", "sender": "SEND_KEY"},
        {"Root": frozenset({"Manage", "Send", "Listen"}), "sender": frozenset({"Send"})},
    ),
    NamespaceKeys("ns2", {"Root": "OTHER_KEY"}, {"Root": frozenset({"Manage"})}),
]
ENTITY = MANAGE.but(locate=entity_in_path)
ATOM = Rule(Need.SAS, locate=lambda r, p: Resource("ns1", r.path.strip("/").lower()))


def policy(bind: str = "127.0.0.1") -> AccessPolicy:
    manage = [("Root", "ROOT_KEY"), ("Root", "OTHER_KEY")]
    return AccessPolicy(bind, KEYS, Access(bind, manage, secret=b"s" * 32), lambda: NOW)


def request(
    method: str = "GET", path: str = "/x", peer: str = "127.0.0.1:40000", **headers: str
) -> Request:
    hdrs = {"host": "127.0.0.1:5300"}
    hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
    return Request(method, path, {}, {k: v for k, v in hdrs.items() if v}, b"", peer, False)


def token(
    resource: str = "sb://localhost/", name: str = "Root", key: str = "ROOT_KEY", ttl: int = 60
) -> str:
    return make_sas_token(resource, name, key, int(NOW) + ttl)


def status(verdict: Grant | Refusal) -> int:
    return verdict.status if isinstance(verdict, Refusal) else 200


@pytest.mark.parametrize(
    "host,ok",
    [
        ("127.0.0.1:5300", True),
        ("localhost", True),
        ("[::1]:5300", True),
        ("ns2.localhost:5300", True),
        ("127.0.0.2", True),
        ("LOCALHOST.", True),
        ("rebind.evil.example", False),
        ("localhost.evil.example", False),
        ("", False),
        ("10.0.0.1:5300", False),
        ("[::1", False),
    ],
)
def test_loopback_host_names(host: str, ok: bool) -> None:
    assert loopback_host(host) is ok


@pytest.mark.parametrize(
    "host,ok",
    [
        ("ns1.servicebus.windows.net", True),
        ("NS2.ServiceBus.Windows.Net:443", True),
        ("ns1.servicebus.windows.net.", True),
        ("ns1.servicebus.chinacloudapi.cn", True),
        ("ns1.servicebus.usgovcloudapi.net", True),
        ("other.servicebus.windows.net", False),  # not a configured namespace
        ("servicebus.windows.net", False),
        ("x.ns1.servicebus.windows.net", False),
        ("ns1.servicebus.windows.net.evil.example", False),
        ("ns1.evil.example", False),
    ],
)
def test_azure_names_of_configured_namespaces(host: str, ok: bool) -> None:
    assert azure_namespace_host(host, {"ns1", "ns2"}) is ok


def test_loopback_requests_under_a_namespace_azure_name_pass_the_host_check() -> None:
    """A hosts-file line maps <namespace>.servicebus.windows.net to loopback: the admin port
    serves it (reads and the management API) and still refuses any other name."""
    p = policy()
    azure = "ns1.servicebus.windows.net"
    assert isinstance(p.decide(READ, request(host=azure), {}), Grant)
    api = request("PUT", "/q1", host=azure, authorization=token(f"sb://{azure}/"))
    assert isinstance(p.decide(ATOM, api, {}), Grant)
    for foreign in ("nsx.servicebus.windows.net", "ns1.servicebus.windows.net.evil.example"):
        assert status(p.decide(READ, request(host=foreign), {})) == 403
        refused = request("PUT", "/q1", host=foreign, authorization=token(f"sb://{azure}/"))
        assert status(p.decide(ATOM, refused, {})) == 403


def test_peer_loopback_includes_ipv4_mapped() -> None:
    assert peer_is_loopback("127.0.0.1:1") and peer_is_loopback("::1:2")
    assert peer_is_loopback("::ffff:127.0.0.1:3")
    assert not peer_is_loopback("10.1.2.3:4") and not peer_is_loopback("?")


def test_cross_site_signals() -> None:
    host = {"host": "127.0.0.1:5300"}
    assert cross_site(host) is None
    assert cross_site(host | {"origin": "http://127.0.0.1:5300"}) is None
    assert cross_site(host | {"sec-fetch-site": "same-origin"}) is None
    assert cross_site(host | {"origin": "http://evil.example"})
    assert cross_site(host | {"origin": "null"})
    assert cross_site(host | {"sec-fetch-site": "cross-site"})
    assert cross_site(host | {"sec-fetch-site": "same-site"})


def test_loopback_reads_need_a_loopback_host_only() -> None:
    p = policy()
    assert isinstance(p.decide(READ, request(), {}), Grant)
    assert status(p.decide(READ, request(host="rebind.evil.example"), {})) == 403
    assert status(p.decide(PUBLIC, request(host="rebind.evil.example"), {})) == 200
    assert not p.decide(PUBLIC, request(host="rebind.evil.example"), {}).can_read  # type: ignore[union-attr]


def test_loopback_writes_need_csrf_or_a_manage_token_and_no_other_site() -> None:
    p = policy()
    csrf = p.access.csrf_token(Grant("loopback").principal)
    params = {"rest": "ns1/q1/0/offline"}
    assert status(p.decide(ENTITY, request("POST"), params)) == 403
    assert status(p.decide(ENTITY, request("POST", x_csrf_token="forged"), params)) == 403
    assert status(p.decide(ENTITY, request("POST", x_csrf_token=csrf), params)) == 200
    assert status(p.decide(ENTITY, request("POST", authorization=token()), params)) == 200
    entity_token = token("sb://localhost/q1")
    assert status(p.decide(ENTITY, request("POST", authorization=entity_token), params)) == 200
    other_entity = token("sb://localhost/q2")
    assert status(p.decide(ENTITY, request("POST", authorization=other_entity), params)) == 401
    send_only = token(name="sender", key="SEND_KEY")
    assert status(p.decide(ENTITY, request("POST", authorization=send_only), params)) == 401
    other_ns = token(key="OTHER_KEY")  # ns2's key, not ns1's
    assert status(p.decide(ENTITY, request("POST", authorization=other_ns), params)) == 401
    # the forged browser request: another Origin, a rebinding Host, even with the token
    evil = request("POST", origin="http://evil.example", x_csrf_token=csrf)
    assert status(p.decide(ENTITY, evil, params)) == 403
    rebind = request("POST", host="rebind.evil.example", authorization=token())
    assert status(p.decide(ENTITY, rebind, params)) == 403
    fetch = request("POST", sec_fetch_site="cross-site", x_csrf_token=csrf)
    assert status(p.decide(ENTITY, fetch, params)) == 403


def test_beyond_loopback_reads_need_credentials_for_the_right_audience() -> None:
    p = policy("0.0.0.0")
    remote = {"peer": "10.1.2.3:4000", "host": "box:5300"}
    assert status(p.decide(READ, request(**remote), {})) == 401
    # even from 127.0.0.1: the listener is bound beyond loopback
    assert status(p.decide(READ, request(), {})) == 401
    assert status(p.decide(READ, request(authorization=token(), **remote), {})) == 200
    assert (
        status(
            p.decide(
                READ, request(authorization=token(name="sender", key="SEND_KEY"), **remote), {}
            )
        )
        == 200
    )
    # /metrics and the dashboard cover the whole server: an entity's token is not enough
    assert status(p.decide(READ, request(authorization=token("sb://x/q1"), **remote), {})) == 401
    assert status(p.decide(READ, request(authorization=token(ttl=-1), **remote), {})) == 401
    basic = base64.b64encode(b"Root:ROOT_KEY").decode()
    assert status(p.decide(READ, request(authorization=f"Basic {basic}", **remote), {})) == 200
    bad = base64.b64encode(b"sender:SEND_KEY").decode()
    assert status(p.decide(READ, request(authorization=f"Basic {bad}", **remote), {})) == 401
    session = p.access.new_session("Root", NOW)
    cookie = {"cookie": f"sbemu_session={session}"}
    assert status(p.decide(READ, request(**remote, **cookie), {})) == 200


def test_beyond_loopback_writes_need_manage() -> None:
    p = policy("0.0.0.0")
    remote = {"peer": "10.1.2.3:4000", "host": "box:5300"}
    params = {"rest": "ns1/q1/status/Disabled"}
    assert status(p.decide(ENTITY, request("POST", **remote), params)) == 401
    assert status(p.decide(ENTITY, request("POST", authorization=token(), **remote), params)) == 200
    listen = token(name="sender", key="SEND_KEY")
    assert status(p.decide(ENTITY, request("POST", authorization=listen, **remote), params)) == 401
    # a session needs its CSRF token too
    session = p.access.new_session("Root", NOW)
    grant = Grant("session", "Root", session)
    cookie = f"sbemu_session={session}"
    assert status(p.decide(ENTITY, request("POST", cookie=cookie, **remote), params)) == 403
    ok = request("POST", cookie=cookie, x_csrf_token=p.access.csrf_token(grant.principal), **remote)
    assert status(p.decide(ENTITY, ok, params)) == 200


def test_atom_rule_always_needs_a_token_and_manage_to_write() -> None:
    p = policy()
    assert status(p.decide(ATOM, request("GET", "/q1"), {})) == 401
    assert (
        status(p.decide(ATOM, request("GET", "/q1", authorization=token("sb://h/q1")), {})) == 200
    )
    assert (
        status(p.decide(ATOM, request("GET", "/q2", authorization=token("sb://h/q1")), {})) == 401
    )
    js_style = token("https://localhost:5300/q1?api-version=2021-05")
    assert status(p.decide(ATOM, request("PUT", "/q1", authorization=js_style), {})) == 200
    send = token(name="sender", key="SEND_KEY")
    assert status(p.decide(ATOM, request("GET", "/q1", authorization=send), {})) == 200
    assert status(p.decide(ATOM, request("PUT", "/q1", authorization=send), {})) == 401
    cross = request("PUT", "/q1", authorization=token(), origin="http://evil.example")
    assert status(p.decide(ATOM, cross, {})) == 403


def test_amqp_and_public_rules_pass() -> None:
    p = policy("0.0.0.0")
    remote = request(peer="10.1.2.3:4000", origin="http://evil.example")
    assert isinstance(p.decide(AMQP, remote, {}), Grant)
    assert isinstance(p.decide(PUBLIC, remote, {}), Grant)


def test_entity_in_path() -> None:
    r = request()
    assert entity_in_path(r, {"rest": "ns1/Q1/3/offline"}) == Resource("ns1", "q1")
    assert entity_in_path(r, {"rest": "ns1/t1/subscriptions/s1/status/Active"}) == Resource(
        "ns1", "t1"
    )
    assert entity_in_path(r, {"rest": "ns1"}) == Resource("ns1", "")
    assert entity_in_path(r, {"rest": "ns1/a/b"}) == Resource("ns1", "a/b")


def test_rejected_credentials_are_logged_with_key_name_reason_and_peer_rate_limited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = policy("0.0.0.0")
    caplog.set_level(logging.WARNING, logger="sbemu.admin.access")
    wrong = token(key="WRONG")
    for _ in range(50):
        p.decide(READ, request(authorization=wrong, peer="10.9.8.7:555"), {})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == p.rejections.burst, lines
    assert "10.9.8.7:555" in lines[0] and "'Root'" in lines[0] and "signature" in lines[0]
    assert p.rejections.suppressed == 50 - p.rejections.burst
    # no credentials at all is not a rejected credential: not a warning
    caplog.clear()
    p.decide(READ, request(peer="10.9.8.7:555"), {})
    assert caplog.records == []
