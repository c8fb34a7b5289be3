"""Delivery annotations and the footer as Azure hands them out [issue 23 item 1], with the
Python SDK: a peek-locked delivery carries x-opt-lock-token (the lock token, an AMQP uuid)
in its delivery-annotations, a receive-and-delete delivery an empty map; a sender's own
delivery-annotations and footer reach the receiver (the SDK suite's test_message_*,
test_message_inner_amqp_properties, test_queue_send_amqp_annotated_message)."""

from __future__ import annotations

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.amqp import AmqpAnnotatedMessage
from integration_support import ServerProcess, queue_def, receive_n

SBEMU_QUEUES = [queue_def("da-plain"), queue_def("da-client"), queue_def("da-resend")]
LOCK_TOKEN = b"x-opt-lock-token"


def test_lock_token_in_delivery_annotations(server: ServerProcess) -> None:
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        with client.get_queue_sender("da-plain") as sender:
            sender.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
        with client.get_queue_receiver("da-plain", max_wait_time=5) as receiver:
            (m,) = receive_n(receiver, 1, timeout=10)
            assert m.raw_amqp_message.delivery_annotations[LOCK_TOKEN] == m.lock_token
            assert m.raw_amqp_message.footer is None
            receiver.complete_message(m)
        with client.get_queue_receiver(
            "da-plain", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, max_wait_time=5
        ) as receiver:
            (m,) = receive_n(receiver, 1, timeout=10)
            assert m.raw_amqp_message.delivery_annotations == {}
            assert m.raw_amqp_message.footer is None
            assert m.lock_token is None
            # settled: an empty tag, sent as a zero-length binary (not null: go-amqp refuses a
            # first transfer without a tag) [issue 23]
            assert m._delivery_tag == b""


def test_sender_delivery_annotations_and_footer_reach_the_receiver(server: ServerProcess) -> None:
    one = ServiceBusMessage("body")
    one.raw_amqp_message.delivery_annotations = {b"delivery_annotations": 3}
    one.raw_amqp_message.footer = {b"footer": 6}
    two = AmqpAnnotatedMessage(
        data_body=[b"aa", b"bb"],
        delivery_annotations={"delann_key": "delann_value"},
        footer={"footer_key": "footer_value"},
    )
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        with client.get_queue_sender("da-client") as sender:
            sender.send_messages(one)
            batch = sender.create_message_batch()
            batch.add_message(two)
            sender.send_messages(batch)
        with client.get_queue_receiver("da-client", max_wait_time=5) as receiver:
            first, second = receive_n(receiver, 2, timeout=10)
            raw = first.raw_amqp_message
            assert raw.delivery_annotations[b"delivery_annotations"] == 3
            assert raw.delivery_annotations[LOCK_TOKEN] == first.lock_token
            assert raw.footer == {b"footer": 6}
            raw = second.raw_amqp_message
            assert raw.delivery_annotations[b"delann_key"] == b"delann_value"
            assert raw.delivery_annotations[LOCK_TOKEN] == second.lock_token
            assert raw.footer == {b"footer_key": b"footer_value"}
            assert list(raw.body) == [b"aa", b"bb"]
            for m in (first, second):
                receiver.complete_message(m)
        with client.get_queue_receiver("da-client") as peeker:
            assert peeker.peek_messages(5) == []


def test_received_message_sent_again_gets_a_fresh_lock_token(server: ServerProcess) -> None:
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        with client.get_queue_sender("da-resend") as sender:
            sender.send_messages(ServiceBusMessage("once"))
            with client.get_queue_receiver("da-resend", max_wait_time=5) as receiver:
                (first,) = receive_n(receiver, 1, timeout=10)
                sender.send_messages(first)
                receiver.complete_message(first)
                (again,) = receive_n(receiver, 1, timeout=10)
                assert again.lock_token != first.lock_token
                assert again.raw_amqp_message.delivery_annotations[LOCK_TOKEN] == again.lock_token
                receiver.complete_message(again)
