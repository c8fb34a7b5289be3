"""Settlement and locks with the sync SDK: abandon, max delivery count, dead-letter, defer,
lock expiry, lock renewal (brief items 2-5). Queues use LockDuration PT5S (Azure's minimum)
and MaxDeliveryCount 3.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessageLockLostError
from integration_support import body_text, queue_def, receive_n, send_plain

SBEMU_QUEUES = [
    queue_def(name, lock_duration="PT5S", max_delivery_count=3)
    for name in (
        "s-abandon",
        "s-maxdc",
        "s-dl",
        "s-defer",
        "s-defer-peek",
        "s-lockexp",
        "s-locklost",
        "s-renew",
        "s-release",
        "s-wake",
    )
]

UTC = dt.timezone.utc
LOCK_SECONDS = 5.0


def _now() -> dt.datetime:
    return dt.datetime.now(UTC)


def _server_time(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, UTC)


def _assert_empty(client, queue: str, *, sub_queue=None) -> None:
    """Nothing left at all (peek sees locked and deferred messages too): no receive timeout
    to wait out, and a completion acknowledged before this removed its message already."""
    with client.get_queue_receiver(queue, sub_queue=sub_queue) as r:
        left = r.peek_messages(max_message_count=10)
        assert left == [], f"{queue} {sub_queue or ''} not empty: {[body_text(m) for m in left]}"


def test_abandon_redelivers_with_incremented_delivery_count(sb_client):
    send_plain(sb_client, "s-abandon", [ServiceBusMessage("ab", message_id="ab-1")])
    with sb_client.get_queue_receiver("s-abandon", max_wait_time=5) as receiver:
        (m1,) = receive_n(receiver, 1)
        assert m1.delivery_count == 0
        receiver.abandon_message(m1)
        got = receive_n(receiver, 1, timeout=10)
        assert got, "an abandoned message must be receivable again at once"
        (m2,) = got
        assert m2.message_id == "ab-1"
        assert m2.sequence_number == m1.sequence_number
        assert m2.delivery_count == 1, "abandon must bump the delivery count"
        receiver.complete_message(m2)
    _assert_empty(sb_client, "s-abandon")


def test_max_delivery_count_moves_message_to_dlq(sb_client):
    send_plain(sb_client, "s-maxdc", [ServiceBusMessage("poison", message_id="poison-1")])
    with sb_client.get_queue_receiver("s-maxdc", max_wait_time=5) as receiver:
        for attempt in range(3):
            got = receive_n(receiver, 1, timeout=10)
            assert got, f"delivery {attempt + 1} of 3 did not arrive"
            (m,) = got
            assert m.delivery_count == attempt
            receiver.abandon_message(m)
        # Three deliveries + abandons with MaxDeliveryCount 3: no fourth delivery.
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
    with sb_client.get_queue_receiver(
        "s-maxdc", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
    ) as dlq:
        got = receive_n(dlq, 1, timeout=10)
        assert got, "the message is not in the dead-letter queue"
        (d,) = got
        assert d.message_id == "poison-1"
        assert body_text(d) == "poison"
        assert d.dead_letter_reason == "MaxDeliveryCountExceeded"
        dlq.complete_message(d)
    _assert_empty(sb_client, "s-maxdc", sub_queue=ServiceBusSubQueue.DEAD_LETTER)


def test_dead_letter_with_reason_and_description(sb_client):
    send_plain(
        sb_client,
        "s-dl",
        [ServiceBusMessage("bad", message_id="dl-1", application_properties={"k": "v"})],
    )
    with sb_client.get_queue_receiver("s-dl", max_wait_time=5) as receiver:
        (m,) = receive_n(receiver, 1)
        receiver.dead_letter_message(m, reason="bad-order", error_description="order 42 is broken")
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == [], (
            "a dead-lettered message must leave the main queue"
        )
    with sb_client.get_queue_receiver(
        "s-dl", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
    ) as dlq:
        peeked = dlq.peek_messages(max_message_count=5)
        assert [p.message_id for p in peeked] == ["dl-1"], "DLQ peek should show the message"
        (d,) = receive_n(dlq, 1, timeout=10)
        assert d.message_id == "dl-1"
        assert body_text(d) == "bad"
        assert d.dead_letter_reason == "bad-order"
        assert d.dead_letter_error_description == "order 42 is broken"
        props = {
            (k.decode() if isinstance(k, bytes) else k): v
            for k, v in d.application_properties.items()
        }
        assert props.get("k") in ("v", b"v"), "original application properties are kept"
        dlq.complete_message(d)
    _assert_empty(sb_client, "s-dl", sub_queue=ServiceBusSubQueue.DEAD_LETTER)


def test_deferred_message_is_not_received_again(sb_client):
    send_plain(sb_client, "s-defer", [ServiceBusMessage("later", message_id="def-1")])
    with sb_client.get_queue_receiver("s-defer", max_wait_time=5) as receiver:
        (m,) = receive_n(receiver, 1)
        receiver.defer_message(m)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=2) == [], (
            "a deferred message must not come back through a normal receive"
        )
    # The queue is not blocked by the deferred message.
    send_plain(sb_client, "s-defer", [ServiceBusMessage("next", message_id="def-2")])
    with sb_client.get_queue_receiver("s-defer", max_wait_time=5) as receiver:
        got = receive_n(receiver, 1)
        assert [g.message_id for g in got] == ["def-2"]
        receiver.complete_message(got[0])


def test_deferred_message_is_visible_to_peek_as_deferred(sb_client):
    send_plain(sb_client, "s-defer-peek", [ServiceBusMessage("later", message_id="dp-1")])
    with sb_client.get_queue_receiver("s-defer-peek", max_wait_time=5) as receiver:
        (m,) = receive_n(receiver, 1)
        receiver.defer_message(m)
        peeked = receiver.peek_messages(max_message_count=5, sequence_number=1)
        assert [p.message_id for p in peeked] == ["dp-1"], "peek returns deferred messages too"
        assert peeked[0].state == ServiceBusMessageState.DEFERRED


def test_lock_expiry_redelivers_with_incremented_count(sb_client, server):
    send_plain(sb_client, "s-lockexp", [ServiceBusMessage("slow", message_id="le-1")])
    with sb_client.get_queue_receiver("s-lockexp", max_wait_time=5) as receiver:
        (m1,) = receive_n(receiver, 1)
        t0 = server.now()  # locked_until is server time (other tests advance its clock)
        assert m1.locked_until_utc is not None
        lock_left = (m1.locked_until_utc - t0).total_seconds()
        assert 2.0 < lock_left <= LOCK_SECONDS + 1.0, (
            f"LockDuration PT5S, lock left {lock_left:.1f}s"
        )
        # Not redelivered while the lock holds.
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
        server.advance_clock(LOCK_SECONDS + 0.5)  # the server's clock: past the lock's end
        got = receive_n(receiver, 1, timeout=6)
        assert got, "message not redelivered after its lock expired"
        (m2,) = got
        assert m2.message_id == "le-1"
        assert m2.sequence_number == m1.sequence_number
        assert m2.delivery_count == 1, "lock expiry counts as a delivery attempt"
        assert m2.lock_token != m1.lock_token, "a new delivery needs a new lock token"
        # The SDK refuses an expired lock client-side; push the client's view of the lock into the
        # future so the completion really reaches the server, which must refuse the lost lock
        # (with the advanced server clock it is in the future already; this keeps it so).
        m1._expiry = _now() + dt.timedelta(hours=1)
        with pytest.raises(MessageLockLostError):
            receiver.complete_message(m1)
        # The failed completion did not touch the live delivery.
        receiver.complete_message(m2)


def test_lock_expiry_wakes_a_waiting_receiver(sb_client):
    """A receiver already waiting (credit outstanding) gets the message as soon as another
    receiver's lock on it expires; it must not need a fresh receive call."""
    send_plain(sb_client, "s-wake", [ServiceBusMessage("wake", message_id="wk-1")])
    with (
        sb_client.get_queue_receiver("s-wake", max_wait_time=5) as holder,
        sb_client.get_queue_receiver("s-wake", max_wait_time=10) as waiter,
    ):
        waiter.peek_messages(max_message_count=1)  # open the link before the clock starts
        (m1,) = receive_n(holder, 1)
        t0 = time.monotonic()
        got = waiter.receive_messages(max_message_count=1, max_wait_time=LOCK_SECONDS + 4)
        waited = time.monotonic() - t0
        assert [m.message_id for m in got] == ["wk-1"], (
            f"waiting receiver got nothing in {waited:.1f}s although the lock expired after ~5 s"
        )
        assert waited < LOCK_SECONDS + 2
        assert got[0].delivery_count == 1
        waiter.complete_message(got[0])


def test_renewing_a_lost_lock_raises(sb_client, server):
    send_plain(sb_client, "s-locklost", [ServiceBusMessage("slow", message_id="ll-1")])
    with sb_client.get_queue_receiver("s-locklost", max_wait_time=5) as receiver:
        (m1,) = receive_n(receiver, 1)
        server.advance_clock(LOCK_SECONDS + 0.5)  # the server's clock: past the lock's end
        # renew-lock goes to $management without a client-side expiry check: the server decides.
        with pytest.raises(MessageLockLostError):
            receiver.renew_message_lock(m1)
        got = receive_n(receiver, 1, timeout=6)
        assert got and got[0].delivery_count == 1
        receiver.complete_message(got[0])


def test_renew_lock_extends_locked_until(sb_client, server):
    send_plain(sb_client, "s-renew", [ServiceBusMessage("keep", message_id="rn-1")])
    with (
        sb_client.get_queue_receiver("s-renew", max_wait_time=5) as receiver,
        sb_client.get_queue_receiver("s-renew", max_wait_time=1) as other,
    ):
        other.peek_messages(max_message_count=1)  # open the second link now, not on the clock
        (m,) = receive_n(receiver, 1)
        first_until = m.locked_until_utc
        # The server's clock to 2 s before the lock's end (sleeping that long is the same test).
        before_renew = _server_time(server.advance_clock(LOCK_SECONDS - 2.0))
        new_until = receiver.renew_message_lock(m)
        assert new_until > first_until + dt.timedelta(seconds=1), (
            f"renewal must move the lock forward: {first_until} -> {new_until}"
        )
        assert m.locked_until_utc == new_until
        assert new_until <= before_renew + dt.timedelta(seconds=LOCK_SECONDS + 2)
        # Past the original expiry the renewed lock still holds: nobody else gets the message...
        after = _server_time(server.advance_clock(2.3))
        assert first_until < after < new_until
        assert other.receive_messages(max_message_count=1, max_wait_time=1) == [], (
            "message redelivered although its lock was renewed"
        )
        # ...and the holder can still complete it (the client checks new_until is ahead).
        receiver.complete_message(m)


def test_closing_receiver_releases_prefetched_without_counting(sb_client):
    """Python releases buffered deliveries on close; released must not bump the delivery count
    [contract §4.7]."""
    send_plain(sb_client, "s-release", [ServiceBusMessage(f"r-{i}") for i in range(5)])
    with sb_client.get_queue_receiver("s-release", max_wait_time=5, prefetch_count=10) as receiver:
        got = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert len(got) == 1
        receiver.complete_message(got[0])
    # The other four were prefetched and released on close: receivable now, delivery_count 0.
    with sb_client.get_queue_receiver("s-release", max_wait_time=5) as receiver:
        rest = receive_n(receiver, 4, timeout=8)
        assert len(rest) == 4, "prefetched messages were not released on receiver close"
        assert [m.delivery_count for m in rest] == [0, 0, 0, 0]
        for m in rest:
            receiver.complete_message(m)
