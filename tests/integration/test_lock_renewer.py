"""azure-servicebus's own auto_lock_renew sample (sync and async) against sbemu.

AutoLockRenewer renews ten message locks at once from its worker threads; pyamqp's threads race
on the session's delivery-ids, so the `$management` transfers arrive out of sequence. Azure
serves the sample; so must sbemu: the locks outlive the 5 s lock duration and every message is
then completed.

They also race on the answers: pyamqp registers a `$management` operation only after it sent
the request, so a renewing thread that loses the CPU in between finds its answer already read,
and dropped, by another thread (replycopies.py). The last test makes that interleaving happen
every time, with the SDK's own ManagementLink.

And the first renewals wait for credit: pyamqp writes its reply link's flow under the socket
lock the reading threads keep re-taking; sbemu's empty frames end those reads (replycopies.py),
without which the flow once came 3.2 s late and these 5 s locks expired on a loaded machine.
"""

from __future__ import annotations

import asyncio
import time

from azure.servicebus import AutoLockRenewer, ServiceBusClient, ServiceBusMessage
from azure.servicebus._pyamqp.management_link import ManagementLink
from azure.servicebus.aio import AutoLockRenewer as AsyncAutoLockRenewer
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from integration_support import queue_def

from sbemu.protocol.replycopies import COPY_DELAYS

SBEMU_QUEUES = [
    queue_def("renew-sync", lock_duration="PT5S"),
    queue_def("renew-async", lock_duration="PT5S"),
    queue_def("renew-dropped", lock_duration="PT30S"),
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


def test_renewal_answer_dropped_before_registration_comes_again(server, monkeypatch):
    """A renewal right after another (a burst): the send, then another thread's read of the
    answer, then the registration: the answer matches no operation and pyamqp drops it; the
    renewal still completes, with the copy."""
    dropped: list[object] = []  # correlation-ids of answers that matched no waiting operation
    sent: list[object] = []  # message-ids of the requests sent the racy way
    real_received = ManagementLink._on_message_received
    real_execute = ManagementLink.execute_operation

    def received(self, frame, message):  # type: ignore[no-untyped-def]
        with self.lock:
            waiting = [op.message.properties.message_id for op in self._pending_operations]
        if message.properties[5] not in waiting:
            dropped.append(message.properties[5])
        return real_received(self, frame, message)

    def execute_operation(self, message, on_complete, **kwargs):  # type: ignore[no-untyped-def]
        link = self._request_link
        send = link.send_transfer

        def send_then_lose_the_answer(request, **kw):  # type: ignore[no-untyped-def]
            delivery = send(request, **kw)
            sent.append(request.properties.message_id)
            before, deadline = len(dropped), time.monotonic() + 10
            while len(dropped) == before and time.monotonic() < deadline:
                self._session._connection.listen(wait=0.1)  # the other thread's read
            return delivery

        link.send_transfer = send_then_lose_the_answer
        try:
            return real_execute(self, message, on_complete, **kwargs)
        finally:
            del link.send_transfer

    with ServiceBusClient.from_connection_string(server.conn_str) as client:
        with client.get_queue_sender("renew-dropped") as sender:
            sender.send_messages(ServiceBusMessage("m"))
        with client.get_queue_receiver("renew-dropped") as receiver:
            (msg,) = receiver.receive_messages(max_wait_time=5)
            monkeypatch.setattr(ManagementLink, "_on_message_received", received)
            receiver.renew_message_lock(msg)  # the $management link opens, as usual
            first_until = msg.locked_until_utc
            # a second renewal at once, the racy way: with the first, a burst (replycopies.py)
            monkeypatch.setattr(ManagementLink, "execute_operation", execute_operation)
            time.sleep(0.01)
            receiver.renew_message_lock(msg, timeout=10)  # OperationTimeoutError without the copy
            assert dropped[0] == sent[0]  # its answer was read before the registration
            assert msg.locked_until_utc > first_until
            monkeypatch.undo()
            # the later copies of both answers come and match nothing: pyamqp ignores them
            monkeypatch.setattr(ManagementLink, "_on_message_received", received)
            connection = receiver._handler._connection
            deadline = time.monotonic() + max(COPY_DELAYS) + 5
            while len(dropped) < 2 * len(COPY_DELAYS) and time.monotonic() < deadline:
                connection.listen(wait=0.1)
            assert len(dropped) == 2 * len(COPY_DELAYS), dropped
            monkeypatch.undo()
            receiver.complete_message(msg)
