"""Every admin route driven with generated bodies, paths and queries (hypothesis): no answer is
a 5xx and the server logs no error or traceback (issue 24: deep XML and JSON, huge numbers,
unknown encodings, deep SQL filters were 500s).

The requests carry credentials that pass the route's rule (a Manage SAS token and the CSRF
token), so the handlers themselves meet the input. Bounded: a fixed number of examples per
route kind, on one in-process server (tests/security/adminnet.py).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest
from adminnet import InProcessServer
from hardening.common import KEY, KEY_NAME, NAMESPACE, make_config, queue_def
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbemu.admin.routes import RouteInfo
from sbemu.auth.sas import make_sas_token

CONFIG = make_config(
    [queue_def("q1")],
    topics=[
        {
            "Name": "t1",
            "Properties": {},
            "Subscriptions": [{"Name": "s1", "Properties": {}, "Rules": []}],
        }
    ],
)
EXAMPLES = 40
FOREVER = 4_102_444_800  # 2100-01-01: the token outlives any test-clock step

# ----------------------------------------------------------------------------- generators
INTS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, 2**128, -(2**63) - 1]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["ns", "q1", "t1", NAMESPACE, "", "all", "active"]),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
DASHBOARD_KEYS = [
    "ns",
    "entity",
    "partition",
    "online",
    "subscription",
    "state",
    "id",
    "body",
    "body_encoding",
    "message_id",
    "content_type",
    "subject",
    "session_id",
    "partition_key",
    "scheduled_ms",
    "ttl_ms",
    "properties",
    "sequence_numbers",
    "correlation_id",
    "to",
    "reply_to",
]


@st.composite
def json_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["object", "raw", "deep", "numbers"]))
    if kind == "object":
        keys = st.sampled_from(DASHBOARD_KEYS) | st.text(max_size=8)
        obj = draw(st.dictionaries(keys, JSON_VALUES, max_size=8))
        obj.setdefault("ns", NAMESPACE)
        obj.setdefault("entity", draw(st.sampled_from(["q1", "t1", "nope"])))
        return json.dumps(obj, allow_nan=True).encode()
    if kind == "deep":
        n = draw(st.integers(1, 200_000))
        opener = draw(st.sampled_from(["[", '{"a":', '[{"b":']))
        return (opener * n).encode()
    if kind == "numbers":
        number = draw(
            st.sampled_from(
                [
                    "1e999",
                    "-1e999",
                    "NaN",
                    "Infinity",
                    str(2**128),
                    "9" * 5000,
                    "1.5",
                    "-0",
                    "1e-999",
                ]
            )
        )
        key = draw(st.sampled_from(DASHBOARD_KEYS))
        return f'{{"ns":"{NAMESPACE}","entity":"q1","{key}":{number}}}'.encode()
    return draw(st.binary(max_size=300))


@st.composite
def xml_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["deep", "dtd", "encoding", "entry", "raw", "rule"]))
    atom = "http://www.w3.org/2005/Atom"
    sb = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
    if kind == "deep":
        n = draw(st.integers(1, 5000))
        return ("<a>" * n + "</a>" * n).encode()
    if kind == "dtd":
        return draw(
            st.sampled_from(
                [
                    b'<!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>',
                    b'<!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]><a>&x;</a>',
                    b'<!DOCTYPE a SYSTEM "http://127.0.0.1:1/x.dtd"><a/>',
                    b'<!DOCTYPE lolz [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]><l>&b;</l>',
                ]
            )
        )
    if kind == "encoding":
        enc = draw(st.sampled_from(["x-unknown", "utf-16", "utf-32", "latin-1", "ebcdic", ""]))
        return f'<?xml version="1.0" encoding="{enc}"?><entry xmlns="{atom}"/>'.encode()
    if kind == "rule":
        sql = draw(
            st.sampled_from(
                [
                    "(" * 300 + "a=1" + ")" * 300,
                    "NOT " * 3000 + "a=1",
                    "a" + "+a" * 2000 + ">0",
                    "a = 1",
                    "a IN ()",
                ]
            )
        )
        return (
            f'<entry xmlns="{atom}"><content type="application/xml"><RuleDescription '
            f'xmlns="{sb}"><Filter xmlns:i="http://www.w3.org/2001/XMLSchema-instance" '
            f'i:type="SqlFilter"><SqlExpression>{sql}</SqlExpression></Filter>'
            "</RuleDescription></content></entry>"
        ).encode()
    if kind == "entry":
        element = draw(
            st.sampled_from(
                ["QueueDescription", "TopicDescription", "SubscriptionDescription", "Nope"]
            )
        )
        fields = draw(
            st.dictionaries(
                st.sampled_from(
                    [
                        "LockDuration",
                        "MaxSizeInMegabytes",
                        "MaxDeliveryCount",
                        "DefaultMessageTimeToLive",
                        "RequiresSession",
                        "Status",
                        "AutoDeleteOnIdle",
                        "ForwardTo",
                        "EnablePartitioning",
                    ]
                ),
                st.one_of(
                    st.text(max_size=20),
                    INTS.map(str),
                    st.sampled_from(["P1D", "PT-1S", "P99999999999D", "true", "yes"]),
                ),
                max_size=5,
            )
        )
        inner = "".join(f"<{k}>{_xml_text(v)}</{k}>" for k, v in fields.items())
        return (
            f'<entry xmlns="{atom}"><content type="application/xml"><{element} '
            f'xmlns="{sb}">{inner}</{element}></content></entry>'
        ).encode()
    return draw(st.binary(max_size=300))


def _xml_text(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;")


SEGMENT = st.text(st.characters(codec="ascii", exclude_characters="/?#%"), min_size=1, max_size=12)


@st.composite
def requests(draw: st.DrawFn, route: RouteInfo) -> tuple[str, str, bytes]:
    path = route.pattern.rstrip("/")
    if route.prefix:
        if path == "":  # the Atom API: names that do not collide with the configured entities
            segs = draw(st.lists(SEGMENT, min_size=1, max_size=5))
            segs[0] = "fz-" + segs[0]
            path = "/" + "/".join(segs)
        else:
            tail = draw(
                st.one_of(
                    st.lists(SEGMENT, max_size=6).map(lambda s: "/".join(s)),
                    st.sampled_from(
                        [
                            f"{NAMESPACE}/q1/0/online",
                            f"{NAMESPACE}/q1/99999999999/offline",
                            f"{NAMESPACE}/t1/subscriptions/s1/status/Active",
                            f"{NAMESPACE}/q1/status/Bogus",
                            "0",
                            "1e309",
                            "-5",
                            "nan",
                            f"{NAMESPACE}/nope",
                        ]
                    ),
                )
            )
            path = f"{path}/{tail}"
    query = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "ns",
                    "entity",
                    "from",
                    "count",
                    "state",
                    "subscription",
                    "$skip",
                    "$top",
                    "api-version",
                ]
            ),
            st.one_of(
                st.text(st.characters(codec="ascii", exclude_characters="&#"), max_size=12),
                INTS.map(str),
                st.just(NAMESPACE),
                st.just("q1"),
            ),
            max_size=5,
        )
    )
    from urllib.parse import quote, urlencode

    target = quote(path or "/", safe="/$-_.~") + ("?" + urlencode(query) if query else "")
    if route.pattern.startswith("/api/") or route.pattern in ("/logout", "/login"):
        body = draw(json_bodies())
    elif route.rule.need.value == "sas":
        body = draw(xml_bodies())
    else:
        body = draw(st.one_of(json_bodies(), xml_bodies()))
    return route.method, target, body if route.method in ("POST", "PUT") else b""


# ----------------------------------------------------------------------------- the server
@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    srv = InProcessServer(
        CONFIG, tmp_path_factory.mktemp("adminfuzz") / "data", test_clock=True
    ).start()
    yield srv
    srv.stop()


def _csrf(srv: InProcessServer) -> str:
    status, body = _send(srv, "GET", "/api/session", b"", {})
    assert status == 200, body
    return str(json.loads(body)["csrf"])


def _send(
    srv: InProcessServer, method: str, target: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.admin_port, timeout=30)
    try:
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        if resp.getheader("content-type", "").startswith("text/event-stream"):
            return resp.status, b""  # a live stream: its status is the answer
        return resp.status, resp.read()
    finally:
        conn.close()


def _routes(srv: InProcessServer) -> list[RouteInfo]:
    assert srv.server is not None
    table: list[RouteInfo] = srv.server.routes.table()
    return table


def _ids(route: RouteInfo) -> str:
    return f"{route.method} {route.pattern}{'/...' if route.prefix else ''}"


def test_generated_requests_never_get_a_5xx_or_a_traceback(fuzz_server: InProcessServer) -> None:
    """Each route of the table (whatever it holds: the table is walked) gets EXAMPLES generated
    requests; an event stream fewer (each holds one of the 32 stream places until it notices
    its client left)."""
    srv = fuzz_server
    token = make_sas_token(f"sb://localhost:{srv.admin_port}/", KEY_NAME, KEY, FOREVER)
    headers = {
        "Host": f"127.0.0.1:{srv.admin_port}",
        "Authorization": token,
        "X-CSRF-Token": _csrf(srv),
        "Content-Type": "application/octet-stream",
    }
    counts: dict[str, int] = {}
    for route in _routes(srv):
        label = _ids(route)
        counts[label] = 0
        examples = 8 if route.pattern == "/api/events" else EXAMPLES

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(requests(route))
        def drive(req: tuple[str, str, bytes]) -> None:
            method, target, body = req
            status, answer = _send(srv, method, target, body, headers)
            counts[_ids(route)] += 1  # noqa: B023 - drive() runs in this iteration
            assert status < 500, (
                f"{method} {target[:200]} body={body[:200]!r}: {status} {answer[:300]!r}"
            )
            assert srv.errors.records == [], srv.errors.records[-3:]

        drive()
    assert all(counts.values()), counts
