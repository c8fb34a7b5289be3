"""Every `$management` and `$cbs` request gets a reply, whatever its body (issue 36 scope 2).

A request left unanswered makes the client wait until its own deadline, the worst answer
(enumerate-rules with a Date property once went unanswered: the reply failed to encode after
the handler had marked the request answered). Hypothesis generates request bodies and
application properties of every AMQP type (the primitives, described values, arrays, lists,
maps, nested), in the places the operations read (lock tokens, sequence numbers, session ids,
rule descriptions with correlation-filter properties and SQL expressions, scheduled messages)
and anywhere else; python-qpid-proton sends each on a real server's `$management` nodes (queue,
session queue, topic, subscription, dead-letter queue) and on `$cbs`, and the test fails on any
request without a reply, on a reply whose correlation-id is not the request's message-id, and
on a reply without an integer status. The server's log must stay free of tracebacks and
errors (sbemu's conftest checks it after each test).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hardening import fuzz
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from integration_support import ServerProcess, proton_connect, queue_def, start_topics_server
from proton import (
    UNDESCRIBED,
    Array,
    Data,
    Described,
    Message,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

EXAMPLES = 150  # per node kind: a few seconds each on loopback
REPLY_TIMEOUT = 10.0  # seconds: far beyond any answer sbemu gives (all are immediate)

QUEUES = [queue_def("rr-q"), queue_def("rr-s", RequiresSession=True)]
TOPICS = [
    {
        "Name": "rr-t",
        "Properties": {},
        "Subscriptions": [{"Name": "s1", "Properties": {"LockDuration": "PT5S"}, "Rules": []}],
    }
]
NODES = [
    "rr-q/$management",
    "rr-s/$management",
    "rr-q/$deadletterqueue/$management",
    "rr-t/$management",
    "rr-t/Subscriptions/s1/$management",
]
# the $management operations the fuzz suite sends too (it adds put-token and an empty one)
OPERATIONS = [op for op in fuzz.OPERATIONS if op.startswith("com.microsoft:")]
BODY_KEYS = [
    "lock-tokens",
    "sequence-numbers",
    "session-id",
    "from-sequence-number",
    "message-count",
    "disposition-status",
    "deadletter-reason",
    "deadletter-description",
    "properties-to-modify",
    "receiver-settle-mode",
    "messages",
    "skip",
    "top",
    "last-updated-time",
    "session-state",
    "rule-name",
    "rule-description",
]


# ----------------------------------------------------------------------------- AMQP values
def _arrays() -> st.SearchStrategy[Array]:
    """Homogeneous AMQP arrays of a few element types (what the operations read as lists)."""
    return st.one_of(
        st.lists(st.uuids(), max_size=3).map(lambda v: Array(UNDESCRIBED, Data.UUID, *v)),
        st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3).map(
            lambda v: Array(UNDESCRIBED, Data.LONG, *v)
        ),
        st.lists(st.text(max_size=8), max_size=3).map(
            lambda v: Array(UNDESCRIBED, Data.STRING, *v)
        ),
        st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3).map(
            lambda v: Array(UNDESCRIBED, Data.INT, *[int32(i) for i in v])
        ),
    )


SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(0, 2**8 - 1).map(ubyte),
    st.integers(0, 2**16 - 1).map(ushort),
    st.integers(0, 2**32 - 1).map(uint),
    st.integers(0, 2**64 - 1).map(ulong),
    st.integers(-(2**7), 2**7 - 1).map(byte),
    st.integers(-(2**15), 2**15 - 1).map(short),
    st.integers(-(2**31), 2**31 - 1).map(int32),
    st.integers(-(2**63), 2**63 - 1),  # long
    st.floats(width=32).map(float32),
    st.floats(),  # double
    st.integers(0, 2**32 - 1).map(decimal32),
    st.integers(0, 2**64 - 1).map(decimal64),
    st.binary(min_size=16, max_size=16).map(decimal128),
    st.characters(exclude_categories=("Cs",)).map(char),
    st.integers(-(2**63), 2**63 - 1).map(timestamp),
    st.uuids(),
    st.binary(max_size=24),
    st.text(max_size=24),
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=16).map(symbol),
)


def _compound(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), SCALARS), inner, max_size=4),
        st.tuples(st.integers(0, 2**64 - 1).map(ulong), inner).map(lambda t: Described(*t)),
        st.tuples(st.text(min_size=1, max_size=8).map(symbol), inner).map(lambda t: Described(*t)),
        _arrays(),
    )


VALUES = st.recursive(SCALARS, _compound, max_leaves=10)


@st.composite
def rule_descriptions(draw: st.DrawFn) -> Any:
    """A rule-description map whose parts hold any value: filters with every AMQP type in
    their properties (a Date once left enumerate-rules unanswered), SQL text, actions."""
    description: dict[str, Any] = {}
    if draw(st.booleans()):
        fields = draw(st.dictionaries(st.sampled_from(
            ["correlation-id", "message-id", "to", "reply-to", "label", "session-id",
             "reply-to-session-id", "content-type"]), VALUES, max_size=3))  # fmt: skip
        fields["properties"] = draw(st.one_of(
            st.dictionaries(st.text(max_size=8), VALUES, max_size=4), VALUES))  # fmt: skip
        description["correlation-filter"] = draw(
            st.sampled_from([fields, Described(ulong(0x1370000009), fields)])
        )
    if draw(st.booleans()):
        description["sql-filter"] = {"expression": draw(st.one_of(st.text(max_size=30), VALUES))}
    if draw(st.booleans()):
        description["sql-rule-action"] = {
            "expression": draw(st.one_of(st.text(max_size=30), VALUES))
        }
    return draw(st.one_of(st.just(description), VALUES))


@st.composite
def bodies(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(VALUES)  # not a map at all
    body: dict[Any, Any] = {}
    for key in draw(st.lists(st.sampled_from(BODY_KEYS), max_size=5, unique=True)):
        body[key] = draw(rule_descriptions()) if key == "rule-description" else draw(VALUES)
    body.update(draw(st.dictionaries(st.one_of(st.text(max_size=8), SCALARS), VALUES, max_size=2)))
    return body


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, dict[Any, Any], Any]:
    operation = draw(st.one_of(st.sampled_from(OPERATIONS), st.text(max_size=20)))
    props: dict[Any, Any] = {"operation": operation}
    props.update(draw(st.dictionaries(st.text(max_size=12), SCALARS, max_size=2)))
    return operation, props, draw(bodies())


@st.composite
def cbs_requests(draw: st.DrawFn) -> tuple[dict[Any, Any], Any]:
    props: dict[Any, Any] = {
        "operation": draw(st.one_of(st.just("put-token"), st.text(max_size=10))),
        "type": draw(
            st.one_of(st.sampled_from(["servicebus.windows.net:sastoken", "jwt"]), VALUES)
        ),  # fmt: skip
        "name": draw(st.one_of(st.sampled_from(["sb://localhost/rr-q", "amqp://x/rr-q"]), VALUES)),
    }
    props.update(draw(st.dictionaries(st.text(max_size=12), SCALARS, max_size=2)))
    body = draw(st.one_of(
        st.just("SharedAccessSignature sr=x&sig=y&se=1&skn=z"), st.text(max_size=60), VALUES))  # fmt: skip
    return props, body


# ----------------------------------------------------------------------------- the server
@pytest.fixture(scope="module")
def rr_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_topics_server(tmp_path_factory.mktemp("sbemu-replies"), QUEUES, TOPICS)
    try:
        yield srv
    finally:
        srv.stop()


class Node:
    """A request link and its reply link on one node, over one proton connection."""

    def __init__(self, conn: Any, node: str) -> None:
        self.reply_to = f"reply-{uuid.uuid4()}"
        self.receiver = conn.create_receiver(node, name=self.reply_to)
        self.sender = conn.create_sender(node, name=f"req-{uuid.uuid4()}")

    def ask(self, props: dict[Any, Any], body: Any) -> Message:
        rid = str(uuid.uuid4())
        request = Message(id=rid, reply_to=self.reply_to, properties=props, body=body)
        self.sender.send(request, timeout=REPLY_TIMEOUT)
        reply = self.receiver.receive(timeout=REPLY_TIMEOUT)  # Timeout: unanswered -> fails
        if self.receiver.fetcher.unsettled:
            self.receiver.accept()
        assert reply.correlation_id == rid, (reply.correlation_id, rid, props, body)
        return reply


@pytest.fixture(scope="module")
def connection(rr_server: ServerProcess) -> Iterator[Any]:
    conn = proton_connect(rr_server, timeout=REPLY_TIMEOUT)
    try:
        yield conn
    finally:
        conn.close()


def _encodable(props: dict[Any, Any], body: Any) -> bool:
    """Whether proton can encode the request at all (some generated values it refuses, e.g.
    a described value with a null descriptor): those are no requests to send."""
    try:
        Message(id="x", properties=props, body=body).encode()
    except Exception:  # noqa: BLE001 - proton raises several types for what it cannot encode
        return False
    return True


def _clean(server: ServerProcess) -> None:
    bad = [
        line
        for line in server.stderr_text().splitlines()
        if "Traceback" in line or " ERROR " in line or "CRITICAL" in line
    ]
    assert not bad, "\n".join(bad)


def _status(reply: Message, key: str) -> int:
    props = {str(k): v for k, v in (reply.properties or {}).items()}
    status = props.get(key)
    assert isinstance(status, int), f"reply without an integer {key}: {props!r}"
    return status


@pytest.mark.parametrize("node", NODES)
def test_every_management_request_is_answered(
    rr_server: ServerProcess, connection: Any, node: str
) -> None:
    link = Node(connection, node)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(requests())
    def answered(request: tuple[str, dict[Any, Any], Any]) -> None:
        operation, props, body = request
        assume(_encodable(props, body))
        reply = link.ask(props, body)
        status = _status(reply, "statusCode")
        assert status < 500 or status in (501, 503), (operation, body, reply.properties)

    answered()
    _clean(rr_server)


def test_every_cbs_request_is_answered(rr_server: ServerProcess, connection: Any) -> None:
    link = Node(connection, "$cbs")

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(cbs_requests())
    def answered(request: tuple[dict[Any, Any], Any]) -> None:
        props, body = request
        assume(_encodable(props, body))
        reply = link.ask(props, body)
        status = _status(reply, "status-code")
        assert status < 500, (props, body, reply.properties)

    answered()
    _clean(rr_server)
