"""azure-servicebus's own auto_lock_renew sample (sync and async) against sbemu.

AutoLockRenewer renews ten message locks at once from its worker threads; pyamqp's threads race
on the session's delivery-ids, so the `$management` transfers arrive out of sequence. Azure
serves the sample; so must sbemu (issue 14, item 4): the locks outlive the 5 s lock duration
and every message is then completed.
"""

from __future__ import annotations

import asyncio
import time

from azure.servicebus import AutoLockRenewer, ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import AutoLockRenewer as AsyncAutoLockRenewer
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from integration_support import queue_def

SBEMU_QUEUES = [
    queue_def("renew-sync", lock_duration="PT5S"),
    queue_def("renew-async", lock_duration="PT5S"),
]
HOLD = 8.0  # seconds: longer than the lock duration


def test_ten_locks_renewed_concurrently_sync(server):
    with ServiceBusClient.from_connection_string(server.conn_str) as client:
        with client.get_queue_sender("renew-sync") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(10)])
        renewer = AutoLockRenewer()
        with client.get_queue_receiver("renew-sync", prefetch_count=10) as receiver:
            got = []
            deadline = time.monotonic() + 15
            while len(got) < 10 and time.monotonic() < deadline:
                got += receiver.receive_messages(max_message_count=10 - len(got), max_wait_time=2)
            assert len(got) == 10
            for m in got:
                renewer.register(receiver, m, max_lock_renewal_duration=60)
            time.sleep(HOLD)
            for m in got:
                receiver.complete_message(m)  # MessageLockLostError if a renewal failed
            assert receiver.receive_messages(max_wait_time=1) == []
        renewer.close()


def test_ten_locks_renewed_concurrently_async(server):
    async def run() -> None:
        async with AsyncServiceBusClient.from_connection_string(server.conn_str) as client:
            async with client.get_queue_sender("renew-async") as sender:
                await sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(10)])
            renewer = AsyncAutoLockRenewer()
            async with client.get_queue_receiver("renew-async", prefetch_count=10) as receiver:
                got = []
                deadline = time.monotonic() + 15
                while len(got) < 10 and time.monotonic() < deadline:
                    got += await receiver.receive_messages(
                        max_message_count=10 - len(got), max_wait_time=2
                    )
                assert len(got) == 10
                for m in got:
                    renewer.register(receiver, m, max_lock_renewal_duration=60)
                await asyncio.sleep(HOLD)
                for m in got:
                    await receiver.complete_message(m)
                assert await receiver.receive_messages(max_wait_time=1) == []
            await renewer.close()

    asyncio.run(run())
