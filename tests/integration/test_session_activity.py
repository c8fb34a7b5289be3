"""A session receiver that keeps receiving keeps its session [issue 23 item 6], on the test
clock: Azure ends a session lock only when the session stayed idle for LockDuration. Before,
the lock ended LockDuration after the accept, so the SDK suite's receive-and-delete session
iterator (max_wait_time = LockDuration = 5 s) met session-lock-lost when its wait for more
messages ran into the end of the first lock period."""

from __future__ import annotations

import time

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import SessionLockLostError
from integration_support import ServerProcess, queue_def

SBEMU_QUEUES = [
    queue_def("sa-rad", lock_duration="PT5S", RequiresSession=True),
    queue_def("sa-idle", lock_duration="PT5S", RequiresSession=True),
]


def _send(client: ServiceBusClient, queue: str, session: str, n: int) -> None:
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(
            [ServiceBusMessage(f"{session}-{i}", session_id=session) for i in range(n)]
        )


def test_receiving_keeps_the_session_past_the_first_lock_period(server: ServerProcess) -> None:
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        _send(client, "sa-rad", "busy", 4)
        with client.get_queue_receiver(
            "sa-rad",
            session_id="busy",
            receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
            max_wait_time=5,
        ) as receiver:
            got = []
            for _ in range(4):  # 4 receives 3 s apart on the server's clock: 12 s > PT5S
                got.extend(receiver.receive_messages(1, max_wait_time=5))
                server.advance_clock(3)
            assert [str(m) for m in got] == [f"busy-{i}" for i in range(4)]
            assert receiver.receive_messages(1, max_wait_time=1) == []  # still its session


def test_an_idle_session_still_loses_its_lock(server: ServerProcess) -> None:
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        _send(client, "sa-idle", "idle", 2)
        with client.get_queue_receiver(
            "sa-idle",
            session_id="idle",
            receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
            max_wait_time=5,
        ) as receiver:
            (first,) = receiver.receive_messages(1, max_wait_time=5)
            assert str(first) == "idle-0"
            server.advance_clock(5.5)  # no operation on the session for a lock duration
            deadline = time.monotonic() + 20
            with pytest.raises(SessionLockLostError):
                while time.monotonic() < deadline:  # the detach may land on any receive
                    receiver.receive_messages(1, max_wait_time=1)
