"""The management API where azure-servicebus 7.15.0's own mgmt_tests found it unlike Azure
(issue 23, items 10-15), each with the unchanged Python ServiceBusAdministrationClient against a
real sbemu (the package's pytest plugin: sbemu_server)."""

from __future__ import annotations

import datetime as dt
import shutil
import urllib.request

import pytest
from admin_support import run_js_admin_script, unique
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.management import (
    ApiVersion,
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

from sbemu.testing.pytest_plugin import SbemuServer

UTC = dt.timezone.utc


# ------------------------------------------------------------------ 10: MaxMessageSizeInKilobytes
def test_max_message_size_is_refused_on_a_standard_namespace(
    admin: ServiceBusAdministrationClient, sbemu_server: SbemuServer
) -> None:
    """Azure answers 400 SubCode=40000 Bad Request when a non-Premium namespace is given
    MaxMessageSizeInKilobytes (test_mgmt_queue_create_with_queue_description,
    test_mgmt_queue_basic_v2017_04); echoing the 256 a GET returned is accepted."""
    for create in (admin.create_queue, admin.create_topic):
        with pytest.raises(HttpResponseError) as refused:
            create(unique("mms"), max_message_size_in_kilobytes=1024)
        assert refused.value.status_code == 400
        assert "SubCode=40000. Bad Request." in str(refused.value)
    with ServiceBusAdministrationClient.from_connection_string(
        sbemu_server.admin_connection_string, api_version=ApiVersion.V2017_04
    ) as old:
        with pytest.raises(HttpResponseError) as refused:
            old.create_queue(unique("mms-old"), max_message_size_in_kilobytes=1024)
        assert refused.value.status_code == 400
    name = unique("mms-ok")
    admin.create_queue(name)
    got = admin.get_queue(name)
    assert got.max_message_size_in_kilobytes == 256
    got.max_delivery_count = 7
    admin.update_queue(got)  # sends MaxMessageSizeInKilobytes=256 back: accepted
    got.max_message_size_in_kilobytes = 2048
    with pytest.raises(HttpResponseError) as refused:
        admin.update_queue(got)
    assert refused.value.status_code == 400
    assert admin.get_queue(name).max_message_size_in_kilobytes == 256


# ------------------------------------------------------------------ 11: RequiresSession
def test_requires_session_cannot_change_on_update(admin: ServiceBusAdministrationClient) -> None:
    """test_mgmt_queue_update_invalid: changing RequiresSession is a 400, nothing changes."""
    name = unique("rs")
    admin.create_queue(name)
    got = admin.get_queue(name)
    got.requires_session = True
    with pytest.raises(HttpResponseError) as refused:
        admin.update_queue(got)
    assert refused.value.status_code == 400
    assert "RequiresSession property of an existing Queue cannot be changed" in str(refused.value)
    assert admin.get_queue(name).requires_session is False
    topic = unique("rs-t")
    admin.create_topic(topic)
    admin.create_subscription(topic, "s", requires_session=True)
    sub = admin.get_subscription(topic, "s")
    sub.requires_session = False
    with pytest.raises(HttpResponseError) as refused:
        admin.update_subscription(topic, sub)
    assert refused.value.status_code == 400
    assert admin.get_subscription(topic, "s").requires_session is True


# ------------------------------------------------------------------ 12: ForwardTo
def _transfer_dead_letters(sb: ServiceBusClient, queue: str) -> list:
    with sb.get_queue_receiver(
        queue, sub_queue=ServiceBusSubQueue.TRANSFER_DEAD_LETTER, max_wait_time=15
    ) as receiver:
        got = receiver.receive_messages(max_message_count=5, max_wait_time=15)
        for message in got:
            receiver.complete_message(message)
        return got


def test_forward_to_itself_and_round_a_cycle_ends_in_the_transfer_dead_letter_queue(
    admin: ServiceBusAdministrationClient, sb: ServiceBusClient
) -> None:
    """test_mgmt_queue_update_success: ForwardTo the queue itself (as a full sb:// URL) and a
    cycle on update are accepted; GET returns sb://<host>/<name>; a message going round stops
    after Azure's 4 hops in the transfer dead-letter queue with MaxTransferHopCountExceeded."""
    selfish = unique("fwd-self")
    admin.create_queue(selfish)
    props = admin.get_queue(selfish)
    props.forward_to = f"sb://localhost/{selfish}"
    props.forward_dead_lettered_messages_to = selfish  # a bare name is taken too
    admin.update_queue(props)
    got = admin.get_queue(selfish)
    assert got.forward_to == f"sb://localhost/{selfish}"
    assert got.forward_dead_lettered_messages_to == f"sb://localhost/{selfish}"

    a, b = unique("fwd-a"), unique("fwd-b")
    admin.create_queue(a)
    admin.create_queue(b, forward_to=a)
    looped = admin.get_queue(a)
    looped.forward_to = b  # a -> b -> a
    admin.update_queue(looped)
    assert admin.get_queue(a).forward_to == f"sb://localhost/{b}"

    with sb.get_queue_sender(selfish) as sender:
        sender.send_messages(ServiceBusMessage("round and round"))
    with sb.get_queue_sender(a) as sender:
        sender.send_messages(ServiceBusMessage("a to b to a"))
    # a -> b (1) -> a (2) -> b (3) -> a (4): the fifth hop is refused at a
    for queue, body in ((selfish, "round and round"), (a, "a to b to a")):
        dead = _transfer_dead_letters(sb, queue)
        assert [str(m) for m in dead] == [body]
        assert dead[0].dead_letter_reason == "MaxTransferHopCountExceeded"
        assert dead[0].dead_letter_error_description == (
            "The maximum number of allowed hops when forwarding between queues has been exceeded."
        )
    runtime = admin.get_queue_runtime_properties(b)
    assert runtime.transfer_dead_letter_message_count == 0 and runtime.active_message_count == 0

    with pytest.raises(HttpResponseError) as refused:  # a destination must exist, as in Azure
        admin.create_queue(unique("fwd-none"), forward_to=unique("missing"))
    assert refused.value.status_code == 400 and "does not exist" in str(refused.value)


# ------------------------------------------------------------------ 13: empty entity name
def test_an_empty_entity_name_gets_the_management_api_answer(
    admin: ServiceBusAdministrationClient, sbemu_server: SbemuServer
) -> None:
    """test_mgmt_queue_get_runtime_properties_negative / create_by_name negative: the SDK
    raises HttpResponseError (not a parse error on the dashboard's HTML)."""
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue_runtime_properties("")
    with pytest.raises(ResourceNotFoundError):
        admin.get_topic("")
    with pytest.raises(HttpResponseError) as refused:
        admin.create_queue("")
    assert refused.value.status_code == 400
    assert refused.value.response.text().startswith("<Error><Code>400</Code>")
    status, body = sbemu_server.request("GET", "/?api-version=2021-05")
    assert status == 200 and b"<feed" in body and b"<entry" not in body
    # a bare GET / with a SAS token is an admin client's too (issue 36 G) ...
    status, body = sbemu_server.request("GET", "/")
    assert status == 200 and b"<feed" in body and b"<entry" not in body
    # ... and without one (a browser), the dashboard stays where it was
    with urllib.request.urlopen(f"{sbemu_server.admin_url}/", timeout=30) as page:
        assert page.status in (200, 303) and b"<feed" not in page.read()


# ------------------------------------------------------------------ 14: typed rule parameters
WHEN = dt.datetime(2020, 7, 5, 11, 12, 13)  # naive, as test_mgmt_rules sends it
CUTOFF = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)  # the SDK sends whole seconds
BIG = 2**31 + 3


def test_rule_parameters_keep_their_types_and_are_applied_typed(
    admin: ServiceBusAdministrationClient, sb: ServiceBusClient, sbemu_server: SbemuServer
) -> None:
    """test_mgmt_rule_create: datetime, duration, long, int, bool, double and string values
    come back with their types through create, get and update, and the filter compares with
    the typed value (a datetime parameter against a timestamp property)."""
    topic, sub = unique("typed"), "s"
    admin.create_topic(topic)
    admin.create_subscription(topic, sub)
    admin.delete_rule(topic, sub, "$Default")
    params = {
        "@after": CUTOFF,
        "@big": BIG,
        "@flag": True,
        "@ratio": 0.5,
        "@who": "ann",
        "@n": 7,
        "@when": WHEN,
        "@span": dt.timedelta(days=1, hours=2, minutes=3),
    }
    admin.create_rule(
        topic,
        sub,
        "typed",
        filter=SqlRuleFilter(
            "created > @after AND n = @n AND ok = @flag AND ratio < @ratio", parameters=params
        ),
        action=SqlRuleAction(
            "SET stamp = @after; SET who = @who", parameters={"@after": CUTOFF, "@who": "ann"}
        ),
    )
    admin.create_rule(
        topic,
        sub,
        "corr",
        filter=CorrelationRuleFilter(
            correlation_id="never",
            properties={
                "key_long": BIG,
                "key_bool": False,
                "key_datetime": WHEN,
                "key_duration": dt.timedelta(days=1, hours=2, minutes=3),
            },
        ),
    )
    rule = admin.get_rule(topic, sub, "typed")
    assert dict(rule.filter.parameters) == params
    assert dict(rule.action.parameters) == {"@after": CUTOFF, "@who": "ann"}
    corr = admin.get_rule(topic, sub, "corr").filter.properties
    assert corr["key_long"] == BIG and corr["key_bool"] is False
    assert corr["key_datetime"] == WHEN and corr["key_duration"] == dt.timedelta(
        hours=26, minutes=3
    )
    status, body = sbemu_server.request(
        "GET", f"/{topic}/Subscriptions/{sub}/Rules/typed?api-version=2021-05"
    )
    text = body.decode()
    for typ, value in (
        ("dateTime", "2024-01-02T03:04:05Z"),
        ("long", str(BIG)),
        ("boolean", "true"),
        ("double", "0.5"),
        ("string", "ann"),
        ("int", "7"),
        ("dateTime", "2020-07-05T11:12:13"),
        ("duration", "P1DT2H3M"),
    ):
        assert f'i:type="d6p1:{typ}" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">{value}<' in text
    rule.filter.parameters["@ratio"] = 0.75
    admin.update_rule(topic, sub, rule)
    assert admin.get_rule(topic, sub, "typed").filter.parameters["@ratio"] == 0.75

    later, earlier = CUTOFF + dt.timedelta(days=1), CUTOFF - dt.timedelta(days=1)
    with sb.get_topic_sender(topic) as sender:
        for label, created in (("late", later), ("early", earlier)):
            sender.send_messages(
                ServiceBusMessage(
                    label,
                    application_properties={"created": created, "n": 7, "ok": True, "ratio": 0.6},
                )
            )
    with sb.get_subscription_receiver(topic, sub, max_wait_time=10) as receiver:
        got = receiver.receive_messages(max_message_count=2, max_wait_time=10)
        got += receiver.receive_messages(max_message_count=2, max_wait_time=2)
        assert [str(m) for m in got] == ["late"]
        props = {
            k.decode() if isinstance(k, bytes) else k: v
            for k, v in got[0].application_properties.items()
        }
        # the action's datetime parameter set as an AMQP timestamp (pyamqp reads it as ms)
        assert props["stamp"] == int(CUTOFF.timestamp() * 1000)
        assert props["who"] in ("ann", b"ann")
        receiver.complete_message(got[0])


# ------------------------------------------------------------------ 15: filter counts
def test_topic_runtime_properties_count_sql_and_correlation_filters(
    admin: ServiceBusAdministrationClient, sbemu_server: SbemuServer
) -> None:
    """api-version 2024-05's SqlFilterCount and CorrelationFilterCount (the $Default TrueFilter
    counts as SQL, as the service counts it); older api-versions omit them."""
    topic = unique("counts")
    admin.create_topic(topic)
    admin.create_subscription(topic, "s1")  # $Default
    admin.create_subscription(topic, "s2")
    admin.create_rule(topic, "s1", "sql", filter=SqlRuleFilter("n > 1"))
    admin.create_rule(topic, "s2", "corr", filter=CorrelationRuleFilter(correlation_id="c"))
    admin.delete_rule(topic, "s2", "$Default")
    runtime = admin.get_topic_runtime_properties(topic)
    assert (
        runtime.subscription_count,
        runtime.sql_filter_count,
        runtime.correlation_filter_count,
    ) == (2, 2, 1)  # s1: $Default + sql
    with ServiceBusAdministrationClient.from_connection_string(
        sbemu_server.admin_connection_string, api_version=ApiVersion.V2021_05
    ) as older:
        runtime = older.get_topic_runtime_properties(topic)
        assert runtime.sql_filter_count is None and runtime.correlation_filter_count is None
    status, body = sbemu_server.request("GET", f"/{topic}?api-version=2024-05")
    assert (
        b"<MaxMessageSizeInKilobytes>256</MaxMessageSizeInKilobytes><SqlFilterCount>2"
        b"</SqlFilterCount><CorrelationFilterCount>1</CorrelationFilterCount>" in body
    )


# ------------------------------------------------------------------ the JS admin client
@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_js_admin_parity(sbemu_server: SbemuServer) -> None:
    """Items 10, 11, 12 and 14 through @azure/service-bus's ServiceBusAdministrationClient."""
    run_js_admin_script(sbemu_server, "admin_parity.mjs", "admin parity ok")
