"""Partitioned queues with the real SDK [SB partitioning P6-P13] (brief item 7 and 6).

A partitioned queue has 16 partitions; the top 16 bits of a sequence number are the partition id
(P11). These tests read partition placement only from what the SDK hands back.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from integration_support import (
    PARTITIONS,
    body_text,
    partition_of,
    queue_def,
    receive_n,
    send_plain,
)

from sbemu.partitions.keys import partition_for_key

SBEMU_QUEUES = [
    queue_def("pq-rr", partitioned=True),
    queue_def("pq-key", partitioned=True),
    queue_def("pq-mid", partitioned=True),
    queue_def("pq-dup", partitioned=True, duplicate_detection=True),
    queue_def("pq-dup2", partitioned=True, duplicate_detection=True),
    queue_def("pq-peek", partitioned=True),
    queue_def("pq-batch", partitioned=True),
    queue_def("pq-settle", partitioned=True, max_delivery_count=2),
]


def _annotation(message, key: bytes):
    ann = message.raw_amqp_message.annotations or {}
    return ann.get(key, ann.get(key.decode()))


def _receive_all_and_complete(client, queue: str, n: int, *, timeout: float = 30.0) -> list:
    with client.get_queue_receiver(queue, max_wait_time=5, prefetch_count=20) as receiver:
        got = receive_n(receiver, n, timeout=timeout)
        for m in got:
            receiver.complete_message(m)
        extra = receiver.receive_messages(max_message_count=5, max_wait_time=1)
        assert extra == [], f"more messages than sent on {queue}: {[body_text(m) for m in extra]}"
    assert len(got) == n, f"received {len(got)} of {n} messages from {queue}"
    return got


def test_keyless_messages_round_robin_over_all_partitions(sb_client):
    """P8: no key -> round-robin; P11: partition id in the top 16 bits; P10: one receiver
    sees all partitions."""
    n = 2 * PARTITIONS
    send_plain(
        sb_client, "pq-rr", [ServiceBusMessage(f"rr-{i}", message_id=f"rr-{i}") for i in range(n)]
    )
    got = _receive_all_and_complete(sb_client, "pq-rr", n)
    assert sorted(body_text(m) for m in got) == sorted(f"rr-{i}" for i in range(n))
    seqs = [m.sequence_number for m in got]
    assert len(set(seqs)) == n, "sequence numbers must be unique within the entity"
    per_partition = Counter(partition_of(s) for s in seqs)
    assert set(per_partition) == set(range(PARTITIONS)), (
        f"32 key-less messages must hit all 16 partitions, hit {sorted(per_partition)}"
    )
    assert set(per_partition.values()) == {2}, f"round-robin spreads evenly: {dict(per_partition)}"
    # Sequence numbers increase inside a partition in send order.
    by_partition = defaultdict(list)
    for m in sorted(got, key=lambda m: int(m.message_id.split("-")[1])):
        by_partition[partition_of(m.sequence_number)].append(m.sequence_number & ((1 << 48) - 1))
    for pid, lows in by_partition.items():
        assert lows == sorted(lows) and lows[0] > 0, f"partition {pid}: {lows}"
    # P11: delivered messages carry the partition id (x-opt-partition-id, a short).
    for m in got:
        pid = _annotation(m, b"x-opt-partition-id")
        assert pid == partition_of(m.sequence_number), (
            f"x-opt-partition-id {pid!r} != seq>>48 {partition_of(m.sequence_number)}"
        )


def test_same_partition_key_same_partition(sb_client):
    """P7: the same PartitionKey always lands on the same partition; the key is echoed back."""
    keys = ["order-1", "order-2", "customer-x", "a", "123456789", "ключ"]
    msgs = [
        ServiceBusMessage(f"{k}|{i}", partition_key=k, message_id=f"{k}-{i}")
        for i in range(4)
        for k in keys
    ]
    send_plain(sb_client, "pq-key", msgs)
    got = _receive_all_and_complete(sb_client, "pq-key", len(msgs))
    partitions: dict[str, set[int]] = defaultdict(set)
    for m in got:
        key = body_text(m).split("|")[0]
        assert m.partition_key == key, f"partition_key not echoed: {m.partition_key!r} != {key!r}"
        partitions[key].add(partition_of(m.sequence_number))
    for key, pids in partitions.items():
        assert len(pids) == 1, f"key {key!r} spread over partitions {sorted(pids)}"
    # The wire agrees with the documented stable hash (CRC-32 mod 16, golden vectors in
    # tests/unit/partitions/test_keys.py): "a" -> 3, "123456789" -> 6.
    for key, pids in partitions.items():
        assert pids == {partition_for_key(key, PARTITIONS)}, key
    assert partitions["a"] == {3} and partitions["123456789"] == {6}


def test_message_id_is_not_a_key_without_duplicate_detection(sb_client):
    """P6.3: without RequiresDuplicateDetection MessageId never pins a partition."""
    send_plain(
        sb_client,
        "pq-mid",
        [ServiceBusMessage(f"mid-{i}", message_id="always-the-same") for i in range(PARTITIONS)],
    )
    got = _receive_all_and_complete(sb_client, "pq-mid", PARTITIONS)
    pids = {partition_of(m.sequence_number) for m in got}
    assert len(pids) == PARTITIONS, (
        f"same message id must still round-robin, got partitions {sorted(pids)}"
    )


def test_message_id_is_the_key_with_duplicate_detection(sb_client):
    """P6.3: with RequiresDuplicateDetection the MessageId decides the partition, the same way a
    PartitionKey with that value would."""
    ids = [f"dd-{i}" for i in range(12)]
    by_id = [ServiceBusMessage(f"id|{x}", message_id=x) for x in ids]
    by_key = [ServiceBusMessage(f"key|{x}", partition_key=x, message_id=f"other-{x}") for x in ids]
    send_plain(sb_client, "pq-dup", by_id + by_key)
    got = _receive_all_and_complete(sb_client, "pq-dup", 2 * len(ids))
    where: dict[tuple[str, str], int] = {}
    for m in got:
        kind, key = body_text(m).split("|")
        where[(kind, key)] = partition_of(m.sequence_number)
    for x in ids:
        assert where[("id", x)] == where[("key", x)], (
            f"message_id {x!r} landed on {where[('id', x)]}, partition_key {x!r} on {where[('key', x)]}"
        )
        assert where[("id", x)] == partition_for_key(x, PARTITIONS)
    assert len({where[("id", x)] for x in ids}) > 1, (
        "different ids should not all share one partition"
    )


def test_duplicate_detection_on_partitioned_queue_drops_copies(sb_client):
    """The reason for P6.3: all copies of one message reach the partition that de-duplicates."""
    send_plain(
        sb_client,
        "pq-dup2",
        [ServiceBusMessage(f"copy-{i}", message_id="dup-me") for i in range(3)]
        + [ServiceBusMessage("unique", message_id="another")],
    )
    with sb_client.get_queue_receiver("pq-dup2", max_wait_time=3) as receiver:
        # Two distinct ids were sent; take them, then look once more (well inside the 5 s
        # lock, so a lock-expiry redelivery cannot pass for a duplicate).
        got = receive_n(receiver, 2, timeout=4, max_wait_time=1)
        got += receiver.receive_messages(max_message_count=5, max_wait_time=1)
        ids = sorted(m.message_id for m in got)
        assert ids == ["another", "dup-me"], f"expected one copy of dup-me, got {ids}"
        assert [body_text(m) for m in got if m.message_id == "dup-me"] == ["copy-0"]
        for m in got:
            receiver.complete_message(m)


def test_peek_partitioned_queue_returns_everything_eventually(sb_client):
    """P12/P13: a peek may return fewer than asked; repeating it covers all messages, without
    locking them."""
    n = 2 * PARTITIONS
    send_plain(sb_client, "pq-peek", [ServiceBusMessage(f"pk-{i}") for i in range(n)])
    seen: dict[int, str] = {}
    with sb_client.get_queue_receiver("pq-peek", max_wait_time=5) as receiver:
        empty_in_a_row = 0
        for _ in range(4 * n):
            batch = receiver.peek_messages(max_message_count=10)
            assert len(batch) <= 10, "peek returned more than asked"
            for p in batch:
                assert p.sequence_number not in seen or seen[p.sequence_number] == body_text(p)
                seen[p.sequence_number] = body_text(p)
            if len(seen) >= n:
                break
            empty_in_a_row = empty_in_a_row + 1 if not batch else 0
            if empty_in_a_row >= 2:
                break
        assert len(seen) == n, f"repeated peeks found {len(seen)} of {n} messages"
        assert {partition_of(s) for s in seen} == set(range(PARTITIONS))
        # Peeked, not locked: every message is received now with delivery_count 0.
        got = receive_n(receiver, n, timeout=20)
        assert sorted(m.sequence_number for m in got) == sorted(seen)
        assert {m.delivery_count for m in got} == {0}
        for m in got:
            receiver.complete_message(m)


def test_batches_on_partitioned_queue(sb_client):
    with sb_client.get_queue_sender("pq-batch") as sender:
        batch = sender.create_message_batch()
        for i in range(20):
            batch.add_message(ServiceBusMessage(f"nb-{i}"))
        sender.send_messages(batch)
        keyed = sender.create_message_batch()
        for i in range(10):
            keyed.add_message(ServiceBusMessage(f"kb-{i}", partition_key="batch-key"))
        sender.send_messages(keyed)
    got = _receive_all_and_complete(sb_client, "pq-batch", 30)
    assert sorted(body_text(m) for m in got) == sorted(
        [f"nb-{i}" for i in range(20)] + [f"kb-{i}" for i in range(10)]
    )
    assert len({m.sequence_number for m in got}) == 30
    keyed_pids = {partition_of(m.sequence_number) for m in got if body_text(m).startswith("kb-")}
    assert keyed_pids == {partition_for_key("batch-key", PARTITIONS)}
    # Inside one partition a batch keeps its order.
    kb = sorted((m for m in got if body_text(m).startswith("kb-")), key=lambda m: m.sequence_number)
    assert [body_text(m) for m in kb] == [f"kb-{i}" for i in range(10)]


def test_settlement_on_partitioned_queue(sb_client):
    """P10: complete, abandon, defer and dead-letter behave as on a plain queue."""
    send_plain(
        sb_client,
        "pq-settle",
        [ServiceBusMessage(f"st-{i}", message_id=f"st-{i}") for i in range(4)],
    )
    with sb_client.get_queue_receiver("pq-settle", max_wait_time=5) as receiver:
        got = {m.message_id: m for m in receive_n(receiver, 4)}
        assert set(got) == {f"st-{i}" for i in range(4)}
        receiver.complete_message(got["st-0"])
        receiver.abandon_message(got["st-1"])
        receiver.defer_message(got["st-2"])
        receiver.dead_letter_message(got["st-3"], reason="why", error_description="because")
        again = receive_n(receiver, 1, timeout=8)
        assert [m.message_id for m in again] == ["st-1"]
        assert again[0].delivery_count == 1
        assert again[0].sequence_number == got["st-1"].sequence_number
        receiver.abandon_message(again[0])  # MaxDeliveryCount 2 reached -> DLQ
        assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []
    with sb_client.get_queue_receiver(
        "pq-settle", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
    ) as dlq:
        dead = {m.message_id: m for m in receive_n(dlq, 2, timeout=10)}
        assert set(dead) == {"st-1", "st-3"}
        assert dead["st-1"].dead_letter_reason == "MaxDeliveryCountExceeded"
        assert dead["st-3"].dead_letter_reason == "why"
        assert dead["st-3"].dead_letter_error_description == "because"
        # Dead-lettered messages keep their partition.
        for mid, m in dead.items():
            assert partition_of(m.sequence_number) == partition_of(got[mid].sequence_number)
        for m in dead.values():
            dlq.complete_message(m)
