"""A purge done a slice at a time (partitions/purging.py): each step purges at most a slice,
messages sent after the purge began stay, a message locked when its slice comes loses its
lock, and the counts, the log and a restart agree with a purge done at once. Real LMDB."""

from __future__ import annotations

import pytest
from routing_harness import NOW, RouterHarness, message, queue_spec

from sbemu.errors import MessageLockLost
from sbemu.partitions import COMPLETE, message_counts, purging
from sbemu.partitions.records import LogEvent, decode_log
from sbemu.partitions.specs import MAIN


def _purged_events(entity) -> int:
    return sum(
        decode_log(v)["event"] == LogEvent.PURGED.value
        for broker in entity.partitions
        for _, v in broker.store.read_log(0, 1_000_000)
    )


def test_a_purge_goes_a_slice_a_step_and_spares_what_came_after_it(tmp_path, monkeypatch):
    monkeypatch.setattr(purging, "PURGE_SLICE", 1_000)
    h = RouterHarness(tmp_path)
    spec = queue_spec(partitions=2)
    entity = h.add(spec)
    h.send(entity, *[message(f"m{i}") for i in range(4_500)])
    locked_broker, taken = next(
        (b, got) for b in entity.partitions if (got := b.take_next(MAIN, NOW, True)) is not None
    )
    _rec, lock = taken

    job = h.router.start_purge(spec.namespace, spec.name)
    steps = 0
    while not job.step(NOW):
        steps += 1
        assert sum(job.counts.values()) == 1_000 * steps  # a slice a step, no more
        if steps == 1:
            h.send(entity, message("late-1"), message("late-2"))  # after the purge began
        h.commit()  # the loop goes on between steps: commits land meanwhile
    assert steps == 4 and job.counts == {spec.name: 4_500}
    done: list[Exception | None] = []
    job.finish(done.append)
    assert done == []  # after the commits
    h.commit()
    assert done == [None]

    with pytest.raises(MessageLockLost):
        locked_broker.settle(lock.key, COMPLETE, NOW, lambda e: None)
    assert sorted(rec.message_id for rec, _ in h.peek(entity)) == ["late-1", "late-2"]
    assert message_counts(entity)["active"] == 2
    assert _purged_events(entity) == 4_500
    h.reopen(spec)
    entity = h.router.entities[(spec.namespace, spec.name)]
    assert sorted(rec.message_id for rec, _ in h.peek(entity)) == ["late-1", "late-2"]


def test_a_large_message_is_a_slice_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(purging, "PURGE_BYTES", 5_000)
    h = RouterHarness(tmp_path)
    spec = queue_spec(partitions=1)
    entity = h.add(spec)
    h.send(entity, message("a", size=20), message("big", size=8_000), message("b", size=20))
    job = h.router.start_purge(spec.namespace, spec.name)
    per_step = []
    while True:
        before = job.counts[spec.name]
        finished = job.step(NOW)
        per_step.append(job.counts[spec.name] - before)
        if finished:
            break
    # "a" (the big one would pass the bytes), "big" (a step's first: whatever its size), "b"
    assert per_step == [1, 1, 1]
