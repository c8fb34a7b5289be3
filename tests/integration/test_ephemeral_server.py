"""``sbemu serve --ephemeral`` under the Python SDK. Its stores do not sync, so its commits run
inside the event loop's turn (sbemu.runtime.commitloop, inline) rather than on commit threads: this
module drives the paths the rest of the suite runs on durable servers through that mode too.
One message at a time received and completed, a partitioned queue, a session with state,
forwarding, a scheduled message coming due on the server's test clock, abandon and
dead-letter, a 200 KB message."""

from __future__ import annotations

import datetime as dt
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from integration_support import ServerProcess, body_text, drain, queue_def, receive_n

SBEMU_EPHEMERAL = True
SBEMU_QUEUES = [
    queue_def("eq"),
    queue_def("epq", partitioned=True),
    queue_def("esq", RequiresSession=True),
    queue_def("efwd", ForwardTo="edest"),
    queue_def("edest"),
    queue_def("elate"),
    queue_def("edlq", max_delivery_count=2),
]


def test_the_server_runs_ephemeral(server: ServerProcess) -> None:
    doc = server.ready.document
    assert doc["ephemeral"] is True
    assert doc["data_dir"] != str(server.data_dir)  # a temporary dir of its own


def test_one_message_at_a_time_received_and_completed(sb_client: Any) -> None:
    with sb_client.get_queue_sender("eq") as sender:
        for i in range(40):
            sender.send_messages(ServiceBusMessage(f"m{i}"))
    seen = []
    with sb_client.get_queue_receiver("eq", max_wait_time=5) as receiver:
        for _ in range(40):
            (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            seen.append(body_text(msg))
            receiver.complete_message(msg)
    assert seen == [f"m{i}" for i in range(40)]  # in order, each once
    assert drain(sb_client, "eq") == 0


def test_a_partitioned_queue(sb_client: Any) -> None:
    with sb_client.get_queue_sender("epq") as sender:
        sender.send_messages(
            [ServiceBusMessage(f"p{i}", partition_key=f"k{i % 8}") for i in range(64)]
        )
    with sb_client.get_queue_receiver("epq", max_wait_time=5) as receiver:
        got = receive_n(receiver, 64)
        for msg in got:
            receiver.complete_message(msg)
    assert sorted(body_text(m) for m in got) == sorted(f"p{i}" for i in range(64))
    assert len({m.sequence_number >> 48 for m in got}) > 1  # spread over partitions
    assert drain(sb_client, "epq") == 0


def test_a_session_with_state(sb_client: Any) -> None:
    with sb_client.get_queue_sender("esq") as sender:
        sender.send_messages([ServiceBusMessage(f"s{i}", session_id="one") for i in range(5)])
    with sb_client.get_queue_receiver("esq", session_id="one", max_wait_time=5) as receiver:
        got = receive_n(receiver, 5)
        assert [body_text(m) for m in got] == [f"s{i}" for i in range(5)]
        for msg in got:
            receiver.complete_message(msg)
        receiver.session.set_state(b"after-5")
    with sb_client.get_queue_receiver("esq", session_id="one", max_wait_time=1) as receiver:
        assert receiver.session.get_state() == b"after-5"
        assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []


def test_forwarding(sb_client: Any) -> None:
    with sb_client.get_queue_sender("efwd") as sender:
        sender.send_messages([ServiceBusMessage(f"f{i}") for i in range(10)])
    with sb_client.get_queue_receiver("edest", max_wait_time=5) as receiver:
        got = receive_n(receiver, 10)
        for msg in got:
            receiver.complete_message(msg)
    assert sorted(body_text(m) for m in got) == sorted(f"f{i}" for i in range(10))


def test_a_scheduled_message_comes_due(server: ServerProcess, sb_client: Any) -> None:
    with sb_client.get_queue_sender("elate") as sender:
        sender.schedule_messages(ServiceBusMessage("later"), server.now() + dt.timedelta(minutes=2))
    assert drain(sb_client, "elate") == 0
    server.advance_clock(121)
    with sb_client.get_queue_receiver("elate", max_wait_time=5) as receiver:
        (msg,) = receive_n(receiver, 1)
        assert body_text(msg) == "later"
        receiver.complete_message(msg)


def test_abandoned_to_the_dead_letter_queue(sb_client: Any) -> None:
    with sb_client.get_queue_sender("edlq") as sender:
        sender.send_messages(ServiceBusMessage("poison"))
    with sb_client.get_queue_receiver("edlq", max_wait_time=5) as receiver:
        for _ in range(2):  # MaxDeliveryCount 2
            (msg,) = receive_n(receiver, 1)
            receiver.abandon_message(msg)
    with sb_client.get_queue_receiver(
        "edlq", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
    ) as dlq:
        (dead,) = receive_n(dlq, 1)
        assert body_text(dead) == "poison" and dead.delivery_count == 2
        assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
        dlq.complete_message(dead)
    assert drain(sb_client, "edlq") == 0


def test_a_200_kb_message(sb_client: Any) -> None:
    body = bytes(range(256)) * 800
    with sb_client.get_queue_sender("eq") as sender:
        sender.send_messages(ServiceBusMessage(body))
    with sb_client.get_queue_receiver("eq", max_wait_time=5) as receiver:
        (msg,) = receive_n(receiver, 1)
        assert b"".join(msg.body) == body
        receiver.complete_message(msg)
