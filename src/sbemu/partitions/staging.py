"""The writes a partition has staged for its next commit, the overlay that shows them, and
the counters persisted with them.

Every change goes into one WriteBatch that the group commit (commits.py) takes once per turn
(take_commit) and writes in one LMDB transaction. Until that transaction lands, the records
it writes are read from the overlay, not the store: each entry is tagged with the batch
number that writes it, and dropped when that batch lands (or fails: then the store is the
truth again). The per-state counts and byte counts of the sub-queues go with the batch as
meta keys, written only when their value changed since the last batch that carried them.

The partition's counters are this room's own: the next sequence number (draw_sequence,
draw_sequences) and the partition log's next offset (every log write goes through here), each
persisted with the batch that moves it. A load hands them in (resume); nobody else writes them.

Lazy writes: the log record of a peek-lock delivery, or a
completion the client settled without waiting for the outcome, need not be durable before
anything is answered. They ride with the partition's next commit (a send's), or go at the
second timer tick that finds them waiting (commits.DirtyPartitions.tick_lazy), instead of
each costing a commit of its own (with a send, three commits per message at low rates). A
batch past LAZY_MAX_WRITES log records commits at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .completions import Done
from .largeread import NOT_READ
from .records import (
    LogEvent,
    MessageRecord,
    MessageState,
    encode_log_after,
    encode_log_run,
    encode_staged,
    log_prefix,
)
from .stats import PartitionStats
from .subqueue import Overlay, SubQueue
from .writebatch import WriteBatch

if TYPE_CHECKING:
    from collections.abc import Sequence

LAZY_MAX_WRITES = 512  # log records of lazy writes after which the partition commits anyway
# Enum members as module constants for the per-message loop of put_new (a global is cheaper
# than an attribute of the enum class).
_ACTIVE = MessageState.ACTIVE
_SCHEDULED = MessageState.SCHEDULED
_ENQUEUED_EVENT = LogEvent.ENQUEUED
_SCHEDULED_EVENT = LogEvent.SCHEDULED
_DEADLETTERED_EVENT = LogEvent.DEADLETTERED


class Staging:
    """One partition's staged writes: the batch, its completions, the overlay, the counters.

    `mark_dirty(owner)` asks for a commit in the next turn; `mark_lazy(owner)` (None: every
    write is committed at once) for one with the partition's next commit or timer tick.
    """

    def __init__(
        self,
        owner: Any,
        *,
        namespace: str,
        entity: str,
        partition_id: int,
        sequence_base: int,
        stats: PartitionStats,
        mark_dirty: Callable[[Any], None],
        mark_lazy: Callable[[Any], None] | None,
    ) -> None:
        self._owner = owner
        self._mark_dirty = mark_dirty
        self._mark_lazy = mark_lazy
        self.namespace = namespace
        self.entity = entity
        self.partition_id = partition_id
        self.sequence_base = sequence_base  # the partition id in the top bits [P11]
        self.stats = stats
        self.log_bodies = False  # put message bodies in the partition log (serve --log-bodies)
        self.batch = WriteBatch()
        self.callbacks: list[Done] = []
        # Records changed (None: deleted) but not yet committed, by (sub-queue, seq): read
        # before the store. Tagged with the number of the batch that writes them.
        self.overlay: Overlay = {}
        # Which batch the writes staged now go into (read only outside this class): it
        # changes each time take_commit() hands the gathered writes to the committer.
        self.batch_number = 0
        self._batch_keys: dict[int, list[tuple[str, int]]] = {}  # overlay keys by batch
        self._taken: list[int] = []  # batch numbers handed to the committer, oldest first
        self._counts_dirty: set[SubQueue] = set()
        # The counter values the taken batches write (meta key -> value): take_commit() leaves
        # out a counter whose value is already on its way to the store, one LMDB put (and GIL
        # round trip of the commit thread) fewer per unchanged counter. Forgotten with any
        # uncommitted change (a failed commit, a reload): then every dirty counter is written.
        self._counts_sent: dict[str, int] = {}
        # The partition's reloads from its store (reset()): a completion staged before one
        # leaves the counts to the store (read only outside this class).
        self.reloads = 0
        self._next_seq = 1  # the partition's next sequence number (without its base)
        self._next_offset = 0  # the partition log's next offset

    # ---------------------------------------------------------------- the counters
    def resume(self, next_sequence: int, next_offset: int) -> None:
        """Take the counters a load read from the store (PartitionLoader.load): the next
        sequence number (without the partition's base) and the log's next offset."""
        self._next_seq = next_sequence
        self._next_offset = next_offset

    @property
    def next_sequence(self) -> int:
        """The sequence number the next draw gives (the partition's base included)."""
        return self.sequence_base | self._next_seq

    def draw_sequence(self) -> int:
        """Draw the next sequence number (persisted with the staged batch)."""
        return self.draw_sequences(1)

    def draw_sequences(self, count: int) -> int:
        """Draw `count` consecutive sequence numbers (persisted with the staged batch);
        returns the first."""
        first = self._next_seq
        self._next_seq = nxt = first + count
        self.batch.meta["next_sequence"] = nxt
        return self.sequence_base | first

    def counts_changed(self, sq: SubQueue) -> None:
        """A sub-queue's counts or byte count changed: they go with the next batch."""
        self._counts_dirty.add(sq)

    # ---------------------------------------------------------------- staging
    def put(self, sq: SubQueue, rec: MessageRecord, lazy: bool = False) -> None:
        """Write a visible message: seen at once through the overlay, stored at the commit."""
        seq = rec.sequence_number
        self.batch.put(sq.name, seq, encode_staged(rec))
        self.remember(sq.name, seq, rec)
        if seq in sq.buffer:
            sq.buffer[seq] = rec
        self.dirty(lazy)

    def delete(self, sq: SubQueue, seq: int, lazy: bool = False) -> None:
        """Delete a stored message at the commit (gone at once through the overlay)."""
        self.batch.delete(sq.name, seq)
        self.remember(sq.name, seq, None)
        sq.buffer.pop(seq, None)
        self.dirty(lazy)

    def delete_run(self, sq: SubQueue, seqs: Sequence[int], lazy: bool = False) -> None:
        """delete() for each of `seqs` (messages of `sq`), the commit request once per run."""
        name = sq.name
        self.batch.delete_many(name, seqs)
        self.forget_many(name, seqs)
        buffer = sq.buffer
        if buffer:
            for seq in buffer.keys() & seqs:  # messages read ahead (not those locked)
                del buffer[seq]
        self.dirty(lazy)

    def remember(self, queue: str, seq: int, rec: MessageRecord | None) -> None:
        """Show a staged record (None: deleted) through the overlay until its batch lands."""
        key = (queue, seq)
        number = self.batch_number
        self.overlay[key] = (rec, number)
        keys = self._batch_keys.get(number)
        if keys is None:
            keys = self._batch_keys[number] = []
        keys.append(key)

    def forget_many(self, queue: str, seqs: Sequence[int]) -> None:
        """remember(queue, seq, None) for each of `seqs`: deleted, through the overlay."""
        number = self.batch_number
        keys = self._batch_keys.get(number)
        if keys is None:
            keys = self._batch_keys[number] = []
        new = [(queue, seq) for seq in seqs]
        keys.extend(new)
        self.overlay.update(dict.fromkeys(new, (None, number)))

    def log_run(
        self,
        queue: str,
        event: LogEvent,
        recs: Sequence[MessageRecord],
        now_ms: int,
        reason: str | None = None,
        lazy: bool = False,
    ) -> None:
        """Log one event for each of `recs` (messages of one sub-queue), in order: a run of
        them as one run record (records.encode_log_run: one encoding and one LMDB put for the
        run, the receive path's deliveries and completions), one alone as a plain record."""
        offset = self._next_offset
        n = len(recs)
        if n > 1:
            site = (self.namespace, self.entity, queue, self.partition_id)
            value = encode_log_run(site, offset, event, recs, now_ms, reason, self.log_bodies)
            self.batch.log.append((offset, value))
        elif n:
            prefix = log_prefix(self.namespace, self.entity, queue, self.partition_id)
            value = encode_log_after(
                prefix, offset, event, recs[0], now_ms, reason, self.log_bodies
            )
            self.batch.log.append((offset, value))
        offset += n
        self._next_offset = offset
        self.stats.events[event] += len(recs)
        if event is LogEvent.DELIVERED:
            self.stats.outgoing_bytes += sum([r.size for r in recs])
        self.batch.meta["next_log_offset"] = offset
        self.dirty(lazy)

    def put_new(self, copies: Sequence[tuple[SubQueue, MessageRecord]], now_ms: int) -> None:
        """Store each new message (one copy in one sub-queue, in order) and log its arrival:
        enqueued or scheduled, then dead-lettered when its route sent it to a dead-letter
        queue (the send path: the log prefix looked up once per sub-queue, the events counted
        once per call). Nothing goes into the overlay here: Transitions.enqueue shows there
        the copies it puts in line before their commit."""
        batch = self.batch
        put_op, put_log = batch.ops.append, batch.log.append
        events, with_body = self.stats.events, self.log_bodies
        prefixes: dict[str, bytes] = {}
        offset = self._next_offset
        enqueued = 0  # ENQUEUED events, counted once for the call
        for sq, rec in copies:
            name = sq.name
            put_op((0, name, rec.sequence_number, encode_staged(rec)))
            prefix = prefixes.get(name)
            if prefix is None:
                prefix = prefixes[name] = log_prefix(
                    self.namespace, self.entity, name, self.partition_id
                )
            state = rec.state
            if state is _ACTIVE:
                event = _ENQUEUED_EVENT
                enqueued += 1
            else:
                event = _SCHEDULED_EVENT if state == _SCHEDULED else _ENQUEUED_EVENT
                events[event] += 1
            put_log((offset, encode_log_after(prefix, offset, event, rec, now_ms, None, with_body)))
            offset += 1
            reason = rec.dead_letter_reason
            if reason is not None:
                events[_DEADLETTERED_EVENT] += 1
                put_log((offset, encode_log_after(
                    prefix, offset, _DEADLETTERED_EVENT, rec, now_ms, reason, with_body
                )))  # fmt: skip
                offset += 1
        if enqueued:
            events[_ENQUEUED_EVENT] += enqueued
        if copies:
            self._next_offset = offset
            batch.meta["next_log_offset"] = offset

    def after_commit(self, done: Done, lazy: bool = False) -> None:
        """Run `done` once the writes queued so far are committed."""
        self.callbacks.append(done)
        self.dirty(lazy)

    def read_later(
        self,
        queue: str,
        seq: int,
        decode: Callable[[object], object],
        then: Callable[[object], None],
    ) -> None:
        """Have the next commit read record `seq` of `queue` after its writes, on its thread
        (largeread.py), and give `then` what it read, on the loop."""
        batch = self.batch
        batch.reads.append((queue, seq, decode))

        def done(error: Exception | None) -> None:
            then(NOT_READ if error is not None else batch.read.get((queue, seq), NOT_READ))

        self.after_commit(done)

    def dirty(self, lazy: bool = False) -> None:
        """Ask for a commit: in the next turn, or (`lazy`: nobody waits for these writes) with
        the partition's next commit or timer tick, until LAZY_MAX_WRITES log records gather."""
        mark_lazy = self._mark_lazy
        log = self.batch.log  # its offsets are consecutive: the events it holds, by the first
        if (
            lazy
            and mark_lazy is not None
            and (not log or self._next_offset - log[0][0] < LAZY_MAX_WRITES)
        ):
            mark_lazy(self._owner)
        else:
            self._mark_dirty(self._owner)

    # ---------------------------------------------------------------- the commit
    def oldest_unlanded(self) -> int:
        """The number of the oldest batch whose writes are not in the store yet: the oldest
        one with the committer, else the one being staged."""
        taken = self._taken
        return taken[0] if taken else self.batch_number

    def has_landed(self, batch: int) -> bool:
        """Whether batch `batch` (a batch_number) is done: handed to the committer and its
        commit finished (or failed, and the store is the truth again)."""
        return batch < self.oldest_unlanded()

    def committing(self) -> bool:
        """Whether a batch is with the committer (its commit not finished yet)."""
        return bool(self._taken)

    def take_commit(self) -> tuple[WriteBatch, list[Done]] | None:
        """Hand the pending writes and their completions to the committer (None: nothing)."""
        if self._counts_dirty:
            meta, sent = self.batch.meta, self._counts_sent
            for sq in self._counts_dirty:
                name = sq.name
                for k, n in zip("adsb", (*sq.counts, max(sq.bytes, 0)), strict=True):
                    key = f"n:{name}:{k}"
                    if sent.get(key) != n:
                        meta[key] = sent[key] = n
            self._counts_dirty.clear()
        if not self.batch and not self.callbacks:
            return None
        batch, callbacks = self.batch, self.callbacks
        self.batch, self.callbacks = WriteBatch(), []
        self._taken.append(self.batch_number)
        self.batch_number += 1
        return batch, callbacks

    def landed(self) -> set[str] | None:
        """The oldest taken batch is done: its overlay entries are in the store now (or, if
        it failed, the store is the truth again). Returns the sub-queues it wrote a record
        to (None: no batch was in flight)."""
        if not self._taken:
            return None
        number = self._taken.pop(0)
        overlay = self.overlay
        touched: set[str] = set()
        for key in self._batch_keys.pop(number, ()):
            hit = overlay.get(key)
            if hit is not None and hit[1] == number:
                del overlay[key]
                if hit[0] is not None:
                    touched.add(key[0])
        return touched

    def forget_pending(self) -> list[Done]:
        """Drop the writes gathered since the last taken batch; returns their completions."""
        pending = self.callbacks
        self.batch, self.callbacks = WriteBatch(), []
        self._counts_dirty.clear()
        self._counts_sent.clear()
        return pending

    def reset(self) -> list[Done]:
        """Forget every uncommitted change and the batches in flight (the partition reloads
        its store; resume() follows); returns the completions of the writes not yet taken."""
        self.reloads += 1
        pending = self.forget_pending()
        self.overlay.clear()
        self._batch_keys.clear()
        self._taken.clear()
        return pending
