"""The management plane end to end: the real azure-servicebus admin clients (sync and async)
against a real sbemu (the package's own pytest plugin: sbemu_server, sbemu_entities), HTTPS
with sbemu's local CA, and AMQP clients seeing the changes at once [P4, P5, P17, P18, P19]."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from admin_support import run_js_admin_script, unique
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessagingEntityNotFoundError, ServiceBusAuthenticationError
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

from sbemu.auth.sas import make_sas_token
from sbemu.testing.pytest_plugin import EntityFactory, SbemuServer, start_server, stop_server

NS = "sbemulatorns"


def post(server: SbemuServer, path: str) -> dict:
    """A signed POST (a SAS token of the Manage key), as a real client sends it."""
    status, body = server.request("POST", path, b"")
    assert status == 200, (status, body)
    return json.loads(body)


def test_partitioned_queue_lifecycle(
    admin: ServiceBusAdministrationClient, sb: ServiceBusClient, sbemu_server: SbemuServer
) -> None:
    name = unique("adm-pq")
    created = admin.create_queue(
        name,
        enable_partitioning=True,
        max_size_in_megabytes=1024,
        lock_duration=dt.timedelta(seconds=30),
        user_metadata="hello",
    )
    assert created.enable_partitioning is True
    assert created.max_size_in_megabytes == 1024 * 16  # [P5] size x 16 partitions
    got = admin.get_queue(name)
    assert got.lock_duration == dt.timedelta(seconds=30) and got.user_metadata == "hello"
    assert got.max_delivery_count == 10 and got.status == "Active"  # Azure's defaults
    assert got.availability_status == "Available"
    with pytest.raises(HttpResponseError) as refused:  # [P4]
        admin.update_queue(got, enable_partitioning=False)
    assert refused.value.status_code == 400 and "Partitioning cannot be changed" in str(
        refused.value
    )
    got.max_delivery_count = 4
    admin.update_queue(got)  # echoes MaxSizeInMegabytes=16384: read as 1024 per partition
    again = admin.get_queue(name)
    assert again.max_delivery_count == 4 and again.max_size_in_megabytes == 16384

    with sb.get_queue_sender(name) as sender:  # sendable at once
        sender.send_messages([ServiceBusMessage(f"m{i}", message_id=f"id-{i}") for i in range(40)])
        sender.schedule_messages(
            ServiceBusMessage("later"), dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        )
    props = admin.get_queue_runtime_properties(name)  # [P17] summed over partitions
    assert props.active_message_count == 40 and props.scheduled_message_count == 1
    assert props.total_message_count == 41 and props.size_in_bytes > 0

    post(sbemu_server, f"/partitions/{NS}/{name}/3/offline")
    try:
        assert admin.get_queue(name).availability_status == "Limited"  # [P18]
        with pytest.raises(HttpResponseError) as busy:  # [P17]
            admin.update_queue(admin.get_queue(name), max_delivery_count=5, retry_total=0)
        assert busy.value.status_code == 503
    finally:
        post(sbemu_server, f"/partitions/{NS}/{name}/3/online")
    assert admin.get_queue(name).availability_status == "Available"

    admin.delete_queue(name)
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue(name)
    assert name not in [q.name for q in admin.list_queues()]
    with pytest.raises(ServiceBusAuthenticationError):  # $cbs: 404 (issue 23 item 8)
        with sb.get_queue_sender(name) as sender:
            sender.send_messages(ServiceBusMessage("gone"))
    assert not (sbemu_server.data_dir / NS / name).exists()  # partitions' data removed


def test_topic_subscriptions_and_rules_filter_messages(
    admin: ServiceBusAdministrationClient, sb: ServiceBusClient
) -> None:
    topic = unique("adm-t")
    admin.create_topic(topic)
    admin.create_subscription(topic, "all")
    admin.create_subscription(topic, "red", max_delivery_count=7)
    admin.create_subscription(topic, "vip")
    admin.delete_rule(topic, "red", "$Default")
    admin.create_rule(
        topic,
        "red",
        "red",
        filter=SqlRuleFilter("color = 'red'"),
        action=SqlRuleAction("SET tagged = 'yes'"),
    )
    admin.create_subscription(topic, "param")
    admin.delete_rule(topic, "param", "$Default")
    admin.create_rule(
        topic,
        "param",
        "p",
        filter=SqlRuleFilter("color = @c AND size > @n", parameters={"@c": "blue", "@n": 2}),
    )
    assert admin.get_rule(topic, "param", "p").filter.parameters == {"@c": "blue", "@n": 2}
    admin.delete_rule(topic, "vip", "$Default")
    admin.create_rule(
        topic,
        "vip",
        "vip",
        filter=CorrelationRuleFilter(correlation_id="gold", properties={"tier": 1}),
    )
    with pytest.raises(ResourceExistsError):
        admin.create_subscription(topic, "red")
    rule = admin.get_rule(topic, "vip", "vip")
    assert rule.filter.correlation_id == "gold" and rule.filter.properties == {"tier": 1}
    red_rule = admin.get_rule(topic, "red", "red")
    assert red_rule.filter.sql_expression == "color = 'red'"
    assert red_rule.action.sql_expression == "SET tagged = 'yes'"
    assert sorted(s.name for s in admin.list_subscriptions(topic)) == ["all", "param", "red", "vip"]
    assert admin.get_subscription(topic, "red").max_delivery_count == 7
    assert admin.get_topic_runtime_properties(topic).subscription_count == 4

    with sb.get_topic_sender(topic) as sender:
        sender.send_messages(
            [
                ServiceBusMessage("r", application_properties={"color": "red"}),
                ServiceBusMessage("b", application_properties={"color": "blue", "size": 3}),
                ServiceBusMessage("g", correlation_id="gold", application_properties={"tier": 1}),
            ]
        )
    assert admin.get_subscription_runtime_properties(topic, "all").active_message_count == 3

    def bodies(sub: str, expect: int) -> list[tuple[str, object]]:
        out = []
        with sb.get_subscription_receiver(topic, sub, max_wait_time=5) as receiver:
            while len(out) < expect:
                batch = receiver.receive_messages(max_message_count=10, max_wait_time=5)
                if not batch:
                    break
                for msg in batch:
                    props = msg.application_properties or {}
                    out.append((str(msg), props.get(b"tagged", props.get("tagged"))))
                    receiver.complete_message(msg)
        return sorted(out)

    red = bodies("red", 1)
    assert [b for b, _ in red] == ["r"] and red[0][1] in ("yes", b"yes")
    assert [b for b, _ in bodies("vip", 1)] == ["g"]
    assert [b for b, _ in bodies("param", 1)] == ["b"]  # SQL filter @parameters bound
    admin.delete_subscription(topic, "vip")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription(topic, "vip")
    admin.delete_topic(topic)


async def test_async_admin_client_paging_and_lock_duration(sbemu_server: SbemuServer) -> None:
    from azure.servicebus.aio import ServiceBusClient as AsyncClient
    from azure.servicebus.aio.management import ServiceBusAdministrationClient as AsyncAdmin

    prefix = unique("adm-async")
    async with AsyncAdmin.from_connection_string(sbemu_server.admin_connection_string) as admin:
        names = [f"{prefix}-{i}" for i in range(3)]
        for n in names:
            await admin.create_queue(n, lock_duration=dt.timedelta(seconds=10))
        listed = [q.name async for q in admin.list_queues()]
        assert all(n in listed for n in names)
        info = await admin.get_namespace_properties()
        assert info.name == NS and info.messaging_sku == "Standard"
        queue = await admin.get_queue(names[0])
        queue.lock_duration = dt.timedelta(seconds=45)
        await admin.update_queue(queue)
        async with AsyncClient.from_connection_string(sbemu_server.connection_string) as sb:
            async with sb.get_queue_sender(names[0]) as sender:
                await sender.send_messages(ServiceBusMessage("x"))
            async with sb.get_queue_receiver(names[0], max_wait_time=5) as receiver:
                [msg] = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
                held = (msg.locked_until_utc - dt.datetime.now(dt.timezone.utc)).total_seconds()
                assert 30 < held <= 46  # the new lock duration applies to the next lock
                await receiver.complete_message(msg)
        for n in names:
            await admin.delete_queue(n)
        with pytest.raises(ResourceNotFoundError):
            await admin.delete_queue(names[0])

    # $skip/$top paging with a next link, as the SDKs page
    status, body = sbemu_server.request("GET", "/$Resources/queues?$skip=0&$top=1")
    assert status == 200 and body.count(b"<entry") == 1 and b'rel="next"' in body


def test_delete_detaches_receivers_with_not_found(
    admin: ServiceBusAdministrationClient, sb: ServiceBusClient, sbemu_entities: EntityFactory
) -> None:
    name = sbemu_entities.queue()
    receiver = sb.get_queue_receiver(name, max_wait_time=30)
    with receiver:
        receiver.peek_messages(1)  # link attached
        admin.delete_queue(name)
        start = time.monotonic()
        with pytest.raises(MessagingEntityNotFoundError):  # detached with amqp:not-found
            for _ in range(3):
                receiver.receive_messages(max_message_count=1, max_wait_time=10)
        assert time.monotonic() - start < 25
    sbemu_entities.created.remove(name)


def test_purge_entity_and_namespace(
    sbemu_server: SbemuServer,
    admin: ServiceBusAdministrationClient,
    sb: ServiceBusClient,
    sbemu_entities: EntityFactory,
) -> None:
    q = sbemu_entities.queue(enable_partitioning=True)
    topic = sbemu_entities.topic(subscriptions=("a", "b"))
    with sb.get_queue_sender(q) as sender:
        sender.send_messages([ServiceBusMessage(str(i)) for i in range(10)])
        sender.schedule_messages(
            ServiceBusMessage("s"), dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        )
    with sb.get_queue_receiver(q, max_wait_time=5) as receiver:
        for msg in receiver.receive_messages(max_message_count=2, max_wait_time=5):
            receiver.dead_letter_message(msg, reason="test")
    with sb.get_topic_sender(topic) as sender:
        sender.send_messages([ServiceBusMessage("t") for _ in range(3)])
    before = admin.get_queue_runtime_properties(q)
    assert before.total_message_count == 11 and before.dead_letter_message_count == 2

    result = post(sbemu_server, f"/purge/{NS}/{q}")
    assert result["purged"] == {q: 11}
    after = admin.get_queue_runtime_properties(q)
    assert after.total_message_count == 0 and after.dead_letter_message_count == 0
    out = subprocess.run(
        [sys.executable, "-m", "sbemu", "purge", NS, "--admin-url", sbemu_server.admin_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and f"{NS}/{topic}: 6 message(s) purged" in out.stdout
    assert admin.get_subscription_runtime_properties(topic, "a").total_message_count == 0


def test_bad_tokens_are_refused(sbemu_server: SbemuServer) -> None:
    status, body = sbemu_server.request("GET", "/$namespaceinfo", headers={"Authorization": ""})
    assert status == 401 and b"MissingToken" in body
    wrong = sbemu_server.admin_connection_string.replace("SAS_KEY_VALUE", "bm90LXRoZS1rZXk=")
    with ServiceBusAdministrationClient.from_connection_string(wrong) as bad:
        with pytest.raises(ClientAuthenticationError):
            bad.get_namespace_properties()
    expired = make_sas_token(
        f"sb://localhost:{sbemu_server.admin_port}/",
        sbemu_server.key_name,
        sbemu_server.key,
        int(time.time()) - 10,
    )
    status, body = sbemu_server.request(
        "GET", "/$Resources/queues", headers={"Authorization": expired}
    )
    assert status == 401 and b"ExpiredToken" in body


def test_restart_keeps_runtime_entities_and_listen_policy_cannot_write(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "UserConfig": {
                    "Namespaces": [
                        {
                            "Name": NS,
                            "SharedAccessPolicies": [
                                {
                                    "KeyName": "RootManageSharedAccessKey",
                                    "Key": "SAS_KEY_VALUE",
                                    "Rights": ["Manage", "Send", "Listen"],
                                },
                                {"KeyName": "listener", "Key": "bGlzdGVu", "Rights": ["Listen"]},
                            ],
                            "Queues": [
                                {"Name": "from-config", "Properties": {"MaxDeliveryCount": 3}}
                            ],
                            "Topics": [],
                        }
                    ],
                    "Logging": {"Type": "Console"},
                }
            }
        )
    )
    data = tmp_path / "data"
    server = start_server(data, str(config))
    env = {"REQUESTS_CA_BUNDLE": str(server.ca_file), "SSL_CERT_FILE": str(server.ca_file)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with ServiceBusAdministrationClient.from_connection_string(
            server.admin_connection_string
        ) as admin:
            admin.create_queue("runtime-q", requires_session=True, enable_partitioning=True)
            admin.create_topic("runtime-t")
            admin.create_subscription("runtime-t", "s1", lock_duration=dt.timedelta(seconds=20))
            admin.create_rule("runtime-t", "s1", "r1", filter=SqlRuleFilter("n > 1"))
            changed = admin.get_queue("from-config")
            changed.max_delivery_count = 9
            admin.update_queue(changed)
        listen = server.admin_connection_string.replace(
            "SharedAccessKeyName=RootManageSharedAccessKey", "SharedAccessKeyName=listener"
        ).replace("SharedAccessKey=SAS_KEY_VALUE", "SharedAccessKey=bGlzdGVu")
        with ServiceBusAdministrationClient.from_connection_string(listen) as reader:
            assert reader.get_queue("runtime-q").requires_session is True
            with pytest.raises(ClientAuthenticationError):
                reader.create_queue("not-allowed")
        stop_server(server)
        server = start_server(data, str(config))
        admin_conn = server.admin_connection_string
        with ServiceBusAdministrationClient.from_connection_string(admin_conn) as admin:
            q = admin.get_queue("runtime-q")
            assert q.requires_session and q.enable_partitioning and q.max_size_in_megabytes == 16384
            assert admin.get_subscription("runtime-t", "s1").lock_duration == dt.timedelta(
                seconds=20
            )
            assert {r.name for r in admin.list_rules("runtime-t", "s1")} == {"$Default", "r1"}
            assert admin.get_queue("from-config").max_delivery_count == 9  # the API's change wins
        with ServiceBusClient.from_connection_string(server.connection_string) as sb:
            with sb.get_queue_sender("runtime-q") as sender:
                sender.send_messages(ServiceBusMessage("x", session_id="s"))
    finally:
        stop_server(server)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_js_admin_client(sbemu_server: SbemuServer) -> None:
    run_js_admin_script(sbemu_server, "admin_client.mjs", "admin client ok")


def test_readme_plugin_example(sbemu_server: SbemuServer, sbemu_entities: EntityFactory) -> None:
    queue = sbemu_entities.queue(enable_partitioning=True)
    with ServiceBusClient.from_connection_string(sbemu_server.connection_string) as sb:
        with sb.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("hi"))
    with ServiceBusAdministrationClient.from_connection_string(
        sbemu_server.admin_connection_string
    ) as admin:
        assert admin.get_queue_runtime_properties(queue).active_message_count == 1


def test_forwarding_and_status_set_through_the_admin_client(
    admin: ServiceBusAdministrationClient, sb: ServiceBusClient
) -> None:
    """ForwardTo and Status set with the admin client are acted on at once (issue 9 via 8)."""
    from azure.servicebus.exceptions import ServiceBusError

    dest, source, other = unique("adm-fdst"), unique("adm-fsrc"), unique("adm-floop")
    admin.create_queue(dest, enable_partitioning=True)
    admin.create_queue(source, forward_to=dest)
    assert admin.get_queue(source).forward_to.rstrip("/").endswith(dest)
    with sb.get_queue_sender(source) as sender:
        sender.send_messages(ServiceBusMessage("moved", partition_key="k1"))
    with sb.get_queue_receiver(dest, max_wait_time=10) as receiver:
        got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        assert [str(m) for m in got] == ["moved"]
        receiver.complete_message(got[0])
    # a destination that does not exist is refused; nothing changes (loops are accepted as
    # Azure accepts them: test_admin_parity.py)
    admin.create_queue(other, forward_to=source)
    looped = admin.get_queue(dest)
    looped.forward_to = unique("adm-fmissing")
    with pytest.raises(HttpResponseError) as refused:
        admin.update_queue(looped)
    assert refused.value.status_code == 400 and "does not exist" in str(refused.value)
    assert admin.get_queue(dest).forward_to is None
    # Status: SendDisabled refuses sends at once; Active again lets them through
    props = admin.get_queue(dest)
    props.status = "SendDisabled"
    admin.update_queue(props)
    assert admin.get_queue(dest).status == "SendDisabled"
    with pytest.raises(ServiceBusError):  # refused at attach or at the send
        with sb.get_queue_sender(dest) as sender:
            sender.send_messages(ServiceBusMessage("refused"))
    props = admin.get_queue(dest)
    props.status = "Active"
    admin.update_queue(props)
    assert admin.get_queue(dest).status == "Active"
    with sb.get_queue_sender(dest) as sender:
        sender.send_messages(ServiceBusMessage("accepted"))


def test_missing_subscription_and_rule_are_404_a_missing_queue_an_empty_feed(
    sbemu_server: SbemuServer, sbemu_entities: EntityFactory
) -> None:
    # Azure: GET of a missing queue or topic answers 200 with an empty feed, of a missing
    # subscription or rule 404 <Error> (the Java admin client's getSubscriptionExists and
    # getRule read no feed there: "Deserialization Failed")
    topic = sbemu_entities.topic(subscriptions=("s1",))
    status, body = sbemu_server.request("GET", f"{unique('nq')}?api-version=2021-05")
    assert status == 200 and b"<feed" in body and b"<entry" not in body
    for path in (
        f"{topic}/Subscriptions/missing",
        f"{unique('nt')}/Subscriptions/s1",
        f"{topic}/Subscriptions/s1/Rules/missing",
        f"{topic}/Subscriptions/missing/Rules/$Default",
    ):
        status, body = sbemu_server.request("GET", f"{path}?api-version=2021-05")
        assert status == 404, (path, body)
        assert b"<Error><Code>404</Code>" in body and b"was not found" in body, body
    status, body = sbemu_server.request("GET", f"{topic}/Subscriptions/s1/Rules/$Default")
    assert status == 200 and b"<entry" in body


def test_topic_runtime_counts_its_scheduled_messages(
    admin: ServiceBusAdministrationClient, sb: ServiceBusClient, sbemu_entities: EntityFactory
) -> None:
    # a topic's scheduled message waits in the topic until it fires: Azure's
    # TopicRuntimeProperties count it (ScheduledMessageCount) and its bytes (SizeInBytes), as the
    # Go SDK's live test TestAdminClient_TopicAndSubscriptionRuntimeProperties checks
    for partitioned in (False, True):
        topic = sbemu_entities.topic(subscriptions=("s1",), enable_partitioning=partitioned)
        with sb.get_topic_sender(topic) as sender:
            sender.schedule_messages(
                ServiceBusMessage("later"),
                dt.datetime.now(dt.UTC) + dt.timedelta(hours=2),
            )
        runtime = admin.get_topic_runtime_properties(topic)
        assert runtime.scheduled_message_count == 1
        assert runtime.size_in_bytes > 0
        assert admin.get_subscription_runtime_properties(topic, "s1").active_message_count == 0
