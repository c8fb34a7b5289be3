"""Topics and subscriptions against a real sbemu process: fan-out, ``$Default``, SQL and
correlation filters, rule actions and Azure's copy semantics, filter evaluation errors,
subscription dead-letter queues, partitioned topics, and rule management over AMQP
(``com.microsoft:add-rule`` / ``remove-rule`` / ``enumerate-rules``) with python-qpid-proton.

The module starts its own server (conftest's ``server`` fixture only knows queues) from a
Config.json in Microsoft's emulator schema, with conftest's ``ServerProcess``.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusError
from integration_support import (
    NAMESPACE,
    PARTITIONS,
    ServerProcess,
    body_text,
    correlation_rule,
    partition_of,
    proton_connect,
    queue_def,
    receive_n,
    shutdown,
    sql_rule,
    start_topics_server,
    sub_def,
    topic_def,
)

# ------------------------------------------------------------------------------- configuration


FANOUT_SUBS = ["all", "red", "like", "in", "isnull", "label", "corr"]

TOPICS: list[dict[str, Any]] = [
    topic_def(
        "t-fanout",
        [
            sub_def("all"),  # no rules: $Default
            sub_def("red", [sql_rule("redbig", "color = 'red' AND qty > 10")]),
            sub_def("like", [sql_rule("widgets", "name LIKE 'wid%'")]),
            sub_def("in", [sql_rule("greenblue", "color IN ('green', 'blue')")]),
            sub_def("isnull", [sql_rule("nocolor", "color IS NULL")]),
            sub_def("label", [sql_rule("urgent", "sys.Label = 'urgent'")]),
            sub_def(
                "corr", [correlation_rule("eu-orders", Label="order", Properties={"region": "eu"})]
            ),
        ],
    ),
    topic_def(
        "t-action",
        [
            sub_def("plain"),
            sub_def(
                "act",
                [
                    sql_rule(
                        "tagrule",
                        "color = 'red'",
                        "SET tagged = 'yes'; REMOVE qty; SET sys.Label = 'relabeled'",
                    )
                ],
            ),
            sub_def(
                "multi",
                [
                    sql_rule("plainrule", "color = 'red'"),
                    sql_rule("actrule", "color = 'red'", "SET stamp = 'x'"),
                ],
            ),
        ],
    ),
    topic_def("t-nomatch", [sub_def("never", [sql_rule("nothing", "1 = 0")])]),
    topic_def(
        "t-filtererr",
        [sub_def("div", [sql_rule("divide", "qty / zero > 1")]), sub_def("ok")],
    ),
    topic_def("t-part", [sub_def("a"), sub_def("b")], partitioned=True),
    topic_def("t-mdc", [sub_def("s", MaxDeliveryCount=2)]),
    topic_def("t-rules", [sub_def("rsub"), sub_def("other")]),
    topic_def("t-async", [sub_def("all"), sub_def("red", [sql_rule("r", "color = 'red'")])]),
    topic_def("t-refuse", [sub_def("s")]),
]

QUEUES = [queue_def("tq-unused")]


@pytest.fixture(scope="module")
def topic_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_topics_server(tmp_path_factory.mktemp("sbemu-topics"), QUEUES, TOPICS)
    try:
        yield srv
    finally:
        shutdown(srv)


@pytest.fixture()
def client(topic_server: ServerProcess) -> Iterator[ServiceBusClient]:
    c = ServiceBusClient.from_connection_string(
        topic_server.conn_str, retry_total=0, retry_backoff_factor=0.2
    )
    with c:
        yield c


# ------------------------------------------------------------------------------- helpers


def _text(v: Any) -> Any:
    return bytes(v).decode() if isinstance(v, bytes | bytearray | memoryview) else v


def app_props(m: Any) -> dict[str, Any]:
    """A received message's application properties with str keys (and str for bytes values)."""
    return {_text(k): _text(v) for k, v in (m.application_properties or {}).items()}


def send(client: ServiceBusClient, topic: str, messages: list[ServiceBusMessage]) -> None:
    with client.get_topic_sender(topic) as sender:
        for m in messages:
            sender.send_messages(m)


def receive_all(
    client: ServiceBusClient,
    topic: str,
    sub: str,
    *,
    expect: int | None = None,
    sub_queue: Any = None,
    settle: bool = True,
) -> list[Any]:
    """Receive everything on a subscription (peek-lock, completed), waiting for ``expect``
    messages when given, then checking nothing more arrives within a short wait."""
    with client.get_subscription_receiver(
        topic, sub, sub_queue=sub_queue, max_wait_time=1
    ) as receiver:
        got = receive_n(receiver, expect, timeout=10) if expect else []
        while True:
            more = receiver.receive_messages(max_message_count=50, max_wait_time=0.5)
            if not more:
                break
            got.extend(more)
        if settle:
            for m in got:
                receiver.complete_message(m)
    return got


def receive_subs(
    server: ServerProcess, topic: str, expect: dict[str, int], *, sub_queue: Any = None
) -> dict[str, list[Any]]:
    """``receive_all`` on several subscriptions at once (one client per thread): the SDK's link
    set-up and tear-down take most of a second each, so doing them in parallel keeps this
    module fast."""

    def one(sub: str) -> list[Any]:
        with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as c:
            return receive_all(c, topic, sub, expect=expect[sub], sub_queue=sub_queue)

    with ThreadPoolExecutor(max_workers=len(expect)) as pool:
        futures = {sub: pool.submit(one, sub) for sub in expect}
        return {sub: f.result(timeout=30) for sub, f in futures.items()}


def msg(mid: str, subject: str | None = None, **props: Any) -> ServiceBusMessage:
    app: dict[str | bytes, Any] | None = {k: v for k, v in props.items()} if props else None
    return ServiceBusMessage(
        f"body-{mid}", message_id=mid, subject=subject, application_properties=app
    )


# ------------------------------------------------------------------------------- AMQP rules


class Mgmt:
    """A request/response pair of links on a subscription's ``$management`` node (proton)."""

    def __init__(self, server: ServerProcess, topic: str, sub: str) -> None:
        self.conn = proton_connect(server)
        self.node = f"{topic}/Subscriptions/{sub}/$management"
        self.receiver = self.conn.create_receiver(self.node, name=f"reply-{uuid.uuid4()}")
        self.sender = self.conn.create_sender(self.node, name=f"req-{uuid.uuid4()}")

    def request(self, operation: str, body: dict[str, Any]) -> tuple[Any, str, Any]:
        from proton import Message

        rid = str(uuid.uuid4())
        self.sender.send(
            Message(id=rid, reply_to=self.node, properties={"operation": operation}, body=body),
            timeout=10,
        )
        response = self.receiver.receive(timeout=10)
        # The server's responses are pre-settled: no accept().
        assert response.correlation_id == rid
        props = {str(k): v for k, v in (response.properties or {}).items()}
        return props.get("statusCode"), str(props.get("statusDescription", "")), response.body

    def add_rule(
        self,
        name: str,
        sql: str | None = None,
        action: str | None = None,
        correlation: dict[str, Any] | None = None,
    ) -> tuple[Any, str]:
        description: dict[str, Any] = {}
        if sql is not None:
            description["sql-filter"] = {"expression": sql}
        if correlation is not None:
            description["correlation-filter"] = correlation
        if action is not None:
            description["sql-rule-action"] = {"expression": action}
        status, text, _ = self.request(
            "com.microsoft:add-rule", {"rule-name": name, "rule-description": description}
        )
        return status, text

    def remove_rule(self, name: str) -> tuple[Any, str]:
        status, text, _ = self.request("com.microsoft:remove-rule", {"rule-name": name})
        return status, text

    def rules(self) -> list[Any]:
        from proton import Described

        status, text, body = self.request("com.microsoft:enumerate-rules", {"top": 100, "skip": 0})
        if status == 204:
            return []
        assert status == 200, (status, text)
        out = []
        for entry in body["rules"]:
            desc = {str(k): v for k, v in entry.items()}["rule-description"]
            assert isinstance(desc, Described)
            out.append(desc)
        return out

    def close(self) -> None:
        self.conn.close()


RULE_DESCRIPTION = 0x0000013700000004
SQL_FILTER = 0x0000001370000006
TRUE_FILTER = 0x0000001370000007
CORRELATION_FILTER = 0x0000001370000009
SQL_RULE_ACTION = 0x0000013700000006
EMPTY_RULE_ACTION = 0x0000013700000005


def rules_by_name(descs: list[Any]) -> dict[str, Any]:
    out = {}
    for d in descs:
        assert d.descriptor == RULE_DESCRIPTION
        filt, action, name, created = d.value
        out[name] = (filt, action, created)
    return out


# ------------------------------------------------------------------------------- tests: filters


def test_fanout_default_sql_and_correlation_filters(topic_server, client):
    messages = [
        msg("m-red-big", color="red", qty=20, name="widget"),
        msg("m-red-small", color="red", qty=5),
        msg("m-green", color="green", qty=50, name="gadget"),
        msg("m-blue-urgent", "urgent", color="blue", name="widely"),
        msg("m-nocolor", "order", region="eu", qty=1),
        msg("m-order-us", "order", region="us", color="red", qty=11),
        msg("m-bare"),
    ]
    send(client, "t-fanout", messages)
    expected = {
        "all": {m.message_id for m in messages},
        "red": {"m-red-big", "m-order-us"},
        "like": {"m-red-big", "m-blue-urgent"},
        "in": {"m-green", "m-blue-urgent"},
        "isnull": {"m-nocolor", "m-bare"},
        "label": {"m-blue-urgent"},
        "corr": {"m-nocolor"},
    }
    seqs: dict[str, dict[str, int]] = {}
    received = receive_subs(topic_server, "t-fanout", {s: len(expected[s]) for s in FANOUT_SUBS})
    for sub in FANOUT_SUBS:
        got = received[sub]
        ids = [m.message_id for m in got]
        assert sorted(ids) == sorted(expected[sub]), f"subscription {sub}: {ids}"
        seqs[sub] = {m.message_id: m.sequence_number for m in got}
        for m in got:
            assert body_text(m) == f"body-{m.message_id}"
            assert "RuleName" not in app_props(m)  # no actions here: unmodified copies
    # One topic sequence number per message, shared by every subscription's copy.
    for sub, by_id in seqs.items():
        for mid, seq in by_id.items():
            assert seq == seqs["all"][mid], f"{sub}/{mid}: {seq} != {seqs['all'][mid]}"
    assert len(set(seqs["all"].values())) == len(messages)
    # The $Default copies keep the send order (one non-partitioned topic log).
    order = [m.message_id for m in messages]
    assert sorted(seqs["all"], key=seqs["all"].get) == order


def test_rule_action_changes_only_that_subscriptions_copy(topic_server, client):
    send(
        client,
        "t-action",
        [msg("a-red", "orig", color="red", qty=20), msg("a-blue", "orig", color="blue", qty=3)],
    )
    received = receive_subs(topic_server, "t-action", {"plain": 2, "act": 1, "multi": 2})
    plain = received["plain"]
    assert sorted(m.message_id for m in plain) == ["a-blue", "a-red"]
    red_plain = next(m for m in plain if m.message_id == "a-red")
    assert red_plain.subject == "orig"
    assert app_props(red_plain) == {"color": "red", "qty": 20}

    (act,) = received["act"]
    assert act.message_id == "a-red"
    assert act.sequence_number == red_plain.sequence_number
    assert act.subject == "relabeled"
    props = app_props(act)
    assert props == {"color": "red", "tagged": "yes", "RuleName": "tagrule"}
    assert body_text(act) == "body-a-red"

    # Azure's copy semantics: the rules without actions give one unmodified copy, each
    # matching rule with an action one more copy, tagged with RuleName.
    multi = received["multi"]
    assert [m.message_id for m in multi] == ["a-red", "a-red"]
    by_rule = {app_props(m).get("RuleName"): app_props(m) for m in multi}
    assert set(by_rule) == {None, "actrule"}
    assert by_rule[None] == {"color": "red", "qty": 20}
    assert by_rule["actrule"] == {"color": "red", "qty": 20, "stamp": "x", "RuleName": "actrule"}


def test_message_matching_no_subscription_is_accepted_and_dropped(client):
    send(client, "t-nomatch", [msg("nm-1", color="red"), msg("nm-2")])  # does not raise
    assert receive_all(client, "t-nomatch", "never") == []
    assert receive_all(client, "t-nomatch", "never", sub_queue=ServiceBusSubQueue.DEAD_LETTER) == []


def test_filter_exception_dead_letters_on_that_subscription(topic_server, client):
    send(
        client,
        "t-filtererr",
        [
            msg("fe-bad", qty=5, zero=0),
            msg("fe-good", qty=5, zero=1),
            msg("fe-small", qty=1, zero=1),
        ],
    )
    received = receive_subs(topic_server, "t-filtererr", {"ok": 3, "div": 1})
    ok, div = received["ok"], received["div"]
    assert sorted(m.message_id for m in ok) == ["fe-bad", "fe-good", "fe-small"]
    assert [m.message_id for m in div] == ["fe-good"]

    with client.get_subscription_receiver(
        "t-filtererr", "div", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=1
    ) as dlq:
        (dead,) = receive_n(dlq, 1, timeout=10)
        assert dead.message_id == "fe-bad"
        assert dead.dead_letter_reason == "SubscriptionRuleEvaluationException"
        assert dead.dead_letter_error_description  # says which rule failed and why
        props = app_props(dead)
        assert {k: props[k] for k in ("qty", "zero")} == {"qty": 5, "zero": 0}
        assert dead.sequence_number == next(
            m.sequence_number for m in ok if m.message_id == "fe-bad"
        )
        dlq.complete_message(dead)
        assert dlq.receive_messages(max_message_count=5, max_wait_time=1) == []


def test_abandon_to_max_delivery_count_dead_letters_on_subscription(client):
    send(client, "t-mdc", [msg("mdc-1")])
    with client.get_subscription_receiver("t-mdc", "s", max_wait_time=1) as receiver:
        for attempt in range(2):
            (m,) = receive_n(receiver, 1, timeout=10)
            assert m.message_id == "mdc-1"
            assert m.delivery_count == attempt
            receiver.abandon_message(m)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
    dead = receive_all(client, "t-mdc", "s", expect=1, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
    assert [m.message_id for m in dead] == ["mdc-1"]
    assert dead[0].dead_letter_reason == "MaxDeliveryCountExceeded"


def test_subscription_receive_and_delete_and_peek(client):
    send(client, "t-action", [msg("rd-1", color="green")])
    with client.get_subscription_receiver("t-action", "plain", max_wait_time=1) as r:
        (peeked,) = r.peek_messages(max_message_count=5)
        assert peeked.message_id == "rd-1"
    with client.get_subscription_receiver(
        "t-action", "plain", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, max_wait_time=1
    ) as r:
        (m,) = receive_n(r, 1, timeout=10)
        assert m.message_id == "rd-1"
    assert receive_all(client, "t-action", "plain") == []


def test_partitioned_topic_keeps_partition_across_subscriptions(topic_server, client):
    keys = [f"key-{i}" for i in range(8)]
    messages = [
        ServiceBusMessage(f"p-{k}-{j}", message_id=f"p-{k}-{j}", partition_key=k)
        for k in keys
        for j in range(2)
    ]
    # Key-less messages are spread by the server; each still keeps its partition everywhere.
    messages += [ServiceBusMessage(f"u-{i}", message_id=f"u-{i}") for i in range(8)]
    send(client, "t-part", messages)
    received = receive_subs(topic_server, "t-part", {"a": len(messages), "b": len(messages)})
    a, b = received["a"], received["b"]
    assert len(a) == len(b) == len(messages)
    seq_a = {m.message_id: m.sequence_number for m in a}
    seq_b = {m.message_id: m.sequence_number for m in b}
    assert seq_a == seq_b  # the same copy number, so the same partition, on both
    assert len({partition_of(seq_a[f"u-{i}"]) for i in range(8)}) > 1
    keyed = [m for m in a + b if m.partition_key is not None]
    assert len(keyed) == 2 * 16
    for m in keyed:
        key = m.partition_key
        assert key in keys
        part = partition_of(m.sequence_number)
        assert 0 <= part < PARTITIONS
        # The documented hash (docs/architecture.md): CRC-32 of the key's UTF-8 bytes mod the count.
        assert part == zlib.crc32(key.encode()) % PARTITIONS, (key, part)
    by_key: dict[str, set[int]] = {}
    for m in keyed:
        by_key.setdefault(m.partition_key, set()).add(partition_of(m.sequence_number))
    assert all(len(parts) == 1 for parts in by_key.values()), by_key
    assert len({p for parts in by_key.values() for p in parts}) > 1  # keys spread out


def test_receiving_from_the_topic_itself_is_refused(client):
    send(client, "t-refuse", [msg("rf-1")])
    with pytest.raises(ServiceBusError) as info:
        with client.get_queue_receiver("t-refuse", max_wait_time=1) as r:
            r.receive_messages(max_message_count=1, max_wait_time=1)
    assert "amqp:not-allowed" in str(info.value)
    # The message is still on the subscription.
    assert [m.message_id for m in receive_all(client, "t-refuse", "s", expect=1)] == ["rf-1"]


def test_unknown_subscription_is_refused(client):
    # its token is refused on $cbs (404, as Azure refuses it: issue 23 item 8)
    with pytest.raises(ServiceBusAuthenticationError):
        with client.get_subscription_receiver("t-refuse", "no-such-sub", max_wait_time=1) as r:
            r.receive_messages(max_message_count=1, max_wait_time=1)


async def test_async_topic_fanout_and_filter(topic_server):
    from azure.servicebus.aio import ServiceBusClient as AsyncClient

    async with AsyncClient.from_connection_string(topic_server.conn_str, retry_total=0) as aclient:
        async with aclient.get_topic_sender("t-async") as sender:
            await sender.send_messages([msg("as-red", color="red"), msg("as-blue", color="blue")])

        async def take(sub: str, n: int) -> list[Any]:
            got: list[Any] = []
            async with aclient.get_subscription_receiver("t-async", sub, max_wait_time=1) as r:
                for _ in range(10):
                    got.extend(await r.receive_messages(max_message_count=10, max_wait_time=1))
                    if len(got) >= n:
                        break
                got.extend(await r.receive_messages(max_message_count=10, max_wait_time=0.5))
                for m in got:
                    await r.complete_message(m)
            return got

        assert sorted(m.message_id for m in await take("all", 2)) == ["as-blue", "as-red"]
        assert [m.message_id for m in await take("red", 1)] == ["as-red"]


# ------------------------------------------------------------------------------- tests: rules


def test_rule_management_over_amqp(topic_server, client):
    from proton import Described, int32

    mgmt = Mgmt(topic_server, "t-rules", "rsub")
    try:
        before = rules_by_name(mgmt.rules())
        assert list(before) == ["$Default"]
        assert before["$Default"][0].descriptor == TRUE_FILTER

        status, text = mgmt.add_rule("r1", sql="n > 100", action="SET big = true")
        assert status == 200 and isinstance(status, int32), (status, text)
        status, _ = mgmt.add_rule("r1", sql="n > 1")
        assert status == 409
        status, text = mgmt.add_rule("bad", sql="n >>> 5")
        assert status == 400
        assert "bad" in text and "position 3" in text, text
        status, text = mgmt.add_rule("c1", correlation={"label": "corr", "properties": {"k": "v"}})
        assert status == 200, text

        rules = rules_by_name(mgmt.rules())
        assert set(rules) == {"$Default", "r1", "c1"}
        filt, action, created = rules["r1"]
        assert isinstance(filt, Described) and filt.descriptor == SQL_FILTER
        assert filt.value[0] == "n > 100"
        assert action.descriptor == SQL_RULE_ACTION and action.value[0] == "SET big = true"
        assert created is not None
        filt, action, _ = rules["c1"]
        assert filt.descriptor == CORRELATION_FILTER
        assert "corr" in filt.value  # the label field
        assert {str(k): v for k, v in filt.value[-1].items()} == {"k": "v"}
        assert action.descriptor == EMPTY_RULE_ACTION

        status, _ = mgmt.remove_rule("$Default")
        assert status == 200
        status, _ = mgmt.remove_rule("no-such-rule")
        assert status == 404
        assert set(rules_by_name(mgmt.rules())) == {"r1", "c1"}
        # enumerate-rules pages with skip/top, in name order as Azure lists them (c1, r1),
        # not in creation order (r1, c1) [issue 36]
        status, _, body = mgmt.request("com.microsoft:enumerate-rules", {"top": 1, "skip": 1})
        assert status == 200
        (page,) = body["rules"]
        assert {str(k): v for k, v in page.items()}["rule-description"].value[2] == "r1"
        status, _, _ = mgmt.request("com.microsoft:enumerate-rules", {"top": 10, "skip": 5})
        assert status == 204
        # The other subscription of the topic is untouched.
        other = Mgmt(topic_server, "t-rules", "other")
        try:
            assert list(rules_by_name(other.rules())) == ["$Default"]
        finally:
            other.close()
    finally:
        mgmt.close()

    # The runtime rules decide the very next send.
    send(
        client,
        "t-rules",
        [msg("rr-small", n=50), msg("rr-big", n=500), msg("rr-corr", "corr", k="v")],
    )
    received = receive_subs(topic_server, "t-rules", {"rsub": 2, "other": 3})
    got = received["rsub"]
    by_id = {m.message_id: app_props(m) for m in got}
    assert set(by_id) == {"rr-big", "rr-corr"}
    assert by_id["rr-big"] == {"n": 500, "big": True, "RuleName": "r1"}
    assert by_id["rr-corr"] == {"k": "v"}
    assert len(received["other"]) == 3


def test_runtime_rules_persist_across_restart(tmp_path):
    topics = [topic_def("t-persist", [sub_def("s")])]
    srv = start_topics_server(tmp_path / "sbemu", QUEUES, topics)
    try:
        mgmt = Mgmt(srv, "t-persist", "s")
        try:
            assert mgmt.add_rule("keep", sql="color = 'red'", action="SET seen = 1")[0] == 200
            assert mgmt.remove_rule("$Default")[0] == 200
        finally:
            mgmt.close()
        srv.restart()
        mgmt = Mgmt(srv, "t-persist", "s")
        try:
            rules = rules_by_name(mgmt.rules())
            assert list(rules) == ["keep"]
            assert rules["keep"][0].value[0] == "color = 'red'"
        finally:
            mgmt.close()
        with ServiceBusClient.from_connection_string(srv.conn_str, retry_total=0) as c:
            send(c, "t-persist", [msg("ps-red", color="red"), msg("ps-blue", color="blue")])
            got = receive_all(c, "t-persist", "s", expect=1)
            assert [(m.message_id, app_props(m)) for m in got] == [
                ("ps-red", {"color": "red", "seen": 1, "RuleName": "keep"})
            ]
        rules_file = srv.data_dir / NAMESPACE / "t-persist" / "rules.json"
        assert rules_file.exists(), sorted(p.name for p in srv.data_dir.rglob("*"))[:20]
    finally:
        shutdown(srv)
