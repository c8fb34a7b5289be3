"""Scheduling on topics, entity status, durable duplicate detection, auto-forwarding and
auto-delete-on-idle against a real sbemu process with the azure-servicebus SDK, on plain and
partitioned entities. One shared server for the module (``feature_server``); tests that restart
or kill the process start their own.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from integration_support import ServerProcess, make_config, queue_def, receive_n


def sub_def(name: str, rules: list[dict[str, Any]] | None = None, **props: Any) -> dict[str, Any]:
    properties: dict[str, Any] = {"LockDuration": "PT5S", "MaxDeliveryCount": 3}
    properties.update(props)
    sub: dict[str, Any] = {"Name": name, "Properties": properties}
    if rules is not None:
        sub["Rules"] = rules
    return sub


def sql_rule(name: str, expression: str) -> dict[str, Any]:
    return {"Name": name, "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": expression}}}


def topic_def(
    name: str, subs: list[dict[str, Any]], *, partitioned: bool = False, **props: Any
) -> dict[str, Any]:
    properties: dict[str, Any] = {"DefaultMessageTimeToLive": "PT1H"}
    if partitioned:
        properties["EnablePartitioning"] = True
    properties.update(props)
    return {"Name": name, "Properties": properties, "Subscriptions": subs}


QUEUES: list[dict[str, Any]] = [queue_def("sched-q")]
TOPICS: list[dict[str, Any]] = [
    topic_def("sched-t", [sub_def("all"), sub_def("red", [sql_rule("r", "color = 'red'")])]),
    topic_def(
        "sched-pt",
        [sub_def("all"), sub_def("red", [sql_rule("r", "color = 'red'")])],
        partitioned=True,
    ),
]


def write_config(tmp: Path, queues: list[dict[str, Any]], topics: list[dict[str, Any]]) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    config = make_config(queues)
    config["UserConfig"]["Namespaces"][0]["Topics"] = topics
    config["UserConfig"]["Logging"] = {"Type": "Console"}
    path = tmp / "config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def start(tmp: Path, queues: list[dict[str, Any]], topics: list[dict[str, Any]]) -> ServerProcess:
    return ServerProcess(write_config(tmp, queues, topics), tmp / "data", tmp).start()


@pytest.fixture(scope="module")
def feature_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start(tmp_path_factory.mktemp("features"), QUEUES, TOPICS)
    yield server
    server.stop()
    assert "Traceback" not in server.stderr_text()


@pytest.fixture
def client(feature_server: ServerProcess) -> Iterator[ServiceBusClient]:
    with ServiceBusClient.from_connection_string(feature_server.conn_str, retry_total=0) as c:
        yield c


# ------------------------------------------------------------------------------ scheduling


@pytest.mark.parametrize("topic", ["sched-t", "sched-pt"])
def test_schedule_and_cancel_on_topic(client: ServiceBusClient, topic: str) -> None:
    """Scheduled topic messages reach the subscriptions (filters applied) only when they fire;
    a cancelled one never does."""
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=2)
    with client.get_topic_sender(topic) as sender:
        keep = ServiceBusMessage("keep", application_properties={"color": "red"})
        drop = ServiceBusMessage("drop", application_properties={"color": "red"})
        seq_keep = sender.schedule_messages(keep, soon)[0]
        seq_drop = sender.schedule_messages(drop, soon)[0]
        assert seq_keep != seq_drop
        sender.cancel_scheduled_messages(seq_drop)
    with client.get_subscription_receiver(topic, "all", max_wait_time=1) as rx:
        assert rx.peek_messages(10) == []  # not fanned out before it fires
    for sub in ("all", "red"):
        with client.get_subscription_receiver(
            topic, sub, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as rx:
            got = receive_n(rx, 2, timeout=8)
            assert [str(m) for m in got] == ["keep"]
            assert got[0].scheduled_enqueue_time_utc is not None


@pytest.mark.parametrize("entity", ["sched-q", "sched-t", "sched-pt"])
def test_cancel_unknown_sequence_is_a_clean_error(client: ServiceBusClient, entity: str) -> None:
    from azure.servicebus.exceptions import ServiceBusError

    sender = (
        client.get_queue_sender(entity) if entity.endswith("-q") else client.get_topic_sender(entity)
    )
    with sender, pytest.raises(ServiceBusError) as info:
        sender.cancel_scheduled_messages(424242)
    assert "Management Operation error" not in str(info.value) or "not found" in str(info.value)
