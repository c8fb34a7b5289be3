"""How a stored message changes: every move of a message between states and sub-queues.

A stored message is ACTIVE (ready or locked), DEFERRED or SCHEDULED (records.MessageState)
in one sub-queue. Each change below stages its writes (staging.py), keeps the sub-queue's
counts and byte counts, the partition's stored bytes (health.py) and the timers
(deadlines.py) in step, logs its event, and puts the message in line where it becomes ready:

- removed: completed, received-and-deleted, expired, purged, forwarded;
- stored new in a sub-queue: dead-lettered in, activated, fanned out to a subscription;
- redelivered: a lock ended (abandon, lock expiry): delivery count + 1, dead-lettered at
  MaxDeliveryCount;
- expired: dead-lettered or dropped [Azure: TTL];
- activated: a scheduled message is due and is enqueued anew with a new sequence number [D3]
  (a topic's is fanned out through its subscriptions' rules then).

The broker (the front) decides when; this module is what happens. `on_ready(sub-queue)` tells
the router a sub-queue has messages in line; `fan_out(record)` (topics) names the routes of a
due scheduled message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .completions import Done
from .deadlines import Deadlines
from .health import Health
from .records import IncomingMessage, LogEvent, MessageRecord, MessageState
from .staging import Staging
from .stats import PartitionStats
from .subqueue import SubQueue

MAX_DELIVERY_COUNT_REASON = "MaxDeliveryCountExceeded"
TTL_EXPIRED_REASON = "TTLExpiredException"
# A topic partition keeps scheduled messages here, not yet copied to any subscription: they
# are fanned out through the subscriptions' rules only when they fire [Azure: scheduling].
SCHEDULED_QUEUE = "$scheduled"
# Enum members as module constants for the per-message loops: `MessageState.ACTIVE` is an
# attribute lookup on the enum class (~900 instructions on CPython 3.11), a global ~50.
_ACTIVE = MessageState.ACTIVE
_SCHEDULED = MessageState.SCHEDULED


@dataclass(frozen=True, slots=True)
class Route:
    """Where one copy of an incoming message goes (a topic sends one per matching rule)."""

    queue: str
    overrides: dict[str, bytes] | None = None  # encoded application-property changes
    dead_letter_reason: str | None = None  # set when the copy goes straight to a DLQ
    dead_letter_description: str | None = None


def merge_overrides(rec: MessageRecord, overrides: dict[str, bytes] | None) -> None:
    """Apply property changes (abandon/defer/dead-letter) on top of earlier ones."""
    if overrides:
        merged = dict(rec.property_overrides or {})
        merged.update(overrides)
        rec.property_overrides = merged


def restamp(sq: SubQueue, rec: MessageRecord, seq: int, now_ms: int) -> MessageRecord:
    """A copy of a stored message enqueued anew in `sq`: new sequence number, active,
    delivery count 0, TTL capped by the sub-queue's default and counted from now."""
    new = rec.copy()
    new.sequence_number = seq
    new.enqueued_time_ms = now_ms
    new.state = MessageState.ACTIVE
    new.delivery_count = 0
    new.scheduled_enqueue_time_ms = None
    new.dead_letter_reason = new.dead_letter_description = new.dead_letter_source = None
    ttl = rec.ttl_ms
    default = sq.settings.default_ttl_ms
    if default is not None and (ttl is None or ttl == 0 or ttl > default):
        ttl = default
    new.ttl_ms = ttl
    new.expires_at_ms = (now_ms + ttl) if ttl is not None else None
    return new


class Transitions:
    """The changes of one partition's stored messages (see the module comment)."""

    def __init__(
        self,
        queues: dict[str, SubQueue],
        staging: Staging,
        deadlines: Deadlines,
        health: Health,
        stats: PartitionStats,
    ) -> None:
        self.queues = queues
        self.staging = staging
        self.deadlines = deadlines
        self.health = health
        self.stats = stats
        self.on_ready: Callable[[str], None] = lambda queue: None
        self.fan_out: Callable[[MessageRecord], list[Route]] | None = None
        # Whether a sub-queue forwards (auto-forwarding): its new messages wait for their
        # commit to join the line, since the forwarder's exactly-once steps assume a stored
        # message (see enqueue).
        self.forwards: Callable[[str], bool] = lambda queue: False

    # ---------------------------------------------------------------- the bookkeeping
    def count(self, sq: SubQueue, state: MessageState, delta: int, nbytes: int = 0) -> None:
        """Adjust a sub-queue's count of one state (and its byte count); persisted with the
        next commit."""
        sq.counts[state] += delta
        sq.bytes += nbytes
        self.health.add_stored(nbytes)
        self.staging.counts_changed(sq)

    def remove(self, sq: SubQueue, rec: MessageRecord, lazy: bool = False) -> None:
        """Delete a stored message from its sub-queue (and its timer)."""
        self.staging.delete(sq, rec.sequence_number, lazy)
        self.deadlines.remove(sq, rec)
        self.count(sq, rec.state, -1, -rec.size)
        sq.removed(rec)

    def remove_run(self, sq: SubQueue, recs: Sequence[MessageRecord], lazy: bool = False) -> None:
        """remove() for each of `recs` (stored messages of `sq`), the counts once per run."""
        seqs = [rec.sequence_number for rec in recs]
        self.staging.delete_run(sq, seqs, lazy)
        self.deadlines.remove_run(sq, recs)
        counts = sq.counts
        nbytes = 0
        for rec in recs:
            counts[rec.state] -= 1
            nbytes += rec.size
        sq.removed_run(recs, seqs)
        sq.bytes -= nbytes
        self.health.add_stored(-nbytes)
        self.staging.counts_changed(sq)

    def store_new(self, target: SubQueue, rec: MessageRecord, timer: bool) -> None:
        """Stage an active message new to `target` (moved, activated, fanned out)."""
        self.staging.put(target, rec)
        self.count(target, MessageState.ACTIVE, 1, rec.size)
        if timer:
            self.deadlines.add(target, rec)
        if target.settings.requires_session:
            target.count_session(rec, 1)

    def log(
        self,
        sq: SubQueue,
        event: LogEvent,
        rec: MessageRecord,
        now_ms: int,
        reason: str | None = None,
        lazy: bool = False,
    ) -> None:
        """Log one event of one message (see Staging.log_run)."""
        self.staging.log_run(sq.name, event, (rec,), now_ms, reason, lazy)

    # ---------------------------------------------------------------- new messages
    def enqueue(
        self,
        messages: list[IncomingMessage],
        routes: list[list[Route]],
        now_ms: int,
        done: Done,
    ) -> list[int | None]:
        """Stage each message in the sub-queues its routes name (see PartitionBroker.enqueue).

        A message is acknowledged once its commit lands, but it may be delivered sooner: when
        the sub-queue's read-ahead has caught up with the store and nothing staged before it
        is still on its way, it joins the read-ahead at once, so a waiting receiver gets it
        while the commit syncs (as RabbitMQ and Artemis deliver a durable message before
        confirming it). What that cannot break: an acknowledged send is committed; a
        settlement of the message is staged after it, so it commits after it (one commit in
        flight per partition, in order) and is answered only then. If the commit fails, the
        sender gets the error and the partition reloads from its store before it serves
        again, where the message never was: a receiver that got it meanwhile loses its lock
        (at least once: the sender sends again). Every other message (a session's, a
        scheduled one, one behind a message still on its way, one in a sub-queue that
        forwards) joins its line as the commit lands (on_commit)."""
        # The hot path of every send: each step below runs once per call over the call's
        # copies (counts, counters and log prefixes once per call, not per message).
        copies, numbers = self._copies(messages, routes, now_ms)
        staging = self.staging
        staging.put_new(copies, now_ms)
        staged, placed = self._index_new(copies)
        staging.dirty()
        reloads = staging.reloads
        for name in {sq.name for sq, _ in placed}:
            self.on_ready(name)
        staging.after_commit(self._on_commit(messages, staged, placed, reloads, done))
        return numbers

    def _copies(
        self, messages: list[IncomingMessage], routes: list[list[Route]], now_ms: int
    ) -> tuple[list[tuple[SubQueue, MessageRecord]], list[int | None]]:
        """The records of a call's messages, one per route (in order), and each message's
        sequence number (None: routed nowhere). Copies of a message share its number, but a
        second copy in one sub-queue, which gets a number of its own."""
        staging = self.staging
        seq = start = staging.next_sequence
        queues, new_record = self.queues, self.new_record
        copies: list[tuple[SubQueue, MessageRecord]] = []
        numbers: list[int | None] = []
        for msg, targets in zip(messages, routes, strict=True):
            if not targets:
                numbers.append(None)
                continue
            first = seq
            seq += 1
            numbers.append(first)
            used: set[str] | None = set() if len(targets) > 1 else None
            for route in targets:
                name = route.queue
                copy_seq = first
                if used is not None:  # a second copy in one sub-queue: a number of its own
                    if name in used:
                        copy_seq = seq
                        seq += 1
                    else:
                        used.add(name)
                sq = queues[name]
                rec = new_record(sq, msg, copy_seq, now_ms)
                if route.overrides:
                    rec.property_overrides = dict(route.overrides)
                if route.dead_letter_reason is not None:
                    rec.dead_letter_reason = route.dead_letter_reason
                    rec.dead_letter_description = route.dead_letter_description
                copies.append((sq, rec))
        staging.draw_sequences(seq - start)  # the numbers given out above
        return copies, numbers

    def _index_new(
        self, copies: list[tuple[SubQueue, MessageRecord]]
    ) -> tuple[list[tuple[SubQueue, MessageRecord]], list[tuple[SubQueue, MessageRecord]]]:
        """Count the staged copies, set their timers, and put in line at once each that may
        join it before its commit (see enqueue). Returns (those that join their line when
        the commit lands, those in line already)."""
        staging = self.staging
        add_deadline = self.deadlines.add
        added: dict[tuple[SubQueue, MessageState], list[int]] = {}
        derived: int | None = None  # the first expiry of the default-TTL messages staged
        active = _ACTIVE
        staged: list[tuple[SubQueue, MessageRecord]] = []
        placed: list[tuple[SubQueue, MessageRecord]] = []
        for sq, rec in copies:
            state = rec.state
            acc = added.get((sq, state))
            if acc is None:
                added[(sq, state)] = [1, rec.size]
            else:
                acc[0] += 1
                acc[1] += rec.size
            at = rec.expires_at_ms
            if state is active and at is not None and rec.ttl_ms == sq.settings.default_ttl_ms:
                if derived is None or at < derived:  # derived expiry: no timer stored
                    derived = at
            elif at is not None or state is not active:  # (active, no expiry: no timer)
                add_deadline(sq, rec)
            if state is active and not sq.settings.requires_session:
                # In line at once when nothing staged before it is still on its way and the
                # read-ahead has caught up with the store.
                name = sq.name
                if not sq.awaiting_commit and not self.forwards(name) and sq.join_read_ahead(rec):
                    # seen through the overlay until its batch lands (a release, say, puts it
                    # back in line by number: the store does not have it yet)
                    staging.remember(name, rec.sequence_number, rec)
                    sq.early_batch = staging.batch_number
                    placed.append((sq, rec))
                    continue
                sq.awaiting_commit += 1  # in line when its commit lands (on_commit)
            staged.append((sq, rec))
        for (sq, state), (count, size) in added.items():
            self.count(sq, state, count, size)
        if derived is not None:
            self.deadlines.derived(derived)
        return staged, placed

    def _on_commit(
        self,
        messages: list[IncomingMessage],
        staged: list[tuple[SubQueue, MessageRecord]],
        placed: list[tuple[SubQueue, MessageRecord]],
        reloads: int,
        done: Done,
    ) -> Done:
        """What enqueue runs once the commit of `messages` lands (or fails)."""
        staging = self.staging

        def on_commit(error: Exception | None) -> None:
            if error is None:
                stats = self.stats
                stats.incoming += len(messages)
                stats.incoming_bytes += sum([m.size for m in messages])
                touched: set[str] = set()
                for sq, rec in staged:
                    touched.add(sq.name)
                    if sq.settings.requires_session:
                        sq.count_session(rec, 1)
                        if rec.state == _ACTIVE:
                            sq.make_ready(rec)
                    elif rec.state is not _ACTIVE:
                        sq.more_in_store = True  # the store now holds it past the scan
                    else:
                        sq.awaiting_commit -= 1
                        # a receiver keeping up gets it straight from its commit; else the scan
                        if not sq.join_read_ahead(rec):
                            sq.more_in_store = True
                for name in touched:
                    self.on_ready(name)
            elif staging.reloads == reloads:  # (after a reload the counts come from the store)
                for sq, rec in staged:
                    self.count(sq, rec.state, -1, -rec.size)
                    if rec.state is _ACTIVE and not sq.settings.requires_session:
                        sq.awaiting_commit -= 1
                # (the messages put in line at once stay in the read-ahead until the reload
                # every failed commit leads to, before the partition serves again)
                for sq, rec in placed:
                    self.count(sq, rec.state, -1, -rec.size)
            done(error)

        return on_commit

    @staticmethod
    def new_record(sq: SubQueue, msg: IncomingMessage, seq: int, now_ms: int) -> MessageRecord:
        # The effective TTL is the smaller of the message's and the entity's default.
        ttl = msg.ttl_ms
        default = sq.settings.default_ttl_ms
        if default is not None and (ttl is None or ttl == 0 or ttl > default):
            ttl = default
        scheduled = msg.scheduled_enqueue_time_ms
        state = _ACTIVE
        if scheduled is not None and scheduled > now_ms:
            state = _SCHEDULED
        else:
            scheduled = None
        start = scheduled if scheduled is not None else now_ms
        return MessageRecord(  # positional (one call per message): the fields in their order
            seq,
            now_ms,
            state,
            0,
            msg.message_id,
            msg.session_id,
            msg.partition_key,
            ttl,
            (start + ttl) if ttl is not None else None,
            msg.durable,
            msg.priority,
            msg.annotation_count,
            msg.annotations,
            msg.tail,
            msg.size,
            scheduled,
            None,
            None,
            None,
            None,  # dead-letter reason, description, source; overrides
            msg.original_sequence_number,
            msg.properties_span,
            msg.body_span,
            msg.transfer_hops,
            msg.first_acquirer,
        )

    # ---------------------------------------------------------------- the moves
    def consume(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """Receive-and-delete: the message is consumed when put on the wire [contract 4.2]."""
        self.remove(sq, rec)
        self.log(sq, LogEvent.DELIVERED, rec, now_ms)
        self.log(sq, LogEvent.COMPLETED, rec, now_ms)

    def expire(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """A message outlived its TTL: dead-letter it or drop it."""
        sq.unready(rec)
        if sq.settings.dead_letter_on_expiration and sq.settings.dead_letter_queue:
            self.move_to_dlq(
                sq, rec, now_ms, TTL_EXPIRED_REASON, "The message expired and was dead lettered."
            )
        else:
            self.remove(sq, rec)
            self.log(sq, LogEvent.EXPIRED, rec, now_ms)

    def move_to_dlq(
        self,
        sq: SubQueue,
        rec: MessageRecord,
        now_ms: int,
        reason: str | None,
        description: str | None,
        overrides: dict[str, bytes] | None = None,
    ) -> None:
        """Move a message to its sub-queue's dead-letter queue."""
        assert sq.settings.dead_letter_queue is not None
        dlq = self.queues[sq.settings.dead_letter_queue]
        sq.unready(rec)
        self.remove(sq, rec)
        moved = rec.copy()
        moved.state = MessageState.ACTIVE
        moved.dead_letter_reason = reason
        moved.dead_letter_description = description
        moved.dead_letter_source = None
        merge_overrides(moved, overrides)
        self.store_new(dlq, moved, timer=False)
        dlq.make_ready(moved)
        self.log(sq, LogEvent.DEADLETTERED, rec, now_ms, reason)
        self.on_ready(dlq.name)

    def redeliver(
        self,
        sq: SubQueue,
        rec: MessageRecord,
        now_ms: int,
        overrides: dict[str, bytes] | None,
        event: LogEvent,
    ) -> None:
        """A lock ended without a settlement that removes the message: delivery count + 1,
        back in line (a deferred message stays deferred), or dead-lettered at the limit. A
        dead-letter queue counts no deliveries: a message abandoned there keeps its count, as
        Azure's does (Microsoft's batchReceiver.spec "Abandon a message received from dead
        letter queue" receives it again with deliveryCount 0)."""
        if sq.settings.dead_letter_queue is not None:
            rec.delivery_count += 1
        merge_overrides(rec, overrides)
        limit = sq.settings.max_delivery_count
        if rec.state == MessageState.DEFERRED:
            # A deferred message stays deferred when its lock ends [Azure: deferral].
            self.staging.put(sq, rec)
            self.log(sq, event, rec, now_ms)
            return
        if limit is not None and rec.delivery_count >= limit and sq.settings.dead_letter_queue:
            self.log(sq, event, rec, now_ms)
            self.move_to_dlq(
                sq,
                rec,
                now_ms,
                MAX_DELIVERY_COUNT_REASON,
                f"Message could not be consumed after {limit} delivery attempts.",
            )
            return
        self.staging.put(sq, rec)
        self.log(sq, event, rec, now_ms)
        sq.make_ready(rec)
        self.on_ready(sq.name)

    def forward_out(
        self,
        sq: SubQueue,
        rec: MessageRecord,
        now_ms: int,
        to_queue: str | None,
        reason: str | None,
        description: str | None,
    ) -> None:
        """A message left a forwarding sub-queue: removed (forwarded), or moved to `to_queue`
        (the transfer dead-letter queue) with a dead-letter reason."""
        sq.unready(rec)
        self.remove(sq, rec)
        if to_queue is None:
            self.log(sq, LogEvent.COMPLETED, rec, now_ms, reason)
            return
        target = self.queues[to_queue]
        moved = rec.copy()
        moved.state = MessageState.ACTIVE
        moved.dead_letter_reason = reason
        moved.dead_letter_description = description
        self.store_new(target, moved, timer=False)
        target.make_ready(moved)
        self.log(sq, LogEvent.DEADLETTERED, rec, now_ms, reason)
        self.on_ready(to_queue)

    def activate(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """A scheduled message is due: it is enqueued anew with a new sequence number [D3]."""
        if sq.name == SCHEDULED_QUEUE and self.fan_out is not None:
            self._fan_out(sq, rec, now_ms)
            return
        self.remove(sq, rec)
        new = rec.copy()
        new.sequence_number = self.staging.draw_sequence()
        new.state = MessageState.ACTIVE
        new.enqueued_time_ms = now_ms
        new.scheduled_enqueue_time_ms = rec.scheduled_enqueue_time_ms
        self.store_new(sq, new, timer=True)
        self.log(sq, LogEvent.ACTIVATED, new, now_ms)
        sq.make_ready(new)
        self.on_ready(sq.name)

    def _fan_out(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """A topic's scheduled message is due: copy it to the subscriptions whose rules match
        now, each copy enqueued anew (one new sequence number shared by the copies), in the
        same transaction that removes it from the scheduled sub-queue."""
        assert self.fan_out is not None
        self.remove(sq, rec)
        self.log(sq, LogEvent.ACTIVATED, rec, now_ms)
        routes = self.fan_out(rec)
        if not routes:
            return
        draw = self.staging.draw_sequence
        seq = draw()
        used: set[str] = set()
        for route in routes:
            target = self.queues.get(route.queue)
            if target is None:
                continue
            copy_seq = seq
            if route.queue in used:
                copy_seq = draw()
            used.add(route.queue)
            new = restamp(target, rec, copy_seq, now_ms)
            new.scheduled_enqueue_time_ms = rec.scheduled_enqueue_time_ms
            if route.overrides:
                merge_overrides(new, route.overrides)
            if route.dead_letter_reason is not None:
                new.dead_letter_reason = route.dead_letter_reason
                new.dead_letter_description = route.dead_letter_description
            self.store_new(target, new, timer=True)
            self.log(target, LogEvent.ENQUEUED, new, now_ms)
            target.make_ready(new)
            self.on_ready(target.name)
