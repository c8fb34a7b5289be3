"""Broker-assigned MessageId (issue 14, item 1), with the real azure-servicebus SDK.

Azure gives a message whose sender set no MessageId one at enqueue: a GUID as 32 hex digits.
sbemu stamps it into the stored message, so peek, receive and the dead-letter queue all show
the same id. The id is not a partition key and never makes a message a duplicate: with
duplicate detection on, two id-less messages are two messages, and id-less sends to a
partitioned duplicate-detection queue are key-less (round-robin) [P6, P8]. (The Python SDK fills
in a uuid4 MessageId itself, so these tests send with python-qpid-proton, as the JS SDK would.)
"""

from __future__ import annotations

import re

import pytest
from azure.servicebus import ServiceBusSubQueue
from integration_support import body_text, partition_of, proton_connect, queue_def, receive_n

SBEMU_QUEUES = [
    queue_def("mid-plain"),
    queue_def("mid-part", partitioned=True),
    queue_def("mid-dup", duplicate_detection=True),
    queue_def("mid-pdup", partitioned=True, duplicate_detection=True),
]

AZURE_ID = re.compile(r"^[0-9a-f]{32}$")


def send_raw(server, queue: str, bodies: list[str], ids: list[str | None] | None = None) -> None:
    """Send with python-qpid-proton: unlike the Python SDK (which fills in a uuid4 MessageId
    itself), it sends no message-id unless asked, as the JS SDK does."""
    from proton import Message

    conn = proton_connect(server)
    try:
        sender = conn.create_sender(queue)
        for body, mid in zip(bodies, ids or [None] * len(bodies), strict=True):
            sender.send(Message(body=body, id=mid, durable=True))
    finally:
        conn.close()


@pytest.mark.parametrize("queue", ["mid-plain", "mid-part"])
def test_assigned_id_same_on_peek_receive_and_dlq(server, sb_client, queue):
    send_raw(server, queue, ["no id", "mine"], [None, "m-1"])
    with sb_client.get_queue_receiver(queue, max_wait_time=5) as receiver:
        peeked = {body_text(m): m.message_id for m in receiver.peek_messages(max_message_count=10)}
        assert peeked["mine"] == "m-1", "a sender's MessageId is kept as is"
        assigned = peeked["no id"]
        assert AZURE_ID.match(assigned), f"not Azure's form (32 hex digits): {assigned!r}"
        got = {body_text(m): m for m in receive_n(receiver, 2)}
        assert got["no id"].message_id == assigned and got["mine"].message_id == "m-1"
        receiver.dead_letter_message(got["no id"], reason="r")
        receiver.complete_message(got["mine"])
    with sb_client.get_queue_receiver(
        queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
    ) as dlq:
        dead = receive_n(dlq, 1)
        assert [m.message_id for m in dead] == [assigned]
        dlq.complete_message(dead[0])


def test_assigned_ids_are_distinct_and_not_duplicates(server, sb_client):
    send_raw(server, "mid-dup", ["a", "b", "c", "d"])
    with sb_client.get_queue_receiver("mid-dup", max_wait_time=5) as receiver:
        got = receive_n(receiver, 4)
        assert sorted(body_text(m) for m in got) == ["a", "b", "c", "d"]
        assert len({m.message_id for m in got}) == 4
        for m in got:
            receiver.complete_message(m)


def test_idless_sends_to_partitioned_dup_queue_spread_round_robin(server, sb_client):
    send_raw(server, "mid-pdup", [f"m{i}" for i in range(4)])
    with sb_client.get_queue_receiver("mid-pdup", max_wait_time=5) as receiver:
        got = receive_n(receiver, 4)
        assert sorted(body_text(m) for m in got) == [f"m{i}" for i in range(4)]
        assert all(AZURE_ID.match(m.message_id) for m in got)
        # key-less sends take partitions in turn [P8]; the assigned id is no key [P6]
        assert len({partition_of(m.sequence_number) for m in got}) == 4
        for m in got:
            receiver.complete_message(m)
