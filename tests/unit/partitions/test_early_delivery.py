"""A new message joins the line as it is staged when the sub-queue has caught up with its store
(Transitions.enqueue): a waiting receiver gets it while its commit syncs, its send is still
acknowledged only after the commit, and whatever the receiver does with it commits after it.
Real LMDB; the commits are run by the test as the committer would run them, so each step
can be taken before or after a commit lands."""

import pytest
from broker_harness import MAIN, commit, msg, open_broker

from sbemu.errors import MessageLockLost, ServerBusy
from sbemu.partitions import COMPLETE
from sbemu.partitions.broker import PartitionBroker, Route
from sbemu.partitions.records import decode_log
from sbemu.partitions.store import StoreFull

NOW = 1_000


def _send(broker: PartitionBroker, *ids: int) -> list[Exception | None]:
    acked: list[Exception | None] = []
    broker.enqueue([msg(i) for i in ids], [[Route(MAIN)]] * len(ids), NOW, acked.append)
    return acked


def _caught_up(broker: PartitionBroker) -> None:
    """A receiver looked and found the store read to its end."""
    assert broker.take_next(MAIN, NOW, True) is None


def _ids(broker: PartitionBroker) -> list[str | None]:
    out = []
    while (got := broker.take_next(MAIN, NOW, True)) is not None:
        out.append(got[0].message_id)
    return out


def test_a_caught_up_receiver_gets_a_message_before_its_commit_lands(tmp_path):
    broker = open_broker(tmp_path / "p")
    ready: list[str] = []
    broker.on_ready = ready.append
    _caught_up(broker)
    acked = _send(broker, 1)
    assert ready == [MAIN]  # the router is told at once
    got = broker.take_next(MAIN, NOW, True)
    assert got is not None and got[0].message_id == "m1"
    assert acked == []  # the send is not acknowledged before its commit
    commit(broker)
    assert acked == [None]


def test_a_settlement_of_it_commits_after_the_message(tmp_path):
    broker = open_broker(tmp_path / "p")
    _caught_up(broker)
    acked = _send(broker, 1)
    rec, lock = broker.take_next(MAIN, NOW, True)  # type: ignore[misc]
    assert lock is not None
    taken = broker.take_commit()  # the message's commit is on its way
    assert taken is not None
    done: list[Exception | None] = []
    broker.settle(lock.key, COMPLETE, NOW, done.append)  # staged behind it
    batch, callbacks = taken
    broker.commit_batch(batch)
    broker.commit_done(callbacks, None)
    assert acked == [None] and done == []  # the completion waits for its own commit
    assert broker.store.entries(MAIN) == 1  # stored; its deletion not yet
    commit(broker)
    assert done == [None]
    broker.store.close()
    again = open_broker(tmp_path / "p")  # a restart: the completed message stays gone
    assert _ids(again) == []


def test_a_restart_before_the_commit_forgets_an_unacknowledged_message(tmp_path):
    broker = open_broker(tmp_path / "p")
    _caught_up(broker)
    acked = _send(broker, 1)
    assert broker.take_next(MAIN, NOW, True) is not None
    broker.store.close()  # kill -9 before the commit: nothing was acknowledged
    assert acked == []
    again = open_broker(tmp_path / "p")
    assert _ids(again) == []


def test_a_message_behind_one_still_on_its_way_waits_for_its_commit(tmp_path):
    broker = open_broker(tmp_path / "p")
    first = _send(broker, 1)  # the scan has not reached the end yet: left to the commit
    _caught_up(broker)  # the read finds the store's end (m-1 is not in it yet)
    second = _send(broker, 2)
    # m-2 must not overtake m-1: it waits for the commit too
    assert broker.take_next(MAIN, NOW, True) is None
    commit(broker)
    assert first == [None] and second == [None]
    assert _ids(broker) == ["m1", "m2"]


def test_a_forwarding_sub_queue_waits_for_the_commit(tmp_path):
    broker = open_broker(tmp_path / "p")
    broker.forwards = lambda queue: queue == MAIN
    _caught_up(broker)
    _send(broker, 1)
    assert broker.take_next(MAIN, NOW, True) is None
    commit(broker)
    assert _ids(broker) == ["m1"]


def test_a_failed_commit_takes_back_what_was_delivered(tmp_path):
    broker = open_broker(tmp_path / "p")
    _caught_up(broker)
    acked = _send(broker, 1)
    _rec, lock = broker.take_next(MAIN, NOW, True)  # type: ignore[misc]
    assert lock is not None
    batch, callbacks = broker.take_commit()  # type: ignore[misc]
    broker.commit_done(callbacks, StoreFull("map full"))  # grows, reloads from the store
    assert len(acked) == 1 and isinstance(acked[0], ServerBusy)
    with pytest.raises(MessageLockLost):
        broker.settle(lock.key, COMPLETE, NOW, lambda e: None)
    assert _ids(broker) == []
    assert broker.counts(MAIN)["active"] == 0


def test_a_message_released_before_its_commit_lands_is_delivered_again(tmp_path):
    """The Python SDK releases a message that reaches it between two receive calls (its
    keep-alive thread): released before its commit landed, it is back in line, before and
    after the commit."""
    broker = open_broker(tmp_path / "p")
    _caught_up(broker)
    _send(broker, 1, 2)
    _rec, lock = broker.take_next(MAIN, NOW, True)  # type: ignore[misc]
    assert lock is not None
    broker.release(lock.key, NOW)
    again = broker.take_next(MAIN, NOW, True)
    assert again is not None and again[0].message_id == "m1"
    assert again[1] is not None
    broker.release(again[1].key, NOW)
    commit(broker)
    assert _ids(broker) == ["m1", "m2"]


def test_a_restart_after_an_early_delivery_keeps_the_log_offsets(tmp_path):
    """A commit whose messages all joined the line early still stores where the partition
    log goes on: after a restart the next event takes the next offset, not one in use."""
    broker = open_broker(tmp_path / "p")
    _caught_up(broker)
    _send(broker, 1)
    commit(broker)
    broker.store.close()
    again = open_broker(tmp_path / "p")
    _send(again, 2)
    commit(again)
    logged = [(off, decode_log(v)["message_id"]) for off, v in again.store.read_log(0, 10)]
    assert logged == [(0, "m1"), (1, "m2")]
