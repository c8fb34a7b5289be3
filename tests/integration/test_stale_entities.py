"""A new entity is empty (issue 33, item 3): messages an entity left on disk come back in no
entity created later with its name, by the configuration or by the admin API, whatever its
partitioning. On Azure a deleted entity's messages are gone; sbemu moves the directory of an
entity the configuration and the admin API no longer name aside at start
(``<data dir>/.retired/``, docs/configuration.md) instead of deleting it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from integration_support import ServerProcess, make_config, queue_def, start_server

SBEMU_QUEUES = [queue_def("orders"), queue_def("other")]


def _write_config(server: ServerProcess, queues: list[dict]) -> None:
    server.config_path.write_text(json.dumps(make_config(queues), indent=2))


def _send(server: ServerProcess, queue: str, n: int) -> None:
    with (
        ServiceBusClient.from_connection_string(server.conn_str) as client,
        client.get_queue_sender(queue) as sender,
    ):
        sender.send_messages([ServiceBusMessage(f"old-{i}") for i in range(n)])


def _received(server: ServerProcess, queue: str) -> list[str]:
    with (
        ServiceBusClient.from_connection_string(server.conn_str) as client,
        client.get_queue_receiver(queue, max_wait_time=2) as receiver,
    ):
        return [str(m) for m in receiver.receive_messages(max_message_count=10, max_wait_time=2)]


def _restart_without_orders(tmp_path: Path) -> ServerProcess:
    server = start_server(tmp_path / "sbemu", SBEMU_QUEUES)
    _send(server, "orders", 2)
    _send(server, "other", 1)
    assert server.stop() == 0
    _write_config(server, [queue_def("other")])
    return server.start()


@pytest.mark.parametrize("partitioned", [False, True])
def test_queue_created_by_the_admin_api_starts_empty(tmp_path: Path, partitioned: bool) -> None:
    server = _restart_without_orders(tmp_path)
    try:
        with ServiceBusAdministrationClient.from_connection_string(
            server.ready.admin_connection_string, connection_verify=str(server.ca_file)
        ) as admin:
            # the old queue had one partition; a partitioned one was a 500 before
            admin.create_queue("orders", enable_partitioning=partitioned)
            props = admin.get_queue_runtime_properties("orders")
            assert props.active_message_count == 0
        assert _received(server, "orders") == []
        assert _received(server, "other") == ["old-0"], "a named entity keeps its messages"
        retired = list((server.data_dir / ".retired").glob("sbemulatorns/orders*"))
        assert len(retired) == 1, "the old queue's directory is kept aside, not deleted"
        assert "moved aside" in server.stderr_text()
    finally:
        server.stop()


def test_queue_named_again_by_the_config_starts_empty(tmp_path: Path) -> None:
    server = _restart_without_orders(tmp_path)
    try:
        assert server.stop() == 0
        _write_config(server, SBEMU_QUEUES)
        server.start()
        assert _received(server, "orders") == []
        assert _received(server, "other") == ["old-0"]
    finally:
        server.stop()


def test_config_naming_an_entity_keeps_its_data(tmp_path: Path) -> None:
    server = start_server(tmp_path / "sbemu", SBEMU_QUEUES)
    try:
        _send(server, "orders", 2)
        server.restart()
        assert sorted(_received(server, "orders")) == ["old-0", "old-1"]
        assert not (server.data_dir / ".retired").exists()
    finally:
        server.stop()


def _topic_config(subs: list[str]) -> dict:
    cfg = make_config([])
    cfg["UserConfig"]["Namespaces"][0]["Topics"] = [
        {"Name": "events", "Subscriptions": [{"Name": s} for s in subs]}
    ]
    return cfg


def test_subscription_named_again_by_the_config_starts_empty(tmp_path: Path) -> None:
    server = start_server(tmp_path / "sbemu", [])
    try:
        assert server.stop() == 0
        server.config_path.write_text(json.dumps(_topic_config(["kept", "dropped"])))
        server.start()
        with (
            ServiceBusClient.from_connection_string(server.conn_str) as client,
            client.get_topic_sender("events") as sender,
        ):
            sender.send_messages([ServiceBusMessage("old-0"), ServiceBusMessage("old-1")])
        assert server.stop() == 0
        server.config_path.write_text(json.dumps(_topic_config(["kept"])))
        server.start()
        assert "subscriptions/dropped" in server.stderr_text()
        assert server.stop() == 0
        server.config_path.write_text(json.dumps(_topic_config(["kept", "dropped"])))
        server.start()
        with ServiceBusClient.from_connection_string(server.conn_str) as client:
            for sub, want in (("dropped", 0), ("kept", 2)):
                with client.get_subscription_receiver("events", sub, max_wait_time=2) as r:
                    got = r.receive_messages(max_message_count=10, max_wait_time=2)
                    assert len(got) == want, (sub, [str(m) for m in got])
    finally:
        server.stop()
