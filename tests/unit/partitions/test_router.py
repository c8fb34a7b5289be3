"""Router: which partition a message lands on [SB partitioning P6-P8], lookups, layout [P4].

Real LMDB in a temp dir, the group commit run inline (routing_harness), no server.
"""

from __future__ import annotations

import json

import pytest
from routing_harness import NOW, NS, RouterHarness, message, queue_spec, topic_spec

from sbemu.errors import (
    EntityDisabled,
    EntityNotFound,
    InvalidOperation,
    QuotaExceeded,
    ServerBusy,
)
from sbemu.partitions import COMPLETE
from sbemu.partitions.broker import DLQ_SUFFIX
from sbemu.partitions.entitystatus import EntitySettings, EntityStatus, ReceiverSettings
from sbemu.partitions.forwarding import TRANSFER_DLQ_SUFFIX
from sbemu.partitions.keys import partition_for_key
from sbemu.partitions.layout import StorageLayoutError
from sbemu.partitions.specs import MAIN, resolve_view_name
from sbemu.partitions.subscriptions import RuleSource, subscription_queue


@pytest.fixture
def h(tmp_path):
    return RouterHarness(tmp_path)


def key_on(partition: int, count: int, prefix: str = "k") -> str:
    """A key that lands on `partition` of `count` (found through the stable hash [P7])."""
    return next(
        f"{prefix}{i}"
        for i in range(10_000)
        if partition_for_key(f"{prefix}{i}", count) == partition
    )


# ------------------------------------------------------------------ P6: key precedence
def test_session_id_pins_every_message_of_a_session_to_one_partition(h):
    q = h.add(queue_spec(partitions=4))
    for i in range(12):
        h.send(q, message(f"m{i}", session_id=f"s{i % 3}"))
    where = h.partitions_of(q)
    for i in range(12):
        assert where[f"m{i}"] == partition_for_key(f"s{i % 3}", 4)
    assert q.partition_for_session("s1").partition_id == partition_for_key("s1", 4)


def test_partition_key_pins_and_must_equal_the_session_id(h):
    q = h.add(queue_spec(partitions=4))
    h.send(q, message("a", partition_key="pk"), message("b", partition_key="pk"))
    h.send(q, message("c", session_id="pk", partition_key="pk"))
    where = h.partitions_of(q)
    assert set(where.values()) == {partition_for_key("pk", 4)}
    with pytest.raises(InvalidOperation, match="must be the same"):
        h.send(q, message("d", session_id="s", partition_key="other"))
    assert "d" not in h.partitions_of(q)


def test_session_and_partition_key_rule_holds_on_a_single_partition_too(h):
    q = h.add(queue_spec(partitions=1))
    with pytest.raises(InvalidOperation):
        h.send(q, message("d", session_id="s", partition_key="other"))


def test_message_id_is_a_key_only_with_duplicate_detection(h):
    dup = h.add(queue_spec("dup", partitions=4, dup=True))
    plain = h.add(queue_spec("plain", partitions=4))
    for i in range(8):
        h.send(dup, message(f"id{i}"))
        h.send(plain, message(f"id{i}"))
    assert h.partitions_of(dup) == {f"id{i}": partition_for_key(f"id{i}", 4) for i in range(8)}
    # without duplicate detection the id is no key: key-less sends go round-robin [P8]
    assert sorted(h.partitions_of(plain).values()) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_broker_assigned_message_id_is_no_key(h):
    dup = h.add(queue_spec("dup", partitions=4, dup=True))
    for i in range(4):
        h.send(dup, message(f"auto{i}", assigned=True))
    assert sorted(h.partitions_of(dup).values()) == [0, 1, 2, 3]


def test_duplicate_detection_refuses_a_batch_with_distinct_keys(h):
    dup = h.add(queue_spec("dup", partitions=4, dup=True))
    with pytest.raises(InvalidOperation, match="distinct SessionId, PartitionKey, or MessageId"):
        h.send(dup, message("a"), message("b"))
    h.send(dup, message("a", partition_key="k"), message("b", partition_key="k"))
    assert len(h.peek(dup)) == 2


def test_duplicate_detection_drops_a_repeated_id_inside_the_window(h):
    dup = h.add(queue_spec("dup", partitions=2, dup=True, dup_window_ms=10_000))
    assert len(h.send(dup, message("x"), now_ms=NOW)) == 1
    assert h.send(dup, message("x"), now_ms=NOW + 9_999) == []  # accepted, not stored
    assert len(h.send(dup, message("x"), now_ms=NOW + 10_001)) == 1  # the window has passed
    assert [rec.message_id for rec, _ in h.peek(dup)] == ["x", "x"]


# ------------------------------------------------------------------ P8: round-robin, fail-over
def test_keyless_messages_of_one_send_share_a_partition_and_sends_rotate(h):
    q = h.add(queue_spec(partitions=3))
    for batch in range(6):
        h.send(q, *(message(f"b{batch}-{i}") for i in range(3)))
    where = h.partitions_of(q)
    for batch in range(6):
        assert {where[f"b{batch}-{i}"] for i in range(3)} == {batch % 3}


def test_sequence_numbers_carry_the_partition(h):
    q = h.add(queue_spec(partitions=4))
    for i in range(4):
        h.send(q, message(f"m{i}"))
    for rec, pid in h.peek(q):
        assert rec.sequence_number >> 48 == pid  # [P11] partition id in the top 16 bits


def test_keyless_sends_skip_an_offline_partition_and_keyed_sends_to_it_fail(h):
    q = h.add(queue_spec(partitions=3))
    h.router.set_partition_online(NS, "q", 1, False)
    for i in range(6):
        h.send(q, message(f"m{i}"))
    assert sorted(h.partitions_of(q).values()) == [0, 0, 0, 2, 2, 2]
    with pytest.raises(ServerBusy, match="Partition 1 .* unavailable"):
        h.send(q, message("pinned", partition_key=key_on(1, 3)))
    status = h.router.set_partition_online(NS, "q", 1, True)
    assert status["status"] == "Available"
    h.send(q, message("pinned", partition_key=key_on(1, 3)))
    assert h.partitions_of(q)["pinned"] == 1


def test_keyless_send_fails_over_when_its_partition_turns_out_full(h):
    q = h.add(queue_spec(partitions=2, max_size_mb=1))
    key0 = key_on(0, 2)
    filled = 0
    with pytest.raises(QuotaExceeded):  # fill partition 0 through its key
        for i in range(64):
            h.send(q, message(f"fill{i}", partition_key=key0, size=100_000))
            filled += 1
    assert filled > 0
    assert q.partitions[0].health.accepting is False
    assert h.router.partition_status(q)["status"] == "Limited"
    # round-robin skips the full partition; a pinned send to it is refused as retriable
    h.send(q, message("rr"))
    assert h.partitions_of(q)["rr"] == 1
    with pytest.raises(ServerBusy, match="full"):
        h.send(q, message("pinned", partition_key=key0))


def test_keyless_send_is_retried_on_the_next_partition_after_a_store_full_commit(h):
    q = h.add(queue_spec(partitions=2, max_size_mb=1))
    key0 = key_on(0, 2)
    # nearly fill partition 0; it still accepts (no commit failed yet)
    h.send(q, *(message(f"fill{i}", partition_key=key0, size=150_000) for i in range(4)))
    assert q.partitions[0].health.accepting
    # the next key-less send goes to partition 0 in turn, does not fit, and moves on [P8]
    h.send(q, message("big", size=600_000))
    assert h.partitions_of(q)["big"] == 1
    assert q.partitions[0].health.accepting is False


def test_every_partition_full_is_quota_exceeded(h):
    q = h.add(queue_spec(partitions=1, max_size_mb=1))
    with pytest.raises(QuotaExceeded):
        for i in range(64):
            h.send(q, message(f"fill{i}", size=100_000))
    with pytest.raises(QuotaExceeded, match="Every partition"):
        h.send(q, message("more"))


def test_session_entity_refuses_a_message_without_session_id(h):
    q = h.add(queue_spec(partitions=2, requires_session=True))
    with pytest.raises(InvalidOperation, match="SessionId was not set"):
        h.send(q, message("m"))
    h.send(q, message("m", session_id="s"))
    assert h.partitions_of(q) == {"m": partition_for_key("s", 2)}


# ------------------------------------------------------------------ lookup
def test_resolve_view_name_splits_sub_queues():
    names = ["q", "t", "a/b"]
    assert resolve_view_name(names, "q") == ("q", MAIN)
    assert resolve_view_name(names, "Q") == ("q", MAIN)  # entity names are case-insensitive
    assert resolve_view_name(names, "q/$deadletterqueue") == ("q", MAIN + DLQ_SUFFIX)
    assert resolve_view_name(names, "q/$Transfer/$DeadLetterQueue") == (
        "q",
        MAIN + TRANSFER_DLQ_SUFFIX,
    )
    assert resolve_view_name(names, "a/b") == ("a/b", MAIN)
    assert resolve_view_name(names, "t/Subscriptions/S1") == ("t", "subscriptions/s1")
    assert resolve_view_name(names, "t/subscriptions/s1/$deadletterqueue") == (
        "t",
        "subscriptions/s1" + DLQ_SUFFIX,
    )
    assert resolve_view_name(names, "a/b/subscriptions/s") == ("a/b", "subscriptions/s")


@pytest.mark.parametrize("path", ["nope", "q/extra", "nope/subscriptions/s", "/subscriptions/s"])
def test_resolve_view_name_unknown_paths_are_not_found(path):
    with pytest.raises(EntityNotFound, match="could not be found"):
        resolve_view_name(["q", "t"], path)


def test_lookup_finds_views_and_refuses_unknown_ones(h):
    h.add(queue_spec(partitions=2))
    h.add(topic_spec({"s1": [RuleSource("$Default", "true")]}))
    entity, view = h.router.lookup("NS", "Q/$DeadLetterQueue")
    assert (entity.name, view.queue, view.address) == ("q", MAIN + DLQ_SUFFIX, "q/$deadletterqueue")
    entity, view = h.router.lookup(NS, "t/subscriptions/S1")
    assert view.queue == "subscriptions/s1" and view.receivable
    _, topic_view = h.router.lookup(NS, "t")
    assert not topic_view.receivable  # a topic's own address only takes sends
    for namespace, path in [("other", "q"), (NS, "t/subscriptions/missing"), (NS, "missing")]:
        with pytest.raises(EntityNotFound):
            h.router.lookup(namespace, path)
    with pytest.raises(EntityNotFound):
        h.router.set_partition_online(NS, "q", 2, False)  # partitions are 0..1


# ------------------------------------------------------------------ layout and restart
def test_partition_count_cannot_change_on_existing_data(h, tmp_path):
    q = h.add(queue_spec(partitions=2))
    h.send(q, message("kept", partition_key="pk"))
    h.router.close()
    with pytest.raises(StorageLayoutError, match="Partitioning cannot be"):
        RouterHarness(tmp_path).add(queue_spec(partitions=4))
    again = RouterHarness(tmp_path)
    q2 = again.add(queue_spec(partitions=2))
    assert again.partitions_of(q2) == {"kept": partition_for_key("pk", 2)}


def test_an_entity_manifest_left_empty_by_a_crash_is_rebuilt_from_the_partitions(h, tmp_path):
    """A plain write of entity.json, cut by a disk error or a power loss, left it empty (the
    create was journaled, the data was not): the data dir must still open. Regression: the
    read-only data dir fault test (tests/faults/test_disk_faults.py) found a server that
    would not start again after a disk error."""
    q = h.add(queue_spec(partitions=2))
    h.send(q, message("kept", partition_key="pk"))
    h.router.close()
    manifest = h.router.entity_dir(NS, "q") / "entity.json"
    manifest.write_text("")
    again = RouterHarness(tmp_path)
    q2 = again.add(queue_spec(partitions=2))
    assert again.partitions_of(q2) == {"kept": partition_for_key("pk", 2)}
    assert json.loads(manifest.read_text()) == {"partition_count": 2, "partitioned": True}
    again.router.close()
    manifest.write_text("{")  # torn, and the configuration now asks for another layout
    with pytest.raises(StorageLayoutError, match="unreadable"):
        RouterHarness(tmp_path).add(queue_spec(partitions=4))
    assert manifest.read_text() == "{"  # refused: nothing rewritten


def test_a_send_is_acknowledged_only_after_its_commit(h):
    q = h.add(queue_spec(partitions=2))
    outcome = []
    q.send([message("m", partition_key="k")], NOW, outcome.append)
    assert outcome == [] and h.peek(q) == []  # not acknowledged, not visible
    assert h.wakes > 0  # the router asked for a turn
    h.commit()
    assert outcome == [None]
    assert [rec.message_id for rec, _ in h.peek(q)] == ["m"]


def test_a_send_that_was_not_accepted_does_not_make_its_retry_a_duplicate(h):
    dup = h.add(queue_spec("dup", partitions=2, dup=True, max_size_mb=1))
    key = key_on(1, 2)
    h.router.set_partition_online(NS, "dup", 1, False)
    with pytest.raises(ServerBusy):
        h.send(dup, message(key))  # the MessageId is the key: partition 1, offline
    h.router.set_partition_online(NS, "dup", 1, True)
    h.send(dup, message(key))  # the retry is stored, not dropped as a duplicate
    assert h.partitions_of(dup) == {key: 1}
    # a commit that fails (store full) is no acceptance either
    key0 = key_on(0, 2)
    h.send(dup, *(message(f"fill{i}", partition_key=key0, size=150_000) for i in range(4)))
    with pytest.raises(QuotaExceeded):
        h.send(dup, message("big", partition_key=key0, size=600_000))
    h.router.set_partition_online(NS, "dup", 0, True)  # the operator command re-opens it
    h.send(dup, message("big", partition_key=key0, size=10))
    assert h.partitions_of(dup)["big"] == 0


# ------------------------------------------------------------------ resident pages
def test_store_pages_are_released_a_few_stores_per_tick_each_about_every_period(h):
    """Releasing every store at once stalled the loop; spread over the ticks, each store is
    still released about once per RELEASE_RESIDENT_MS."""
    from sbemu.partitions.router import RELEASE_RESIDENT_MS

    q = h.add(queue_spec("q", partitions=16))
    h.add(queue_spec("plain", partitions=1))
    released: list[str] = []
    for entity in h.router.entities.values():
        for broker in entity.partitions:
            broker.store.release_resident = (  # type: ignore[method-assign]
                lambda path=broker.store.path: released.append(path)
            )
    h.router.on_timer(NOW)  # the first tick after start: every store once
    assert len(released) == 17 == len(set(released))
    released.clear()
    tick = 100
    per_tick = []
    for i in range(1, RELEASE_RESIDENT_MS // tick * 3 + 1):
        before = len(released)
        h.router.on_timer(NOW + i * tick)
        per_tick.append(len(released) - before)
    assert max(per_tick) <= 2  # never all at once
    counts = {p: released.count(p) for p in set(released)}
    assert len(counts) == 17 and set(counts.values()) <= {2, 3}  # ~once per period each
    assert q.partitions[0].store.path in counts


# ------------------------------------------------------------------ send_many: one read's transfers
def _send_many(h, entity, sends, now_ms=NOW):
    """Entity.send_many, then the commit turn: {send index: its outcome}, each seen once."""
    outcome: dict[int, Exception | None] = {}

    def settle(indices, error):
        for i in indices:
            assert i not in outcome, "each send is answered exactly once"
            outcome[i] = error

    entity.send_many([list(msgs) for msgs in sends], now_ms, settle)
    committed_before = dict(outcome)
    h.commit()
    assert len(outcome) == len(sends)
    return outcome, committed_before


def test_send_many_answers_each_send_after_the_commit_and_keeps_their_order(h):
    q = h.add(queue_spec(partitions=1))
    outcome, early = _send_many(h, q, [[message(f"m{i}")] for i in range(20)])
    assert early == {}  # nothing is acknowledged before its commit
    assert outcome == {i: None for i in range(20)}
    assert [rec.message_id for rec, _ in h.peek(q)] == [f"m{i}" for i in range(20)]


def test_send_many_keyless_sends_of_one_call_share_a_partition_and_calls_rotate(h):
    q = h.add(queue_spec(partitions=3))
    for call in range(6):
        outcome, _ = _send_many(h, q, [[message(f"c{call}-{i}")] for i in range(4)])
        assert set(outcome.values()) == {None}
    where = h.partitions_of(q)
    for call in range(6):
        assert {where[f"c{call}-{i}"] for i in range(4)} == {call % 3}


def test_send_many_keyed_sends_land_on_their_key_partition(h):
    q = h.add(queue_spec(partitions=4))
    keys = [key_on(p, 4) for p in range(4)]
    sends = [[message(f"k{i}", partition_key=keys[i % 4])] for i in range(8)]
    sends.append(
        [message("multi-a", partition_key=keys[1]), message("multi-b", partition_key=keys[1])]
    )
    # a batch whose messages name two partitions is a send of its own (stored all the same)
    sends.append([message("split-a", session_id=keys[2]), message("split-b", session_id=keys[3])])
    outcome, _ = _send_many(h, q, sends)
    assert set(outcome.values()) == {None}
    where = h.partitions_of(q)
    assert all(where[f"k{i}"] == i % 4 for i in range(8))
    assert where["multi-a"] == where["multi-b"] == 1
    assert (where["split-a"], where["split-b"]) == (2, 3)


def test_send_many_refuses_only_the_bad_send(h):
    q = h.add(queue_spec(partitions=2, requires_session=True))
    sends = [
        [message("a", session_id="s")],
        [message("no-session")],
        [message("b", session_id="s")],
    ]
    sends.append([message("c", session_id="s", partition_key="other")])
    outcome, early = _send_many(h, q, sends)
    assert isinstance(early[1], InvalidOperation) and isinstance(early[3], InvalidOperation)
    assert outcome[0] is None and outcome[2] is None
    assert sorted(h.partitions_of(q)) == ["a", "b"]


def test_send_many_on_one_partition_refuses_only_the_bad_send(h):
    # an entity of one partition takes its own path (Entity._send_one_partition): the same
    # checks per send, every good send staged with one enqueue and answered after its commit
    q = h.add(queue_spec(partitions=1, requires_session=True))
    sends = [
        [message("a", session_id="s")],
        [message("no-session")],
        [message("b", session_id="s"), message("b2", session_id="t")],
        [message("c", session_id="s", partition_key="other")],
        [message("d", session_id="s", partition_key="s")],
    ]
    outcome, early = _send_many(h, q, sends)
    assert isinstance(early[1], InvalidOperation) and isinstance(early[3], InvalidOperation)
    assert "must be the same" in str(early[3])
    assert {i: outcome[i] for i in (0, 2, 4)} == {0: None, 2: None, 4: None}
    assert [rec.message_id for rec, _ in h.peek(q)] == ["a", "b", "b2", "d"]
    plain = h.add(queue_spec("plain", partitions=1))
    outcome, early = _send_many(
        h,
        plain,
        [[message("x", partition_key="k")], [message("y", session_id="s", partition_key="k")]],
    )
    assert outcome[0] is None and isinstance(early[1], InvalidOperation)
    assert [rec.message_id for rec, _ in h.peek(plain)] == ["x"]


def test_send_many_to_an_offline_single_partition_refuses_every_send(h):
    q = h.add(queue_spec(partitions=1))
    h.router.set_partition_online(NS, "q", 0, False)
    outcome, early = _send_many(h, q, [[message("a")], [message("b")]])
    assert all(isinstance(early[i], ServerBusy) for i in (0, 1))
    h.router.set_partition_online(NS, "q", 0, True)
    outcome, _ = _send_many(h, q, [[message("c")]])
    assert outcome == {0: None}
    assert [rec.message_id for rec, _ in h.peek(q)] == ["c"]


def test_send_many_with_duplicate_detection_admits_each_send_on_its_own(h):
    dup = h.add(queue_spec("dup", partitions=2, dup=True))
    outcome, _ = _send_many(h, dup, [[message("x")], [message("x")], [message("y")]])
    assert set(outcome.values()) == {None}  # the repeat is accepted, not stored
    assert sorted(rec.message_id for rec, _ in h.peek(dup)) == ["x", "y"]


def test_send_many_to_an_offline_partition_fails_over_or_refuses(h):
    q = h.add(queue_spec(partitions=3))
    h.router.set_partition_online(NS, "q", 1, False)
    pinned = [message("pinned", partition_key=key_on(1, 3))]
    outcome, _ = _send_many(h, q, [[message("free")], pinned])
    assert outcome[0] is None and isinstance(outcome[1], ServerBusy)
    assert h.partitions_of(q)["free"] in (0, 2)


# ------------------------------------------------------------------ settlement and Status
def _lock_one(entity, queue: str = MAIN):
    """Take (peek-lock) the next message of a view straight from its partitions."""
    for broker in entity.partitions:
        taken = broker.take_next(queue, NOW, True)
        if taken is not None:
            return taken[1].key
    raise AssertionError("nothing to lock")


def test_settlement_follows_status_and_forwarding_changes(h):
    """Completing is refused while the Status forbids receiving or the queue forwards, and
    allowed again once Active (the settle path's fast check must not skip these)."""
    q = h.add(queue_spec(partitions=2))
    h.add(queue_spec("q2", partitions=1))
    h.send(q, message("a"), message("b"))
    token = _lock_one(q)
    for settings in (
        EntitySettings(status=EntityStatus.RECEIVE_DISABLED),
        EntitySettings(status=EntityStatus.DISABLED),
        EntitySettings(forward_to="q2"),
    ):
        h.router.apply_settings(NS, "q", settings)
        with pytest.raises((EntityDisabled, InvalidOperation)):
            q.settle(token, COMPLETE, NOW, lambda error: None)
    h.router.apply_settings(NS, "q", EntitySettings(status=EntityStatus.SEND_DISABLED))
    outcome: list[Exception | None] = []
    q.settle(token, COMPLETE, NOW, outcome.append)
    h.commit()
    assert outcome == [None]
    assert [rec.message_id for rec, _ in h.peek(q)] == ["b"]


def test_settlement_on_a_subscription_follows_its_own_status(h):
    every = [RuleSource("$Default", "true")]
    t = h.add(topic_spec({"s1": every, "s2": every}))
    h.send(t, message("m"))
    sub1, sub2 = subscription_queue("s1"), subscription_queue("s2")
    t1, t2 = _lock_one(t, sub1), _lock_one(t, sub2)
    h.router.apply_settings(
        NS,
        "t",
        EntitySettings(subscriptions={sub1: ReceiverSettings(EntityStatus.RECEIVE_DISABLED)}),
    )
    with pytest.raises(EntityDisabled):
        t.settle(t1, COMPLETE, NOW, lambda error: None)
    outcome: list[Exception | None] = []
    t.settle(t2, COMPLETE, NOW, outcome.append)
    h.commit()
    assert outcome == [None]
