"""The same basic flows with the asyncio SDK, ``azure.servicebus.aio`` (brief item 12)."""

from __future__ import annotations

import asyncio
import datetime as dt

from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import ServiceBusAuthenticationError
from integration_support import body_text, partition_of, queue_def

SBEMU_QUEUES = [
    queue_def("a-basic"),
    queue_def("a-abandon"),
    queue_def("a-dlq"),
    queue_def("a-batch"),
    queue_def("a-rad"),
    queue_def("a-part", partitioned=True),
    queue_def("a-conc"),
]


def _client(server) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(
        server.conn_str, retry_total=1, retry_backoff_factor=0.2
    )


async def _receive_n(
    receiver, n: int, *, timeout: float = 15.0, max_wait_time: float = 1.0
) -> list:
    got: list = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(got) < n and loop.time() < deadline:
        got.extend(
            await receiver.receive_messages(
                max_message_count=min(100, n - len(got)), max_wait_time=max_wait_time
            )
        )
    return got


async def test_async_send_receive_complete(server):
    async with _client(server) as client:
        async with client.get_queue_sender("a-basic") as sender:
            await sender.send_messages(
                ServiceBusMessage("async-1", message_id="a1", application_properties={"n": 1})
            )
        async with client.get_queue_receiver("a-basic", max_wait_time=5) as receiver:
            (m,) = await _receive_n(receiver, 1)
            assert body_text(m) == "async-1"
            assert m.message_id == "a1"
            assert m.delivery_count == 0
            assert m.sequence_number > 0
            assert m.locked_until_utc > dt.datetime.now(dt.timezone.utc)
            assert dict(m.application_properties) in ({b"n": 1}, {"n": 1})
            await receiver.complete_message(m)
            assert await receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


async def test_async_abandon_redelivers(server):
    async with _client(server) as client:
        async with client.get_queue_sender("a-abandon") as sender:
            await sender.send_messages(ServiceBusMessage("again"))
        async with client.get_queue_receiver("a-abandon", max_wait_time=5) as receiver:
            (m1,) = await _receive_n(receiver, 1)
            await receiver.abandon_message(m1)
            (m2,) = await _receive_n(receiver, 1)
            assert m2.sequence_number == m1.sequence_number
            assert m2.delivery_count == 1
            await receiver.complete_message(m2)


async def test_async_dead_letter_and_max_delivery(server):
    async with _client(server) as client:
        async with client.get_queue_sender("a-dlq") as sender:
            await sender.send_messages(
                [
                    ServiceBusMessage("explicit", message_id="x"),
                    ServiceBusMessage("poison", message_id="p"),
                ]
            )
        async with client.get_queue_receiver("a-dlq", max_wait_time=5) as receiver:
            got = {m.message_id: m for m in await _receive_n(receiver, 2)}
            await receiver.dead_letter_message(
                got["x"], reason="async-reason", error_description="async-desc"
            )
            await receiver.abandon_message(got["p"])
            for attempt in (1, 2):
                (p,) = await _receive_n(receiver, 1, timeout=8)
                assert p.message_id == "p" and p.delivery_count == attempt
                await receiver.abandon_message(p)
            assert await receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
        async with client.get_queue_receiver(
            "a-dlq", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
        ) as dlq:
            dead = {m.message_id: m for m in await _receive_n(dlq, 2, timeout=8)}
            assert set(dead) == {"x", "p"}
            assert dead["x"].dead_letter_reason == "async-reason"
            assert dead["x"].dead_letter_error_description == "async-desc"
            assert dead["p"].dead_letter_reason == "MaxDeliveryCountExceeded"
            for m in dead.values():
                await dlq.complete_message(m)


async def test_async_batch_and_peek(server):
    async with _client(server) as client:
        async with client.get_queue_sender("a-batch") as sender:
            batch = await sender.create_message_batch()
            for i in range(8):
                batch.add_message(ServiceBusMessage(f"ab-{i}"))
            await sender.send_messages(batch)
        async with client.get_queue_receiver("a-batch", max_wait_time=5) as receiver:
            peeked = await receiver.peek_messages(max_message_count=8)
            assert [body_text(p) for p in peeked] == [f"ab-{i}" for i in range(8)]
            got = await _receive_n(receiver, 8)
            assert [m.sequence_number for m in got] == [p.sequence_number for p in peeked]
            for m in got:
                await receiver.complete_message(m)


async def test_async_receive_and_delete(server):
    async with _client(server) as client:
        async with client.get_queue_sender("a-rad") as sender:
            await sender.send_messages([ServiceBusMessage(f"rd-{i}") for i in range(3)])
        async with client.get_queue_receiver(
            "a-rad", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, max_wait_time=5
        ) as receiver:
            got = await _receive_n(receiver, 3)
            assert [body_text(m) for m in got] == ["rd-0", "rd-1", "rd-2"]
        async with client.get_queue_receiver("a-rad", max_wait_time=1) as receiver:
            assert await receiver.receive_messages(max_message_count=3, max_wait_time=1) == []


async def test_async_partitioned_queue(server):
    async with _client(server) as client:
        async with client.get_queue_sender("a-part") as sender:
            for i in range(16):
                await sender.send_messages(ServiceBusMessage(f"ap-{i}"))
        async with client.get_queue_receiver("a-part", max_wait_time=5) as receiver:
            got = await _receive_n(receiver, 16)
            assert {partition_of(m.sequence_number) for m in got} == set(range(16))
            for m in got:
                await receiver.complete_message(m)


async def test_async_concurrent_senders_and_receiver(server):
    """Several connections at once on one event loop: nothing lost, nothing duplicated."""
    per_sender, senders = 20, 4

    async def send(k: int) -> None:
        async with client.get_queue_sender("a-conc") as sender:
            for i in range(per_sender):
                await sender.send_messages(ServiceBusMessage(f"c-{k}-{i}", message_id=f"c-{k}-{i}"))

    async with _client(server) as client:
        async with client.get_queue_receiver(
            "a-conc", max_wait_time=5, prefetch_count=20
        ) as receiver:
            received: list = []
            sent = asyncio.Event()

            async def receive() -> None:
                empty_after_sent = 0
                while len(received) < per_sender * senders and empty_after_sent < 3:
                    batch = await receiver.receive_messages(max_message_count=20, max_wait_time=2)
                    for m in batch:
                        await receiver.complete_message(m)
                    received.extend(batch)
                    empty_after_sent = empty_after_sent + 1 if (sent.is_set() and not batch) else 0

            async def send_all() -> None:
                await asyncio.gather(*(send(k) for k in range(senders)))
                sent.set()

            await asyncio.wait_for(asyncio.gather(receive(), send_all()), timeout=60)
            ids = [m.message_id for m in received]
            assert len(ids) == len(set(ids)), "duplicates received"
            assert len(ids) == per_sender * senders, (
                f"received {len(ids)} of {per_sender * senders}"
            )


async def test_async_unknown_entity(server):
    async with _client(server) as client:
        try:
            async with client.get_queue_sender("nope-async") as sender:
                await sender.send_messages(ServiceBusMessage("x"))
        except ServiceBusAuthenticationError:  # $cbs: 404, as Azure refuses it (issue 23 item 8)
            pass
        else:
            raise AssertionError("sending to an unknown queue succeeded")
