"""A purge done a slice at a time: every message of some entities deleted, each logged as
purged, while the event loop goes on serving everyone else between slices.

Done in one piece, a purge held the loop for as long as it took: 340 ms for 54,000 messages
of a plain queue, 121 ms for two 99 MB ones. A slice is PURGE_SLICE messages or PURGE_BYTES of
message, at least one message (a 99 MB one is a slice of its own). The caller steps the job
and yields to the loop between steps (admin/management.py); `registry.purge` runs it through
at once, for the callers that need it done in one go.

Each sub-queue is purged up to the last sequence number its partition had given when the job
began: a message sent meanwhile stays. A message locked when its slice comes loses its lock
(settling it fails with lock-lost), as in a purge done at once.
"""

from __future__ import annotations

from collections import deque

from .broker import PartitionBroker
from .completions import Done, join_completions
from .entity import Entity
from .records import LogEvent

PURGE_SLICE = 2_000  # messages a step (~12 ms of the loop for small ones on a developer machine)
PURGE_BYTES = 8 * 1024 * 1024  # message bytes a step, past its first message


class PurgeJob:
    """The purge of `entities` (their partitions healthy when it begins: check_healthy)."""

    def __init__(self, entities: list[Entity]) -> None:
        self.counts = {entity.name: 0 for entity in entities}
        self.brokers = [b for e in entities for b in e.partitions]
        # (entity name, broker, sub-queue, next sequence number, last one to purge)
        self._todo = deque(
            (entity.name, broker, queue, 0, broker.staging.next_sequence - 1)
            for entity in entities
            for broker in entity.partitions
            for queue in list(broker.queues)
        )

    def step(self, now_ms: int) -> bool:
        """Purge the next slice; True once every sub-queue is done."""
        left, left_bytes = PURGE_SLICE, PURGE_BYTES
        todo = self._todo
        while todo and left > 0 and left_bytes > 0:
            name, broker, queue, start, upto = todo[0]
            first = left == PURGE_SLICE  # (a step's first message goes whatever its size)
            most = (left, left_bytes, first)
            count, nbytes, then = purge_slice(broker, queue, start, upto, most, now_ms)
            self.counts[name] += count
            left -= count
            left_bytes -= nbytes
            if then is None:
                todo.popleft()
            else:
                todo[0] = (name, broker, queue, then, upto)
                break  # the slice is full (its next message is for the next step)
        return not todo

    def finish(self, done: Done) -> None:
        """`done` once the commits of every slice landed (the first error, or None)."""
        if not self.brokers:
            done(None)
            return
        part_done = join_completions(len(self.brokers), done)
        for broker in self.brokers:
            broker.after_commit(part_done)


def purge_slice(
    broker: PartitionBroker,
    name: str,
    start: int,
    upto: int,
    most: tuple[int, int, bool],
    now_ms: int,
) -> tuple[int, int, int | None]:
    """One slice of a purge on one partition: the messages of sub-queue `name` from sequence
    number `start` to `upto`; `most`: at most that many, and bytes of message (the first one
    whatever its size when the third is True: a step's first). Each is logged as purged and
    its lock ended (settling it fails with lock-lost), as PartitionBroker.purge_queue does.
    Returns (messages, their bytes, where the next slice starts; None: the sub-queue is done)."""
    most_count, most_bytes, first = most
    sq = broker.queues.get(name)
    if sq is None:
        return 0, 0, None  # (dropped meanwhile)
    transitions, unlock = broker.transitions, broker.lock_table.unlock
    count = nbytes = 0
    for rec in broker.reader.current_records(sq, start):
        seq = rec.sequence_number
        if seq > upto:
            return count, nbytes, None  # (sent after the purge began: it stays)
        if count >= most_count or (nbytes + rec.size > most_bytes and (count or not first)):
            return count, nbytes, seq
        lock = sq.locks.get(seq)
        if lock is not None:
            unlock(lock)
        transitions.remove(sq, rec)
        transitions.log(sq, LogEvent.PURGED, rec, now_ms)
        count += 1
        nbytes += rec.size
    return count, nbytes, None
