"""SDK waits as Azure's (issue 14, item 3), with the real azure-servicebus SDK.

* A next-available session receiver with no session ready waits the max_wait_time it asked for
  and then gets Azure's `com.microsoft:timeout` (OperationTimeoutError). The SDK's own retry
  policy retries that condition (retry_total, 3 by default), against Azure too; with
  retry_total=0 the whole call takes the time asked.
* azure-servicebus 7.15.0 bounds the link acquisition of a receiver not yet opened by the wait
  of the receive_messages() call that opens it (its changelog), NEXT_AVAILABLE_SESSION included:
  it gives up with its own "Timed out waiting for the AMQP link to open" and detaches the link
  the service is still holding. The service then drops that waiter: a session that gets a
  message afterwards goes to the next receiver at once. (The sdist's
  test_next_available_session_timeout_value still expects the service's 65 s there, against
  Azure too: not applicable, tests/sdk_suite/not_applicable.txt.)
* Receiving a deferred message by a sequence number that does not exist is refused with
  `com.microsoft:message-not-found` (MessageNotFoundError), the condition Azure sends.
"""

from __future__ import annotations

import time

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessageNotFoundError, OperationTimeoutError
from integration_support import queue_def

SBEMU_QUEUES = [
    queue_def("w-sess", RequiresSession=True),
    queue_def("w-sess-gaveup", RequiresSession=True),
    queue_def("w-plain"),
    queue_def("w-part", partitioned=True),
]


def test_next_available_session_waits_as_asked(server):
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        started = time.monotonic()
        with pytest.raises(OperationTimeoutError):
            with client.get_queue_receiver(
                "w-sess", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=3
            ) as receiver:
                receiver.receive_messages(max_wait_time=1)
        took = time.monotonic() - started
        assert 2.5 <= took < 8, f"took {took:.1f} s for max_wait_time=3"


def test_a_waiter_the_client_gave_up_on_takes_no_session(server):
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        receiver = client.get_queue_receiver(
            "w-sess-gaveup", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=60
        )
        started = time.monotonic()
        with pytest.raises(OperationTimeoutError) as info:
            receiver.receive_messages(max_wait_time=1)  # opens the receiver: bounded by 1 s
        assert time.monotonic() - started < 15
        assert "link to open" in str(info.value)  # the client's deadline, not the service's
        receiver.close()
        with client.get_queue_sender("w-sess-gaveup") as sender:
            sender.send_messages(ServiceBusMessage("late", session_id="s1"))
        started = time.monotonic()
        with client.get_queue_receiver(
            "w-sess-gaveup", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=30
        ) as receiver:
            assert receiver.session.session_id == "s1"
            got = receiver.receive_messages(max_wait_time=5)
            assert [str(m) for m in got] == ["late"]
            receiver.complete_message(got[0])
        assert time.monotonic() - started < 15  # not held by the abandoned waiter's lock


@pytest.mark.parametrize("queue", ["w-plain", "w-part"])
def test_receive_deferred_unknown_sequence_number(server, queue):
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        with client.get_queue_receiver(queue) as receiver:
            started = time.monotonic()
            with pytest.raises(MessageNotFoundError) as info:
                receiver.receive_deferred_messages([424242])
            assert "message-not-found" in str(info.value)
            assert time.monotonic() - started < 3
            # the connection (shared by the next handler) survived the management link's end
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("after"))
        with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
            got = receiver.receive_messages(max_wait_time=5)
            assert [str(m) for m in got] == ["after"]
            receiver.complete_message(got[0])
