"""The receive hot path takes runs of messages: PartitionBroker.take_batch and the one-receiver
dispatch of EntityView (runs from the partitions in turn, at most DISPATCH_RUN per loop pass).

Real LMDB in a temp dir, the group commit run inline, a recording receiver instead of a link.
"""

from __future__ import annotations

import msgspec
import pytest
from routing_harness import NOW, RouterHarness, message, queue_spec
from test_store_broker import DLQ, MAIN, Harness, msg

from sbemu.partitions import COMPLETE, Outcome
from sbemu.partitions.dispatch import DISPATCH_RUN, Taken
from sbemu.partitions.records import LogEvent, decode_log, expand_log, log_extent
from sbemu.partitions.tokens import make_lock_key, partition_of_token


class Receiver:
    """A peek-lock receiver outside sessions, as the router sees a link: records each run."""

    peek_lock = True
    session = None

    def __init__(self, credit: int) -> None:
        self.left = credit
        self.runs: list[tuple[int | None, Taken]] = []

    def credit(self) -> int:
        return self.left

    def deliver(self, delivered: object) -> None:
        raise AssertionError("the one peek-lock receiver is served in runs")

    def deliver_batch(self, taken: Taken, partition_id: int | None) -> None:
        assert len(taken) <= self.left, "never beyond the credit"
        self.left -= len(taken)
        self.runs.append((partition_id, taken))


@pytest.fixture
def h(tmp_path):
    return RouterHarness(tmp_path)


def test_one_receiver_gets_runs_from_every_partition_each_in_sequence_order(h):
    q = h.add(queue_spec(partitions=4))
    for i in range(40):
        h.send(q, message(f"m{i}"))  # key-less: round-robin, 10 per partition [P8]
    view = q.views[MAIN]
    rcv = Receiver(10)
    view.attach(rcv)
    view.dispatch(NOW)
    assert rcv.left == 0
    # one run from the partition in turn (it holds 10): the next dispatch starts at the next
    assert [pid for pid, _ in rcv.runs] == [0]
    rcv.left = 100
    view.dispatch(NOW)
    assert rcv.left == 70  # all 40 delivered, the rest of the credit unused
    seen: dict[int, list[int]] = {}
    tokens = set()
    for pid, taken in rcv.runs:
        for rec, lock in taken:
            assert lock is not None and lock.record is rec and lock.until_ms > NOW
            assert partition_of_token(lock.token) == pid == rec.sequence_number >> 48
            tokens.add(lock.token)
            seen.setdefault(pid, []).append(rec.sequence_number)
    assert len(tokens) == 40
    for numbers in seen.values():
        assert numbers == sorted(numbers) and len(numbers) == 10
    # every delivered message is locked: completing each works, and then nothing is left
    for _, taken in rcv.runs:
        for _rec, lock in taken:
            q.complete_lazy([lock.key], NOW)
    h.router.flush_lazy()
    h.commit()
    assert h.peek(q) == []


def test_a_large_credit_is_served_in_runs_one_loop_pass_after_another(h):
    """A dispatch hands over at most DISPATCH_RUN messages; the rest of the credit is served
    in the next turn (after what was built went out), until the credit or the messages end."""
    q = h.add(queue_spec(partitions=1))
    total = 2 * DISPATCH_RUN + 10
    h.send(q, *(message(f"m{i}") for i in range(total)))
    view = q.views[MAIN]
    rcv = Receiver(1000)
    view.attach(rcv)
    view.dispatch(NOW)
    assert sum(len(t) for _, t in rcv.runs) == DISPATCH_RUN
    assert h.router.has_pending()  # the rest waits for the next turn
    h.router.run_pending(NOW)
    assert sum(len(t) for _, t in rcv.runs) == 2 * DISPATCH_RUN
    h.router.run_pending(NOW)
    assert sum(len(t) for _, t in rcv.runs) == total
    h.router.run_pending(NOW)  # credit left, nothing ready: nothing more, nothing deferred
    assert sum(len(t) for _, t in rcv.runs) == total and not h.router.has_pending()
    numbers = [rec.sequence_number for _, taken in rcv.runs for rec, _lock in taken]
    assert numbers == sorted(numbers) and len(set(numbers)) == total


def _one_message_and_a_receiver(h, partitions: int, credit: int) -> tuple:
    """A queue holding message "a", and a receiver with `credit` attached and dispatched to."""
    q = h.add(queue_spec(partitions=partitions))
    h.send(q, message("a"))
    rcv = Receiver(credit)
    q.views[MAIN].attach(rcv)
    q.views[MAIN].dispatch(NOW)
    return q, rcv


def test_a_receiver_without_credit_takes_nothing(h):
    q, rcv = _one_message_and_a_receiver(h, partitions=2, credit=0)
    assert rcv.runs == []
    assert len(h.peek(q)) == 1 and not any(b.locks for b in q.partitions)


@pytest.fixture
def broker_h(tmp_path):
    return Harness(tmp_path / "p0")


def test_take_batch_gives_what_take_next_gives_one_by_one(tmp_path):
    one, run = Harness(tmp_path / "one"), Harness(tmp_path / "run")
    for hh in (one, run):
        hh.send(*[msg(i) for i in range(7)])
    singles = [one.broker.take_next(MAIN, 2000, True) for _ in range(5)]
    taken = run.broker.take_batch(MAIN, 2000, 5)
    assert [r.sequence_number for r, _ in taken] == [r.sequence_number for r, _ in singles]
    for (rec, lock), (rec1, lock1) in zip(taken, singles, strict=True):
        assert lock is not None and lock1 is not None and lock.record is rec
        assert rec.message_id == rec1.message_id
        assert (lock.seq, lock.until_ms, lock.queue.name) == (lock1.seq, lock1.until_ms, MAIN)
        assert run.broker.lock_of(lock.key) is lock
    assert run.broker.stats.outgoing == one.broker.stats.outgoing == 5
    # the same delivered log records, to the byte (offsets go on from the enqueued ones): the
    # run as one run record that expands to them
    [(offset, value)] = run.broker.staging.batch.log
    assert [(off, v) for off, v in one.broker.staging.batch.log] == [
        (offset + i, v) for i, v in enumerate(expand_log(value))
    ]
    assert log_extent(value) == 5
    assert [decode_log(v)["event"] for v in expand_log(value)] == [LogEvent.DELIVERED.value] * 5
    # the rest, then nothing
    assert [r.sequence_number for r, _ in run.broker.take_batch(MAIN, 2000, 10)] == [6, 7]
    assert run.broker.take_batch(MAIN, 2000, 10) == []


def test_take_batch_expires_what_is_due_instead_of_delivering_it(broker_h):
    broker_h.send(msg(0, ttl=10), msg(1), now=1000)
    taken = broker_h.broker.take_batch(MAIN, 1500, 10)
    assert [r.message_id for r, _ in taken] == ["m1"]
    # the expired one was dead-lettered (dead_letter_on_expiration), not locked
    broker_h.commit()
    assert broker_h.broker.counts(MAIN + "/$deadletterqueue")["active"] == 1


def test_take_batch_hands_over_what_it_locked_when_the_store_fails_midway(broker_h, monkeypatch):
    from sbemu.partitions import subqueue as subqueue_module
    from sbemu.partitions.store import StoreUnavailable

    monkeypatch.setattr(subqueue_module, "READ_AHEAD", 2)
    broker_h.send(*[msg(i) for i in range(5)])
    real_scan = broker_h.store.read_ahead  # what the read-ahead reads with
    calls = []

    def scan(*args, **kw):
        calls.append(args)
        if len(calls) > 1:
            raise StoreUnavailable("disk gone")
        return real_scan(*args, **kw)

    monkeypatch.setattr(broker_h.store, "read_ahead", scan)
    taken = broker_h.broker.take_batch(MAIN, 2000, 5)
    assert [r.message_id for r, _ in taken] == ["m0", "m1"]  # locked before the fault
    with pytest.raises(StoreUnavailable):
        broker_h.broker.take_batch(MAIN, 2000, 5)  # nothing taken: the fault is seen


def test_complete_lazy_completes_across_partitions_and_skips_lost_locks(h):
    q = h.add(queue_spec(partitions=4))
    for i in range(8):
        h.send(q, message(f"m{i}"))
    view = q.views[MAIN]
    rcv = Receiver(8)
    view.attach(rcv)
    view.dispatch(NOW)
    locks = [lock for _, taken in rcv.runs for _, lock in taken]
    assert len(locks) == 8 and len({partition_of_token(k.token) for k in locks}) == 4
    stale = locks[0]
    q.complete_lazy([stale.key], NOW)  # completed once already: its lock is gone
    unknown = make_lock_key(2)  # a token of no lock
    keys = [k.key for k in locks[1:]] + [stale.key, unknown]  # tokens' ints
    assert all(k.token.int == k.key for k in locks)
    q.complete_lazy(keys, NOW)
    assert not any(b.locks for b in q.partitions)
    assert not h.router.dirty, "lazy: nothing commits on its own"
    h.router.flush_lazy()
    h.commit()
    assert h.peek(q) == []
    for b in q.partitions:
        events = [decode_log(v)["event"] for _, v in b.store.read_log(0, 100)]
        assert events.count("completed") == events.count("enqueued") == 2


def test_complete_lazy_skips_an_expired_lock_and_the_message_comes_back(h):
    q, rcv = _one_message_and_a_receiver(h, partitions=1, credit=1)
    view = q.views[MAIN]
    [(_, [(_, lock)])] = rcv.runs
    assert lock is not None
    later = lock.until_ms
    q.complete_lazy([lock.key], later)  # the lock ran out: nothing is completed
    h.router.on_timer(later)
    h.router.flush_lazy()
    h.commit()
    assert [rec.message_id for rec, _ in h.peek(q)] == ["a"]
    rcv.left = 1
    view.dispatch(later)
    assert rcv.runs[-1][1][0][0].delivery_count == 1  # delivered again


def test_complete_lazy_removes_runs_of_two_sub_queues_and_their_counts_survive_a_restart(broker_h):
    """The completions of one call are removed a run per sub-queue (Transitions.remove_run):
    interleaved runs of the queue and its dead-letter queue leave the counts, the bytes and
    the store as completing them one by one would."""
    b = broker_h.broker
    broker_h.send(*[msg(i) for i in range(6)])
    for _ in range(2):  # two dead-lettered, then locked on the dead-letter queue
        _, lock = b.take_next(MAIN, 1000, True)
        b.settle(lock.key, Outcome.dead_letter("why", "because", None), 1000, lambda e: None)
    broker_h.commit()
    main = [lock.key for _, lock in b.take_batch(MAIN, 1000, 4)]
    dlq = [b.take_next(DLQ, 1000, True)[1].key for _ in range(2)]
    stored = b.health.stored_bytes
    size = b.queues[MAIN].bytes // 4
    b.complete_lazy([main[0], main[1], dlq[0], main[2], dlq[1]], 1000)  # four runs
    assert b.counts(MAIN)["active"] == 1 and b.counts(DLQ)["active"] == 0
    assert b.queues[MAIN].bytes == size and b.queues[DLQ].bytes == 0
    assert b.health.stored_bytes == stored - 5 * size  # three and two completed
    broker_h.commit()
    broker_h.reopen()
    b = broker_h.broker
    assert b.counts(MAIN)["active"] == 1 and b.counts(DLQ)["active"] == 0
    assert b.queues[MAIN].bytes == size
    assert [r.message_id for r in b.peek(MAIN, 0, 10)] == [msg(5).message_id]
    assert b.peek(DLQ, 0, 10) == []


def test_take_batch_takes_messages_back_in_line_before_the_buffer_run(tmp_path):
    """The buffer's run is taken at once only while nothing waits back in line: an abandoned
    message (back in line, older than the buffer's) comes first, then the run, in order, across
    read-ahead refills (more messages than READ_AHEAD)."""
    from sbemu.partitions.subqueue import READ_AHEAD

    one, run = Harness(tmp_path / "one"), Harness(tmp_path / "run")
    total = READ_AHEAD * 2 + 5
    for hh in (one, run):
        hh.send(*[msg(i) for i in range(total)])
        first = hh.broker.take_batch(MAIN, 2000, 3)
        hh.broker.settle(
            first[1][1].key, Outcome.abandon(None), 2000, lambda e: None
        )  # seq 2 back in line
        hh.commit()
    singles = []
    while (got := one.broker.take_next(MAIN, 2000, True)) is not None:
        singles.append(got[0].sequence_number)
    taken = [r.sequence_number for r, _ in run.broker.take_batch(MAIN, 2000, total)]
    assert taken == singles == [2, *range(4, total + 1)]


def test_lock_keys_drawn_for_a_run_are_version_4_tokens_of_their_partition():
    from sbemu.partitions.tokens import make_lock_keys, token_of

    keys = make_lock_keys(7, 50)
    assert len(set(keys)) == 50
    for key in keys:
        token = token_of(key)
        assert token.version == 4 and token.variant == "specified in RFC 4122"
        assert partition_of_token(token) == 7
    assert make_lock_keys(3, 0) == []


def test_a_run_of_locks_expires_together_and_leaves_no_timers_behind(tmp_path, monkeypatch):
    """A take_batch run's locks share one lock-heap entry (LockTable.add_run): each lock still
    expires once, at its locked-until, unless settled or renewed first; settled runs leave
    no more timers behind than single locks do."""
    from sbemu.partitions import locks as locks_module

    h = Harness(tmp_path)
    h.send(*[msg(i) for i in range(10)])
    taken = h.broker.take_batch(MAIN, 1_000, 6)  # locked until 6,000 (5 s locks)
    keys = [lock.key for _rec, lock in taken if lock is not None]
    table = h.broker.lock_table
    assert len(table.heap) == 1 and table.heap_keys == 6
    h.broker.settle(keys[0], COMPLETE, 1_001, lambda e: None)
    h.broker.renew(keys[1], 2_000)  # now until 7,000
    assert [lock.key for lock in table.expired(5_999)] == []
    due = list(table.expired(6_000))
    assert [lock.key for lock in due] == keys[2:]  # each once; the renewed one not yet
    for lock in due:
        table.unlock(lock)
    assert [lock.key for lock in table.expired(7_000)] == [keys[1]]
    assert table.heap == [] and table.heap_keys == 0

    # a drain in runs, every lock settled: the heap stays bounded as with single locks
    monkeypatch.setattr(locks_module, "LOCK_HEAP_SLACK", 64)
    h.send(*[msg(100 + i) for i in range(600)])
    now = 10_000
    while True:
        run = h.broker.take_batch(MAIN, now, 7)
        if not run:
            break
        h.broker.complete_lazy([lock.key for _rec, lock in run if lock is not None], now)
    assert table.heap_keys <= 2 * len(table.by_key) + 64 + 7
    assert sum(len(e[3]) if len(e) == 4 else 1 for e in table.heap) == table.heap_keys


def test_a_large_message_ends_a_read_and_is_read_by_the_next_commit(broker_h, monkeypatch):
    """The read-ahead stops at a large record and leaves it to the next commit to read, off
    the loop (largeread.py); nothing after it joins the line before it (FIFO)."""
    from sbemu.partitions import largeread, records

    large = 2048  # a message this big or bigger ends a read
    monkeypatch.setattr(records.decode_ahead, "__defaults__", (records._DECODE, large))
    big = b"\x00Sw\xb0" + large.to_bytes(4, "big") + b"x" * large  # an amqp-value of `large`
    broker_h.send(*[msg(i, tail=big, size=len(big)) if i in (1, 2) else msg(i) for i in range(5)])
    real_read = broker_h.store.read_ahead
    reads: list[list[str | None]] = []

    def read(*args, **kw):
        got, more = real_read(*args, **kw)
        reads.append(["ahead" if type(r) is largeread.Ahead else r.message_id for r in got])
        return got, more

    monkeypatch.setattr(broker_h.store, "read_ahead", read)
    took: list[list[str | None]] = []
    for _ in range(3):
        took.append([r.message_id for r, _ in broker_h.broker.take_batch(MAIN, 2000, 10)])
        assert broker_h.broker.take_batch(MAIN, 2000, 10) == []  # the large one is being read
        broker_h.commit()  # reads it, after its writes (the locks just taken)
    assert took == [["m0"], ["m1"], ["m2", "m3", "m4"]]
    assert reads == [["m0", "ahead"], ["ahead"], ["m3", "m4"]]  # none left behind
    assert broker_h.broker.take_batch(MAIN, 2000, 10) == []


def test_a_large_message_gone_before_its_read_is_skipped(broker_h, monkeypatch):
    from sbemu.partitions import records

    large = 2048
    monkeypatch.setattr(records.decode_ahead, "__defaults__", (records._DECODE, large))
    big = b"\x00Sw\xb0" + large.to_bytes(4, "big") + b"x" * large
    seqs = broker_h.send(msg(0, tail=big, size=len(big)), msg(1))
    assert broker_h.broker.take_batch(MAIN, 2000, 10) == []  # the read is asked for
    broker_h.broker.staging.batch.delete(MAIN, seqs[0])  # gone in the commit that reads it
    broker_h.broker.staging.dirty()
    broker_h.commit()
    assert [r.message_id for r, _ in broker_h.broker.take_batch(MAIN, 2000, 10)] == ["m1"]


def test_a_large_read_that_fails_is_read_on_the_loop(broker_h, monkeypatch):
    from sbemu.partitions import largeread, records

    large = 2048
    monkeypatch.setattr(records.decode_ahead, "__defaults__", (records._DECODE, large))
    big = b"\x00Sw\xb0" + large.to_bytes(4, "big") + b"x" * large
    broker_h.send(msg(0, tail=big, size=len(big)), msg(1))

    def fails(value):
        raise ValueError("unreadable")

    monkeypatch.setattr(largeread, "read", fails)
    assert broker_h.broker.take_batch(MAIN, 2000, 10) == []
    broker_h.commit()
    taken = broker_h.broker.take_batch(MAIN, 2000, 10)
    assert [r.message_id for r, _ in taken] == ["m0", "m1"]
    assert taken[0][0].tail == big


def _large_records_from(monkeypatch, large: int = 2048) -> bytes:
    """Records of `large` bytes or more count as large (read off the loop); an amqp-value
    body that makes one."""
    from sbemu.partitions import largeread, records

    monkeypatch.setattr(records.decode_ahead, "__defaults__", (records._DECODE, large))
    monkeypatch.setattr(largeread.small_or_ahead, "__defaults__", (large,))
    return b"\x00Sw\xb0" + large.to_bytes(4, "big") + b"x" * large


def test_a_large_message_delivered_again_is_read_by_the_next_commit(broker_h, monkeypatch):
    """A large message back in line (abandoned) is read from the store by the next commit,
    off the loop, as the read-ahead's are (largeread.py); the line waits for it meanwhile, so
    nothing after it goes first."""
    from sbemu.partitions import largeread

    big = _large_records_from(monkeypatch)
    broker_h.send(msg(0, tail=big, size=len(big)), msg(1), msg(2))
    assert broker_h.broker.take_batch(MAIN, 2000, 1) == []  # the read-ahead's read is asked
    broker_h.commit()
    [(first, lock)] = broker_h.broker.take_batch(MAIN, 2000, 1)
    assert first.message_id == "m0"
    broker_h.broker.settle(lock.key, Outcome.abandon(None), 2000, lambda e: None)
    broker_h.commit()  # the abandon lands: the record is the store's again
    reads: list[object] = []
    real_get = broker_h.store.get

    def get(queue, seq, decode, *rest):
        got = real_get(queue, seq, decode, *rest)
        reads.append("ahead" if type(got) is largeread.Ahead else got.message_id)
        return got

    monkeypatch.setattr(broker_h.store, "get", get)
    assert broker_h.broker.take_batch(MAIN, 2000, 10) == []  # m1, m2 wait behind it
    assert broker_h.broker.take_batch(MAIN, 2000, 10) == []  # asked once, not twice
    assert reads == ["ahead"]
    broker_h.commit()  # reads it
    taken = broker_h.broker.take_batch(MAIN, 2000, 10)
    assert [(r.message_id, r.delivery_count) for r, _ in taken] == [("m0", 1), ("m1", 0), ("m2", 0)]
    assert taken[0][0].tail == big and reads == ["ahead"]


def test_a_large_message_back_in_line_and_gone_before_its_read_is_skipped(broker_h, monkeypatch):
    big = _large_records_from(monkeypatch)
    seqs = broker_h.send(msg(0, tail=big, size=len(big)), msg(1))
    assert broker_h.broker.take_batch(MAIN, 2000, 1) == []
    broker_h.commit()
    [(_rec, lock)] = broker_h.broker.take_batch(MAIN, 2000, 1)
    broker_h.broker.settle(lock.key, Outcome.abandon(None), 2000, lambda e: None)
    broker_h.commit()
    assert broker_h.broker.take_batch(MAIN, 2000, 10) == []  # its read is asked for
    assert broker_h.broker.remove(MAIN, seqs[0], 2000).message_id == "m0"  # gone meanwhile
    broker_h.commit()  # its read finds nothing to give the line
    taken = broker_h.broker.take_batch(MAIN, 2000, 10)
    assert [r.message_id for r, _ in taken] == ["m1"]
    assert broker_h.broker.queues[MAIN].read_alone == {}  # nothing kept for it


def test_a_session_s_large_message_is_read_by_the_next_commit(tmp_path, monkeypatch):
    """A session's next message, when large, is read by the next commit off the loop; the
    session's line waits for it (FIFO in the session), other sessions do not."""
    from test_backlog_index import SessionHarness, smsg

    big = _large_records_from(monkeypatch)
    h = SessionHarness(tmp_path / "s")
    large = msgspec.structs.replace(smsg(1, "a"), tail=big, size=len(big))
    h.send(large, smsg(2, "a"), smsg(3, "b"))
    lock_a = h.broker.accept_session(MAIN, "a", "owner", 1000)
    lock_b = h.broker.accept_session(MAIN, "b", "owner", 1000)
    assert h.broker.take_next(MAIN, 1000, True, lock_a) is None  # being read
    assert h.broker.take_next(MAIN, 1000, True, lock_b)[0].message_id == "m3"
    assert h.broker.take_next(MAIN, 1000, True, lock_a) is None  # still: m2 waits behind it
    h.commit()
    got = [h.broker.take_next(MAIN, 1000, True, lock_a)[0] for _ in range(2)]
    assert [r.message_id for r in got] == ["m1", "m2"] and got[0].tail == big
    assert h.broker.queues[MAIN].read_alone == {}


def test_a_large_deferred_message_is_read_by_the_next_commit_then_locked(broker_h, monkeypatch):
    """read_stored: a small record at once, a large one by the next commit (off the loop);
    take_deferred then locks the record as read (receive-by-sequence-number)."""
    big = _large_records_from(monkeypatch)
    seqs = broker_h.send(msg(0, tail=big, size=len(big)), msg(1))
    assert broker_h.broker.take_batch(MAIN, 2000, 10) == []  # the read-ahead's read
    broker_h.commit()
    taken = broker_h.broker.take_batch(MAIN, 2000, 10)
    assert [r.message_id for r, _ in taken] == ["m0", "m1"]
    for _rec, lock in taken:
        broker_h.broker.settle(lock.key, Outcome.defer(None), 2000, lambda e: None)
    broker_h.commit()
    got: dict[int, object] = {}
    broker_h.broker.reader.read_stored(MAIN, seqs[1], lambda rec: got.setdefault(seqs[1], rec))
    assert got[seqs[1]].message_id == "m1"  # small: at once
    broker_h.broker.reader.read_stored(MAIN, seqs[0], lambda rec: got.setdefault(seqs[0], rec))
    assert seqs[0] not in got  # large: the next commit reads it
    broker_h.commit()
    assert got[seqs[0]].tail == big
    rec, lock = broker_h.broker.take_deferred(MAIN, seqs[0], 3000, True, got[seqs[0]])
    assert rec.message_id == "m0" and lock is not None and lock.record is rec
    broker_h.broker.reader.read_stored(MAIN, 999, lambda rec: got.setdefault(999, rec))
    assert got[999] is None  # not stored


def test_a_large_read_that_fails_twice_leaves_the_line_to_try_again(broker_h, monkeypatch):
    """A large record the commit could not read, and the store could not give on the loop
    either: the commit's other completions still run (no exception into them) and the line's
    next take reads it again."""
    from sbemu.partitions import largeread
    from sbemu.partitions.store import StoreUnavailable

    big = _large_records_from(monkeypatch)
    broker_h.send(msg(0, tail=big, size=len(big)), msg(1))
    assert broker_h.broker.take_batch(MAIN, 2000, 1) == []  # the read-ahead's read
    broker_h.commit()
    [(_rec, lock)] = broker_h.broker.take_batch(MAIN, 2000, 1)
    broker_h.broker.settle(lock.key, Outcome.abandon(None), 2000, lambda e: None)
    broker_h.commit()

    def fails(value):
        raise ValueError("unreadable")

    real_get = broker_h.store.get
    failing = {"get": True}

    def get(queue, seq, decode, *rest):
        if failing["get"] and decode is not largeread.small_or_ahead:
            raise StoreUnavailable("the disk is gone")
        return real_get(queue, seq, decode, *rest)

    monkeypatch.setattr(largeread, "read", fails)
    monkeypatch.setattr(broker_h.store, "get", get)
    assert broker_h.broker.take_batch(MAIN, 2000, 10) == []  # its read is asked for
    acked: list[object] = []
    broker_h.broker.staging.after_commit(acked.append)  # another completion of that commit
    broker_h.commit()
    assert acked == [None]
    assert broker_h.broker.queues[MAIN].read_alone == {}
    failing["get"] = False
    monkeypatch.undo()
    big = _large_records_from(monkeypatch)
    assert broker_h.broker.take_batch(MAIN, 2000, 10) == []  # asked again
    broker_h.commit()
    taken = broker_h.broker.take_batch(MAIN, 2000, 10)
    assert [(r.message_id, r.delivery_count) for r, _ in taken] == [("m0", 1), ("m1", 0)]
