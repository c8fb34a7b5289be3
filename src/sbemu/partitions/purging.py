"""A purge done a slice at a time: every message of some entities deleted, each logged as
purged, while the event loop goes on serving everyone else between slices.

Done in one piece, a purge held the loop for as long as it took: 340 ms for 54,000 messages
of a plain queue, 121 ms for two 99 MB ones. A slice is PURGE_SLICE messages or PURGE_BYTES of
message, at least one message (a 99 MB one is a slice of its own). The caller steps the job
and yields to the loop between steps (admin/management.py); `registry.purge` runs it through
at once, for the callers that need it done in one go. A stepped job does not decode a large
message on the loop either: the next commit reads it off the loop (largeread.py), and the job
waits for it (`waiting`) before it purges it.

Each sub-queue is purged up to the last sequence number its partition had given when the job
began: a message sent meanwhile stays. A message locked when its slice comes loses its lock
(settling it fails with lock-lost), as in a purge done at once.
"""

from __future__ import annotations

from collections import deque

from .broker import PartitionBroker
from .completions import Done, join_completions
from .entity import Entity
from .largeread import Ahead
from .records import LogEvent, MessageRecord

PURGE_SLICE = 2_000  # messages a step (~12 ms of the loop for small ones on a developer machine)
PURGE_BYTES = 8 * 1024 * 1024  # message bytes a step, past its first message


class PurgeJob:
    """The purge of `entities` (their partitions healthy when it begins: check_healthy);
    `stepped`: large messages are read off the loop (the caller yields between steps)."""

    def __init__(self, entities: list[Entity], stepped: bool = True) -> None:
        self.counts = {entity.name: 0 for entity in entities}
        self.brokers = [b for e in entities for b in e.partitions]
        # (entity name, broker, sub-queue, next sequence number, last one to purge)
        self._todo = deque(
            (entity.name, broker, queue, 0, broker.staging.next_sequence - 1)
            for entity in entities
            for broker in entity.partitions
            for queue in list(broker.queues)
        )
        self._stepped = stepped
        # large messages read off the loop, by (partition, sub-queue, sequence number): the
        # record as stored (None: gone), or _READING until the commit read it
        self._read: dict[tuple[int, str, int], object] = {}

    @property
    def waiting(self) -> bool:
        """Whether the job waits for a large message being read (a commit's work)."""
        return _READING in self._read.values()

    def step(self, now_ms: int) -> bool:
        """Purge the next slice; True once every sub-queue is done."""
        left, left_bytes = PURGE_SLICE, PURGE_BYTES
        todo = self._todo
        while todo and left > 0 and left_bytes > 0:
            name, broker, queue, start, upto = todo[0]
            first = left == PURGE_SLICE  # (a step's first message goes whatever its size)
            count, nbytes, then = self._slice(
                broker, queue, start, upto, (left, left_bytes, first), now_ms
            )
            self.counts[name] += count
            left -= count
            left_bytes -= nbytes
            if then is None:
                todo.popleft()
            else:
                todo[0] = (name, broker, queue, then, upto)
                break  # the slice is full, or waits for a large message's read
        return not todo

    def finish(self, done: Done) -> None:
        """`done` once the commits of every slice landed (the first error, or None)."""
        if not self.brokers:
            done(None)
            return
        part_done = join_completions(len(self.brokers), done)
        for broker in self.brokers:
            broker.after_commit(part_done)

    def _slice(
        self,
        broker: PartitionBroker,
        name: str,
        start: int,
        upto: int,
        most: tuple[int, int, bool],
        now_ms: int,
    ) -> tuple[int, int, int | None]:
        """One slice on one partition: the messages of sub-queue `name` from sequence number
        `start` to `upto`; `most`: at most that many, and bytes of message (the first one
        whatever its size when the third is True: a step's first). Each is logged as purged
        and its lock ended (settling it fails with lock-lost), as PartitionBroker.purge_queue
        does. Returns (messages, their bytes, where the next slice starts; None: the
        sub-queue is done)."""
        most_count, most_bytes, first = most
        sq = broker.queues.get(name)
        if sq is None:
            return 0, 0, None  # (dropped meanwhile)
        transitions, unlock, reader = broker.transitions, broker.lock_table.unlock, broker.reader
        count = nbytes = 0
        for rec in reader.current_records(sq, start, Ahead if self._stepped else None):
            seq = rec.sequence_number
            if seq > upto:
                return count, nbytes, None  # (sent after the purge began: it stays)
            if type(rec) is Ahead:  # large, stored: read off the loop first
                got = self._large(broker, name, seq)
                if got is _READING:
                    return count, nbytes, seq
                rec = reader.get(sq, seq, got)  # (a change since first)
                if rec is None:
                    continue
            if count >= most_count or (nbytes + rec.size > most_bytes and (count or not first)):
                return count, nbytes, seq
            self._read.pop((broker.partition_id, name, seq), None)
            lock = sq.locks.get(seq)
            if lock is not None:
                unlock(lock)
            transitions.remove(sq, rec)
            transitions.log(sq, LogEvent.PURGED, rec, now_ms)
            count += 1
            nbytes += rec.size
        return count, nbytes, None

    def _large(self, broker: PartitionBroker, name: str, seq: int) -> object:
        """Large message `seq` as its commit read it; _READING until then (asked once)."""
        key = (broker.partition_id, name, seq)
        got = self._read.get(key, _MISSING)
        if got is _MISSING:
            self._read[key] = _READING

            def read(rec: MessageRecord | None) -> None:
                self._read[key] = rec

            broker.reader.read_large(name, seq, read)
            return _READING
        return got


_READING = object()
_MISSING = object()
