"""A message's own TTL on a queue whose default TTL is "never" (Azure's default, and what the
admin API creates) [issue 23 item 2]: the SDK suite's test_queue_message_time_to_live, on the
test clock. Azure never hands out an expired message; the queue dead-letters it on expiry."""

from __future__ import annotations

import datetime as dt
import time

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from integration_support import ServerProcess, queue_def, receive_n

NEVER = "P10675199DT2H48M5.4775807S"  # .NET TimeSpan.MaxValue
SBEMU_QUEUES = [
    queue_def("ttl-never", ttl=NEVER, dead_letter_on_expiration=True),
    queue_def("ttl-never-drop", ttl=NEVER),
]


def test_own_ttl_expires_on_a_queue_without_default_ttl(server: ServerProcess) -> None:
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=1) as client:
        with client.get_queue_sender("ttl-never") as sender:
            sender.send_messages(
                ServiceBusMessage("ttl", message_id="ttl-15", time_to_live=dt.timedelta(seconds=15))
            )
        with client.get_queue_receiver("ttl-never") as peeker:
            (peeked,) = peeker.peek_messages(5)
        server.advance_clock(15)  # exactly its expires_at_utc: expired
        with client.get_queue_receiver("ttl-never", prefetch_count=5) as receiver:
            got = receiver.receive_messages(5, max_wait_time=3)
            assert got == [], [(m.message_id, m.expires_at_utc) for m in got]
        with client.get_queue_receiver(
            "ttl-never", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
        ) as dlq:
            (dead,) = receive_n(dlq, 1, timeout=10)
            assert dead.message_id == "ttl-15"
            assert dead.dead_letter_reason == "TTLExpiredException"
            assert dead.expires_at_utc == peeked.expires_at_utc
            dlq.complete_message(dead)


def test_expired_message_goes_without_a_receiver(server: ServerProcess) -> None:
    """The expiry timer removes it (no dead-lettering asked): nothing left to peek."""
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=1) as client:
        with client.get_queue_sender("ttl-never-drop") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(
                        "a", message_id="short", time_to_live=dt.timedelta(seconds=5)
                    ),
                    ServiceBusMessage("b", message_id="forever"),
                ]
            )
        server.advance_clock(6)
        deadline = time.monotonic() + 10
        with client.get_queue_receiver("ttl-never-drop") as receiver:
            while True:
                ids = [m.message_id for m in receiver.peek_messages(5, sequence_number=1)]
                if ids == ["forever"] or time.monotonic() > deadline:
                    break
            assert ids == ["forever"]
