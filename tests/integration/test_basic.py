"""Send and receive with the sync azure-servicebus SDK on a plain (non-partitioned) queue.

Brief items 1 and 6: single / batch / list sends, peek-lock + complete, receive-and-delete,
property round-trip, sequence numbers, enqueued time, delivery count, lock expiry stamp, peek.
Each test owns its queue, so the module shares one server and tests do not interfere.
"""

from __future__ import annotations

import datetime as dt
import uuid

from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusReceiveMode,
)
from integration_support import body_text, queue_def, receive_n, send_plain

SBEMU_QUEUES = [
    queue_def(name)
    for name in (
        "b-one",
        "b-props",
        "b-batch",
        "b-list",
        "b-seq",
        "b-rad",
        "b-peek",
        "b-bytes",
        "b-none",
        "b-wait",
    )
] + [queue_def("b-many", lock_duration="PT1M")]  # 201 completes one by one: not a lock test

UTC = dt.timezone.utc


def _now() -> dt.datetime:
    return dt.datetime.now(UTC)


def _props(message) -> dict:
    """application_properties with str keys (pyamqp hands keys back as bytes)."""
    out = {}
    for k, v in (message.application_properties or {}).items():
        out[k.decode() if isinstance(k, bytes) else k] = v
    return out


def test_send_one_receive_peek_lock_complete(sb_client):
    before = _now()
    send_plain(sb_client, "b-one", [ServiceBusMessage("hello")])
    with sb_client.get_queue_receiver("b-one", max_wait_time=5) as receiver:
        got = receive_n(receiver, 1, timeout=10)
        assert len(got) == 1, "the message sent was not received"
        m = got[0]
        assert body_text(m) == "hello"
        assert m.delivery_count == 0, "first delivery must carry delivery_count 0"
        assert isinstance(m.sequence_number, int) and m.sequence_number > 0
        assert m.enqueued_time_utc is not None
        # Loopback, same clock: allow some slack either side.
        assert (
            before - dt.timedelta(seconds=5)
            <= m.enqueued_time_utc
            <= _now() + dt.timedelta(seconds=5)
        )
        assert m.lock_token is not None
        assert m.locked_until_utc is not None and m.locked_until_utc > _now(), (
            f"peek-lock lock must be in the future, got {m.locked_until_utc}"
        )
        # LockDuration PT5S: the lock should end about 5 s after delivery, not minutes later.
        assert m.locked_until_utc <= _now() + dt.timedelta(seconds=10)
        receiver.complete_message(m)
        # Completed: gone.
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_message_properties_round_trip(sb_client):
    # The SDK encodes Python ints as AMQP int (32-bit) and decodes bytes values to str on send,
    # so neither big ints nor binary values can be round-tripped through it.
    app = {
        "s": "text",
        "i": 42,
        "neg": -7,
        "f": 1.5,
        "yes": True,
        "no": False,
    }
    mid = f"mid-{uuid.uuid4()}"
    sent = ServiceBusMessage(
        "body ü",
        application_properties=app,
        message_id=mid,
        correlation_id="corr-1",
        subject="the-subject",
        content_type="application/json",
        to="somewhere",
        reply_to="reply-queue",
        time_to_live=dt.timedelta(minutes=5),
    )
    send_plain(sb_client, "b-props", [sent])
    with sb_client.get_queue_receiver("b-props", max_wait_time=5) as receiver:
        (m,) = receive_n(receiver, 1)
        assert body_text(m) == "body ü"
        assert m.message_id == mid
        assert m.correlation_id == "corr-1"
        assert m.subject == "the-subject"
        assert m.content_type == "application/json"
        assert m.to == "somewhere"
        assert m.reply_to == "reply-queue"
        assert m.time_to_live == dt.timedelta(minutes=5)
        assert m.expires_at_utc is not None and m.enqueued_time_utc is not None
        assert abs(
            (m.expires_at_utc - m.enqueued_time_utc) - dt.timedelta(minutes=5)
        ) < dt.timedelta(seconds=2)
        props = _props(m)
        # pyamqp decodes AMQP strings to bytes, so text values come back as UTF-8 bytes.
        expected = {k: (v.encode() if isinstance(v, str) else v) for k, v in app.items()}
        assert props == expected
        # Types preserved (bool stays bool, float stays float).
        assert props["yes"] is True and props["no"] is False
        assert isinstance(props["f"], float)
        receiver.complete_message(m)


def test_bytes_body_round_trip(sb_client):
    payload = bytes(range(256)) * 4
    send_plain(sb_client, "b-bytes", [ServiceBusMessage(payload)])
    with sb_client.get_queue_receiver("b-bytes", max_wait_time=5) as receiver:
        (m,) = receive_n(receiver, 1)
        assert b"".join(m.body) == payload
        receiver.complete_message(m)


def test_send_batch(sb_client):
    with sb_client.get_queue_sender("b-batch") as sender:
        batch = sender.create_message_batch()
        for i in range(10):
            batch.add_message(ServiceBusMessage(f"batch-{i}", application_properties={"i": i}))
        sender.send_messages(batch)
    with sb_client.get_queue_receiver("b-batch", max_wait_time=5) as receiver:
        got = receive_n(receiver, 10)
        assert [body_text(m) for m in got] == [f"batch-{i}" for i in range(10)], (
            "a batch must become 10 separate messages, in order"
        )
        seqs = [m.sequence_number for m in got]
        assert seqs == sorted(seqs) and len(set(seqs)) == 10, (
            f"each batch member gets its own seq: {seqs}"
        )
        assert [_props(m)["i"] for m in got] == list(range(10))
        for m in got:
            receiver.complete_message(m)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_send_list(sb_client):
    with sb_client.get_queue_sender("b-list") as sender:
        sender.send_messages([ServiceBusMessage(f"list-{i}") for i in range(5)])
    with sb_client.get_queue_receiver("b-list", max_wait_time=5) as receiver:
        got = receive_n(receiver, 5)
        assert [body_text(m) for m in got] == [f"list-{i}" for i in range(5)]
        for m in got:
            receiver.complete_message(m)


def test_single_message_batch_and_large_batch(sb_client):
    with sb_client.get_queue_sender("b-many") as sender:
        sender.send_messages([ServiceBusMessage("solo")])  # a one-message batch envelope
        batch = sender.create_message_batch()
        for i in range(200):
            batch.add_message(ServiceBusMessage(f"m-{i:03d}" + "x" * 200))
        sender.send_messages(batch)
    with sb_client.get_queue_receiver("b-many", max_wait_time=5, prefetch_count=50) as receiver:
        got = receive_n(receiver, 201, timeout=30)
        assert len(got) == 201
        assert body_text(got[0]) == "solo"
        assert [body_text(m)[:5] for m in got[1:]] == [f"m-{i:03d}" for i in range(200)]
        for m in got:
            receiver.complete_message(m)


def test_sequence_numbers_increase_in_send_order(sb_client):
    send_plain(sb_client, "b-seq", [ServiceBusMessage(f"s-{i}") for i in range(5)])
    with sb_client.get_queue_receiver("b-seq", max_wait_time=5) as receiver:
        got = receive_n(receiver, 5)
        assert [body_text(m) for m in got] == [f"s-{i}" for i in range(5)], "plain queue is FIFO"
        seqs = [m.sequence_number for m in got]
        assert all(b > a for a, b in zip(seqs, seqs[1:], strict=False)), (
            f"not strictly increasing: {seqs}"
        )
        # A non-partitioned entity leaves the partition bits (top 16) zero [contract §9].
        assert all(s >> 48 == 0 for s in seqs), f"partition bits set on a plain queue: {seqs}"
        enq = [m.enqueued_time_utc for m in got]
        assert enq == sorted(enq)
        for m in got:
            receiver.complete_message(m)
    # Sequence numbers are never reused: a later message gets a higher one.
    send_plain(sb_client, "b-seq", [ServiceBusMessage("later")])
    with sb_client.get_queue_receiver("b-seq", max_wait_time=5) as receiver:
        (m,) = receive_n(receiver, 1)
        assert m.sequence_number > max(seqs)
        receiver.complete_message(m)


def test_receive_and_delete(sb_client):
    send_plain(sb_client, "b-rad", [ServiceBusMessage(f"rad-{i}") for i in range(3)])
    with sb_client.get_queue_receiver(
        "b-rad", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, max_wait_time=5
    ) as receiver:
        got = receive_n(receiver, 3)
        assert [body_text(m) for m in got] == ["rad-0", "rad-1", "rad-2"]
        assert all(m.delivery_count == 0 for m in got)
        assert all(m.sequence_number > 0 for m in got)
    # Consumed on delivery: nothing left for a peek-lock receiver either.
    with sb_client.get_queue_receiver("b-rad", max_wait_time=1) as receiver:
        assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []


def test_peek_plain_queue(sb_client):
    send_plain(sb_client, "b-peek", [ServiceBusMessage(f"p-{i}") for i in range(5)])
    with sb_client.get_queue_receiver("b-peek", max_wait_time=5) as receiver:
        first = receiver.peek_messages(max_message_count=3)
        assert [body_text(m) for m in first] == ["p-0", "p-1", "p-2"], (
            "peek returns the oldest first"
        )
        assert all(m.sequence_number > 0 for m in first)
        # The SDK continues after the last peeked sequence number.
        rest = receiver.peek_messages(max_message_count=10)
        assert [body_text(m) for m in rest] == ["p-3", "p-4"]
        # Explicit start: from the first sequence number again.
        again = receiver.peek_messages(
            max_message_count=1, sequence_number=first[0].sequence_number
        )
        assert [m.sequence_number for m in again] == [first[0].sequence_number]
        # Peek does not lock and does not count as a delivery.
        got = receive_n(receiver, 5)
        assert [m.sequence_number for m in got] == [m.sequence_number for m in first + rest]
        assert all(m.delivery_count == 0 for m in got)
        for m in got:
            receiver.complete_message(m)
        # Peek on an empty queue: empty list, not an error.
        assert receiver.peek_messages(max_message_count=5, sequence_number=1) == []


def test_empty_receive_returns_quickly(sb_client):
    import time

    with sb_client.get_queue_receiver("b-none", max_wait_time=1) as receiver:
        receiver.receive_messages(max_message_count=1, max_wait_time=1)  # open the link first
        t0 = time.monotonic()
        assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []
        assert time.monotonic() - t0 < 4


def test_waiting_receiver_gets_a_message_sent_later(sb_client):
    """A receive call that is already waiting (credit outstanding) gets a message that another
    connection sends while it waits, well before max_wait_time runs out."""
    import threading
    import time

    with (
        sb_client.get_queue_receiver("b-wait", max_wait_time=8) as receiver,
        sb_client.get_queue_sender("b-wait") as sender,
    ):
        receiver.peek_messages(max_message_count=1)  # links open before the clock starts
        sender.send_messages(ServiceBusMessage("warm-up"))
        (warm,) = receive_n(receiver, 1)
        receiver.complete_message(warm)

        def send_later() -> None:
            time.sleep(1.0)
            sender.send_messages(ServiceBusMessage("later"))

        thread = threading.Thread(target=send_later)
        t0 = time.monotonic()
        thread.start()
        got = receiver.receive_messages(max_message_count=1, max_wait_time=8)
        waited = time.monotonic() - t0
        thread.join()
        assert [body_text(m) for m in got] == ["later"], (
            f"waiting receiver got {len(got)} messages in {waited:.1f}s; the message sent after 1 s "
            "was not delivered while the receive call waited"
        )
        assert waited < 4.0
        receiver.complete_message(got[0])
