"""Durability across restarts (brief item 11): every test runs its own server and stops it with
SIGTERM (clean, exit 0) or SIGKILL (crash) before starting it again on the same data directory.
"""

from __future__ import annotations

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from integration_support import (
    PARTITIONS,
    body_text,
    partition_of,
    proton_connect,
    queue_def,
    receive_n,
)

from sbemu.partitions.keys import partition_for_key

SBEMU_QUEUES = [
    queue_def("q1"),
    queue_def("pq", partitioned=True),
    queue_def("lockq", lock_duration="PT1M"),  # a long lock: only a restart can free it quickly
]

N = 50


def _client(server) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(
        server.conn_str, retry_total=1, retry_backoff_factor=0.2
    )


def _send_individually(server, queue: str, n: int, prefix: str) -> None:
    """One transfer per message: each send_messages returned means the server acknowledged it."""
    with _client(server) as c, c.get_queue_sender(queue) as s:
        for i in range(n):
            s.send_messages(ServiceBusMessage(f"{prefix}-{i}", message_id=f"{prefix}-{i}"))


def _peek_all(server, queue: str, n: int) -> dict[str, int]:
    """message_id -> sequence number, by repeated peeks (does not lock)."""
    found: dict[str, int] = {}
    with _client(server) as c, c.get_queue_receiver(queue, max_wait_time=2) as r:
        empty = 0
        for _ in range(4 * n):
            batch = r.peek_messages(max_message_count=50)
            for m in batch:
                found[m.message_id] = m.sequence_number
            if len(found) >= n:
                break
            empty = empty + 1 if not batch else 0
            if empty >= 2:
                break
    return found


def _receive_all(server, queue: str, n: int, *, complete: bool = True) -> list:
    with _client(server) as c, c.get_queue_receiver(queue, max_wait_time=3, prefetch_count=20) as r:
        got = receive_n(r, n, timeout=20)
        if complete:
            for m in got:
                r.complete_message(m)
            extra = r.receive_messages(max_message_count=5, max_wait_time=1)
            assert extra == [], f"unexpected extra messages: {[m.message_id for m in extra]}"
    return got


@pytest.mark.parametrize("queue", ["q1", "pq"])
def test_sigterm_restart_keeps_messages_and_sequence_numbers(own_server, queue):
    _send_individually(own_server, queue, N, "term")
    before = _peek_all(own_server, queue, N)
    assert len(before) == N
    assert own_server.stop() == 0, f"SIGTERM exit code; stderr={own_server.stderr_text()}"
    own_server.start()
    got = _receive_all(own_server, queue, N)
    assert len(got) == N, f"{len(got)} of {N} messages survived a clean restart"
    after = {m.message_id: m.sequence_number for m in got}
    assert after == before, "sequence numbers changed across the restart"
    assert {m.delivery_count for m in got} == {0}


@pytest.mark.parametrize("queue", ["q1", "pq"])
def test_sigkill_keeps_every_acknowledged_message(own_server, queue):
    _send_individually(own_server, queue, N, "kill")
    before = _peek_all(own_server, queue, N)
    own_server.kill()
    own_server.start()
    got = _receive_all(own_server, queue, N)
    ids = sorted(m.message_id for m in got)
    missing = sorted(set(f"kill-{i}" for i in range(N)) - set(ids))
    assert not missing, f"acknowledged messages lost in the crash: {missing}"
    assert len(ids) == N, f"duplicates after the crash: {ids}"
    assert {m.message_id: m.sequence_number for m in got} == before
    # Sequence numbers are never reused after a crash.
    _send_individually(own_server, queue, PARTITIONS, "post")
    post = _receive_all(own_server, queue, PARTITIONS)
    by_partition: dict[int, int] = {}
    for seq in before.values():
        by_partition[partition_of(seq)] = max(by_partition.get(partition_of(seq), 0), seq)
    for m in post:
        pid = partition_of(m.sequence_number)
        assert m.sequence_number > by_partition.get(pid, 0), (
            f"sequence number {m.sequence_number} reused/went back in partition {pid} after the crash"
        )


def test_completed_messages_stay_completed_after_sigkill(own_server):
    _send_individually(own_server, "q1", 10, "done")
    with _client(own_server) as c, c.get_queue_receiver("q1", max_wait_time=3) as r:
        got = receive_n(r, 10)
        assert len(got) == 10
        for m in got[:6]:
            r.complete_message(m)  # acknowledged by the server (Python 7.15 awaits the outcome)
        for m in got[6:]:
            r.abandon_message(m)
    own_server.kill()
    own_server.start()
    left = _receive_all(own_server, "q1", 4)
    assert sorted(m.message_id for m in left) == [f"done-{i}" for i in range(6, 10)]


def test_dead_lettered_message_survives_restart(own_server):
    _send_individually(own_server, "q1", 1, "dl")
    with _client(own_server) as c, c.get_queue_receiver("q1", max_wait_time=3) as r:
        (m,) = receive_n(r, 1)
        r.dead_letter_message(m, reason="kept", error_description="across restarts")
    own_server.kill()
    own_server.start()
    with _client(own_server) as c:
        with c.get_queue_receiver("q1", max_wait_time=1) as r:
            assert r.receive_messages(max_message_count=1, max_wait_time=1) == []
        with c.get_queue_receiver(
            "q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=3
        ) as dlq:
            got = receive_n(dlq, 1, timeout=8)
            assert [d.message_id for d in got] == ["dl-0"], "dead-lettered message lost in restart"
            assert got[0].dead_letter_reason == "kept"
            assert got[0].dead_letter_error_description == "across restarts"
            dlq.complete_message(got[0])


def test_delivery_count_survives_restart(own_server):
    _send_individually(own_server, "q1", 1, "dc")
    with _client(own_server) as c, c.get_queue_receiver("q1", max_wait_time=3) as r:
        for expected in (0, 1):
            (m,) = receive_n(r, 1, timeout=8)
            assert m.delivery_count == expected
            r.abandon_message(m)
    assert own_server.stop() == 0
    own_server.start()
    with _client(own_server) as c, c.get_queue_receiver("q1", max_wait_time=3) as r:
        got = receive_n(r, 1, timeout=8)
        assert got, "message lost in restart"
        assert got[0].delivery_count == 2, "abandon twice + restart must give delivery_count 2"
        r.complete_message(got[0])


def test_locks_are_released_on_restart(own_server):
    """A message received but not settled (LockDuration 1 min) is receivable right after a
    restart: locks live in memory only."""
    _send_individually(own_server, "lockq", 1, "lk")
    with _client(own_server) as c:
        r = c.get_queue_receiver("lockq", max_wait_time=3)
        (m,) = receive_n(r, 1)
        assert m.delivery_count == 0
        own_server.kill()  # the receiver never settles
        try:
            r.close()
        except Exception:
            pass
    own_server.start()
    with _client(own_server) as c, c.get_queue_receiver("lockq", max_wait_time=3) as r:
        got = receive_n(r, 1, timeout=6)
        assert [g.message_id for g in got] == ["lk-0"], (
            "locked message not receivable after restart"
        )
        # Azure counts the lost lock as a delivery attempt; accept either view of it.
        assert got[0].delivery_count in (0, 1)
        r.complete_message(got[0])


def test_partition_key_stable_across_restart(own_server):
    """P7: a stable hash, not Python's per-process salted hash(): the same key lands on the same
    partition in a new server process."""
    keys = ["stable-1", "stable-2", "stable-3"]

    def placement() -> dict[str, int]:
        with _client(own_server) as c:
            with c.get_queue_sender("pq") as s:
                for k in keys:
                    s.send_messages(ServiceBusMessage(k, partition_key=k))
            got = _receive_all(own_server, "pq", len(keys))
        return {body_text(m): partition_of(m.sequence_number) for m in got}

    first = placement()
    own_server.restart()
    second = placement()
    assert first == second
    assert first == {k: partition_for_key(k, PARTITIONS) for k in keys}


def test_round_robin_continues_over_all_partitions_after_restart(own_server):
    _send_individually(own_server, "pq", PARTITIONS, "rr1")
    own_server.restart(kill=True)
    _send_individually(own_server, "pq", PARTITIONS, "rr2")
    got = _receive_all(own_server, "pq", 2 * PARTITIONS)
    assert len(got) == 2 * PARTITIONS
    second = {partition_of(m.sequence_number) for m in got if m.message_id.startswith("rr2-")}
    assert second == set(range(PARTITIONS))


def test_pre_settled_accepts_are_committed_by_a_clean_stop(own_server):
    """A completion the client settled at once (python-qpid-proton's accept(); rhea's
    auto-accept) is committed lazily, with the partition's next commit or at the next timer
    tick (PartitionBroker._dirty); a clean stop commits it too: after SIGTERM and a restart
    the accepted messages are gone and the others are all there."""

    _send_individually(own_server, "q1", 8, "pre")
    conn = proton_connect(own_server)
    try:
        receiver = conn.create_receiver("q1", credit=8)
        accepted = []
        for _ in range(5):
            msg = receiver.receive(timeout=10)
            accepted.append(msg.id)
            receiver.accept()  # settled by the client: no outcome to wait for
        receiver.close()
    finally:
        conn.close()
    assert own_server.stop() == 0
    own_server.start()
    left = _receive_all(own_server, "q1", 3)
    assert sorted(m.message_id for m in left) == sorted(
        f"pre-{i}" for i in range(8) if f"pre-{i}" not in accepted
    )
    assert len(accepted) == 5
