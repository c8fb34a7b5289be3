"""A second namespace on its own AMQP port (issue 14, item 5): `sb://otherns.localhost` needs a
DNS entry a stock machine lacks, so a namespace may set `AmqpPort` and is then served there
whatever host name the client uses. Driven by the Python SDK here and by the JS SDK in
tests/js/namespaces.test.mjs."""

from __future__ import annotations

import json
import re

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthenticationError
from integration_support import ServerProcess, make_config, queue_def

NS_LINE = re.compile(r"namespace (\S+) on amqp://[^ ]+:(\d+): (Endpoint=\S+)")


@pytest.fixture(scope="module")
def two_namespaces(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sbemu-ns")
    config = make_config([queue_def("main-q")])
    config["UserConfig"]["Namespaces"].append(
        {
            "Name": "otherns",
            "AmqpPort": 0,
            "SharedAccessPolicies": [
                {
                    "KeyName": "OtherKey",
                    "Key": "OTHER_VALUE",
                    "Rights": ["Manage", "Send", "Listen"],
                }
            ],
            "Queues": [queue_def("other-q"), queue_def("other-pq", partitioned=True)],
            "Topics": [],
        }
    )
    (tmp / "config.json").write_text(json.dumps(config))
    server = ServerProcess(tmp / "config.json", tmp / "data", tmp).start()
    try:
        # the namespace's own port, from the ready document (its ready line says the same)
        (entry,) = [ns for ns in server.ready.namespaces if ns["name"] == "otherns"]
        assert entry["amqp_port"] != server.port
        match = server.wait_for_output(NS_LINE.pattern)
        assert match.group(3) == entry["connection_string"]
        yield server, entry["connection_string"]
    finally:
        server.stop()


@pytest.mark.parametrize("queue", ["other-q", "other-pq"])
def test_second_namespace_on_its_own_port(two_namespaces, queue):
    server, other_conn = two_namespaces
    with ServiceBusClient.from_connection_string(other_conn) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("to otherns"))
        with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
            got = receiver.receive_messages(max_wait_time=5)
            assert [str(m) for m in got] == ["to otherns"]
            receiver.complete_message(got[0])


def test_namespaces_stay_apart(two_namespaces):
    server, other_conn = two_namespaces
    # the main port serves the first namespace: otherns's queue is not there
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        # its token is refused on $cbs (404, as Azure refuses it: issue 23 item 8)
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender("other-q") as sender:
                sender.send_messages(ServiceBusMessage("x"))
    # and otherns's port checks otherns's keys
    wrong = other_conn.replace("OTHER_VALUE", "SAS_KEY_VALUE")
    with ServiceBusClient.from_connection_string(wrong, retry_total=0) as client:
        with pytest.raises(Exception) as info:
            with client.get_queue_sender("other-q") as sender:
                sender.send_messages(ServiceBusMessage("x"))
        assert (
            "unauthorized" in str(info.value).lower() or "auth" in type(info.value).__name__.lower()
        )
