"""A received message sent again [issue 23 item 4]: pyamqp sends its x-opt-partition-key
back as AMQP binary (it decoded the service's string into bytes). The service takes that as
the key's text: equal to the SessionId, on the same partition, read back as a string."""

from __future__ import annotations

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from integration_support import ServerProcess, body_text, partition_of, queue_def, receive_n

SBEMU_QUEUES = [
    queue_def("rs-sess", RequiresSession=True),
    queue_def("rs-part", partitioned=True),
]


def test_received_session_message_sent_again(server: ServerProcess) -> None:
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        with client.get_queue_sender("rs-sess") as sender:
            sender.send_messages(ServiceBusMessage("once", session_id="s1", partition_key="s1"))
            with client.get_queue_receiver("rs-sess", session_id="s1", max_wait_time=2) as rx:
                (first,) = receive_n(rx, 1, timeout=10)
                assert first.partition_key == "s1"
                sender.send_messages(first)  # refused before: amqp:not-allowed ('7331' != 's1')
                rx.complete_message(first)
                (again,) = receive_n(rx, 1, timeout=10)
                assert (again.session_id, again.partition_key) == ("s1", "s1")
                assert body_text(again) == "once"
                assert again.sequence_number > first.sequence_number
                rx.complete_message(again)


def test_received_message_sent_again_keeps_its_partition(server: ServerProcess) -> None:
    # key-12 lands on partition 0, its hex (the old reading of the binary) elsewhere. (Only
    # partition 0: pyamqp sends the received x-opt-sequence-number back as an AMQP int, which
    # fails in the SDK itself once a partition id sits in its top bits, against Azure too.)
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        with client.get_queue_sender("rs-part") as sender:
            sender.send_messages(ServiceBusMessage("pk", partition_key="key-12"))
            with client.get_queue_receiver("rs-part", max_wait_time=2) as rx:
                (first,) = receive_n(rx, 1, timeout=10)
                sender.send_messages(first)
                rx.complete_message(first)
                (again,) = receive_n(rx, 1, timeout=10)
                assert again.partition_key == "key-12"
                assert partition_of(again.sequence_number) == partition_of(first.sequence_number)
                rx.complete_message(again)
