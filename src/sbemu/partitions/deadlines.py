"""When a partition's messages expire (TTL) or are activated (scheduled), and the scans that
find them.

Timers are a sorted database in the store (deadlinedb.deadline_key: due time, kind, sequence
number, sub-queue), staged with the message that needs one and read in order from
`deadline_from`. `deadline_at` caches the first due time; it is a lower bound (a timer
removed with its message only makes a tick look early, which then reads the true first).

Derived expiry: a message with its sub-queue's default TTL stores no timer (a put per
message saved, and a delete per complete). Such messages expire in the order they were
enqueued (expiry = enqueued time + the one default TTL), and a message with a TTL of its own
has a shorter one and a timer, so a scan of the stored records from the oldest on stops at
the first live default-TTL one that is not due: no default-TTL message behind it is.

What expiring or activating a message does (dead-letter it, drop it, enqueue it anew) is
transitions.py's: this module finds them and calls the `expire(sq, rec, now_ms)` or
`activate(sq, rec, now_ms)` it is handed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from .deadlinedb import deadline_key, parse_deadline_key
from .reader import WAIT, SubQueueReader
from .records import MessageRecord, MessageState, decode_message
from .staging import Staging
from .store import PartitionStore
from .subqueue import SubQueue

DEADLINES_PER_TICK = 5_000  # timers handled per on_timer call (a cold backlog expires in steps)
EXPIRY, SCHEDULED_ACTIVATION = 0, 1  # deadline kinds
EXPIRY_SCAN_CHUNK = 512  # records read per store scan of derived TTL expiry (expire_head)
LOAD_HEAD_SCAN = 64  # records a load looks at for a sub-queue's first expiry (beyond: a tick)
_MISSING = object()
_SCHEDULED = MessageState.SCHEDULED  # (a module constant: an enum member is a class lookup)

Fire = Callable[[SubQueue, MessageRecord, int], None]


def timer_key(sq: SubQueue, rec: MessageRecord) -> bytes | None:
    """The timer a stored message has in its current state (None: none)."""
    if rec.state == _SCHEDULED:
        if rec.scheduled_enqueue_time_ms is None:
            return None
        return deadline_key(
            rec.scheduled_enqueue_time_ms, SCHEDULED_ACTIVATION, rec.sequence_number, sq.name
        )
    settings = sq.settings
    if rec.expires_at_ms is not None and settings.expires and rec.ttl_ms != settings.default_ttl_ms:
        return deadline_key(rec.expires_at_ms, EXPIRY, rec.sequence_number, sq.name)
    return None  # none, or derived: the sub-queue's default TTL (see expire_heads)


class Deadlines:
    """The TTL and schedule timers of one partition (see the module comment)."""

    def __init__(
        self,
        store: PartitionStore,
        queues: dict[str, SubQueue],
        staging: Staging,
        reader: SubQueueReader,
    ) -> None:
        self.store = store
        self.queues = queues
        self.staging = staging
        self.reader = reader
        # Timers on disk: the first key still to look at, and the next due time (cached).
        self.deadline_from = b""
        self.deadline_at: int | None = None
        self.batch_deadline_min: int | None = None  # the first timer of the staged batch
        # Derived TTL expiry: when the oldest message with its sub-queue's default TTL is due
        # (None: none stored). Those messages store no timer (see add).
        self.expiry_due: int | None = None
        self._unstored_expiry: dict[int, int] = {}  # batch number -> its first expiry

    def load(self, expire: Fire) -> None:
        """After the store opened: the first timer, and (a look at the first records of each
        sub-queue with a default TTL) when the oldest derived expiry is due."""
        self.refresh()
        self.expiry_due = None
        for sq in self.queues.values():
            sq.expiry_from = 0
            if sq.settings.default_ttl_ms is not None and sq.counts[MessageState.ACTIVE] > 0:
                self.due_for_expiry(self.expire_head(sq, -1, LOAD_HEAD_SCAN, expire))

    def reset(self) -> None:
        """Forget the cached times (the partition reloads its store; load() follows)."""
        self.deadline_from = b""
        self.deadline_at = None
        self.batch_deadline_min = None

    def batch_taken(self) -> None:
        """The staged batch went to the committer: its timers are the store's now."""
        self.batch_deadline_min = None

    def next_due(self) -> int | None:
        """When the first timer or derived expiry is due, or None."""
        at, due = self.deadline_at, self.expiry_due
        if at is None:
            return due
        return at if due is None or at < due else due

    # ---------------------------------------------------------------- staging timers
    def add(self, sq: SubQueue, rec: MessageRecord) -> None:
        """Stage the timer a message needs in its state (or note its derived expiry)."""
        key = timer_key(sq, rec)
        if key is None:
            if rec.state != _SCHEDULED and rec.expires_at_ms is not None:
                self.derived(rec.expires_at_ms)  # no timer stored
            return
        at = rec.scheduled_enqueue_time_ms if rec.state == _SCHEDULED else rec.expires_at_ms
        assert at is not None  # timer_key made a key from it
        self.staging.batch.put_deadline(key)
        if self.batch_deadline_min is None or at < self.batch_deadline_min:
            self.batch_deadline_min = at
        if self.deadline_at is None or at < self.deadline_at:
            self.deadline_at = at
        if key < self.deadline_from:
            self.deadline_from = key

    def remove(self, sq: SubQueue, rec: MessageRecord) -> None:
        """Stage the deletion of a message's timer (if it has one)."""
        key = timer_key(sq, rec)
        if key is not None:
            self.staging.batch.delete_deadline(key)

    def remove_run(self, sq: SubQueue, recs: Sequence[MessageRecord]) -> None:
        """remove() for each of `recs` (messages of `sq`): only those that may have a timer
        (scheduled, or expiring other than by the sub-queue's default TTL) are looked at."""
        settings = sq.settings
        expires, default_ttl = settings.expires, settings.default_ttl_ms
        scheduled = MessageState.SCHEDULED
        for rec in recs:
            if rec.state == scheduled or (
                expires and rec.expires_at_ms is not None and rec.ttl_ms != default_ttl
            ):
                self.remove(sq, rec)

    def refresh(self) -> None:
        """Read the first timer from the store again (the staged ones count too)."""
        at = self.store.first_deadline(self.deadline_from)
        pending = self.batch_deadline_min
        if pending is not None and (at is None or pending < at):
            at = pending
        self.deadline_at = at

    def derived(self, at: int) -> None:
        """A default-TTL message expiring at `at` was staged (it stores no timer)."""
        self.due_for_expiry(at)
        unstored = self._unstored_expiry  # (not in the store yet: _pending_expiry)
        batch = self.staging.batch_number
        first = unstored.get(batch)
        if first is None:
            self._forget_stored_expiry()
            unstored[batch] = at
        elif at < first:
            unstored[batch] = at

    def due_for_expiry(self, at: int | None) -> None:
        """A derived expiry may be due at `at` (the earliest is kept)."""
        if at is not None and (self.expiry_due is None or at < self.expiry_due):
            self.expiry_due = at

    # ---------------------------------------------------------------- the tick
    def on_timer(self, now_ms: int, expire: Fire, activate: Fire) -> None:
        """Fire the due timers and expire the due default-TTL messages (`expire` and
        `activate` do what that means: see transitions.py)."""
        if self.deadline_at is not None and self.deadline_at <= now_ms:
            self._fire(now_ms, expire, activate)
        if self.expiry_due is not None and self.expiry_due <= now_ms:
            self._expire_heads(now_ms, expire)

    def _fire(self, now_ms: int, expire: Fire, activate: Fire) -> None:
        """TTL expiry and scheduled activation from the timers on disk, oldest first."""
        keys = self.store.due_deadlines(self.deadline_from, now_ms, DEADLINES_PER_TICK)
        staging, get = self.staging, self.reader.get_or_later
        for key in keys:
            self.deadline_from = key + b"\x00"  # the next key after this one
            staging.batch.delete_deadline(key)
            staging.dirty()
            at, kind, seq, name = parse_deadline_key(key)
            sq = self.queues.get(name)
            if sq is None:
                continue
            fire = partial(self._fire_one, sq, kind, at, now_ms, expire, activate)
            rec = get(sq, seq, fire)  # (a large one: read off the loop, then fired)
            if rec is not WAIT:
                fire(rec)  # type: ignore[arg-type]
        if len(keys) >= DEADLINES_PER_TICK:
            self.deadline_at = now_ms  # more are due: the next tick goes on
        else:
            self.refresh()

    def _fire_one(
        self,
        sq: SubQueue,
        kind: int,
        at: int,
        now_ms: int,
        expire: Fire,
        activate: Fire,
        rec: MessageRecord | None,
    ) -> None:
        """One due timer's message, as it is now (None: gone)."""
        if rec is None or self.queues.get(sq.name) is not sq:
            return
        if kind == EXPIRY:
            if not sq.settings.expires:
                return  # the sub-queue's settings changed: its messages no longer expire
            seq = rec.sequence_number
            if seq in sq.locks or rec.state != MessageState.ACTIVE or rec.expires_at_ms != at:
                return  # locked: checked again when it comes back; or no longer active
            expire(sq, rec, now_ms)
        elif rec.state == MessageState.SCHEDULED:
            activate(sq, rec, now_ms)

    def _expire_heads(self, now_ms: int, expire: Fire) -> None:
        """Derived TTL expiry (see the module comment): due messages the scan passes are
        expired whatever their TTL. (If the clock stepped back or the default TTL changed, a
        message can expire late here, never early; like Azure, which expires lazily, a
        receiver never gets an expired message: take_next checks.)"""
        self.expiry_due = None
        budget = DEADLINES_PER_TICK
        for sq in list(self.queues.values()):
            if sq.settings.default_ttl_ms is None:
                continue
            at = self.expire_head(sq, now_ms, budget, expire)
            if at is not None and at <= now_ms:
                self.expiry_due = now_ms  # the tick's share is used up: the next goes on
                return
            self.due_for_expiry(at)

    def expire_head(self, sq: SubQueue, now_ms: int, budget: int, expire: Fire) -> int | None:
        """Expire the due messages at the head of one sub-queue (at most `budget` looked at);
        returns when its head is due next (now_ms: the budget ran out; None: nothing live)."""
        name, overlay, locks = sq.name, self.staging.overlay, sq.locks
        default = sq.settings.default_ttl_ms
        while True:
            chunk = min(budget, EXPIRY_SCAN_CHUNK)
            if chunk <= 0:
                return now_ms
            rows = self.store.scan(name, sq.expiry_from, chunk, decode_message)
            budget -= len(rows)
            for seq, stored in rows:
                hit = overlay.get((name, seq), _MISSING)
                rec = stored if hit is _MISSING else hit[0]  # type: ignore[index]
                if rec is None or seq in locks or rec.state != MessageState.ACTIVE:
                    sq.expiry_from = seq + 1  # gone; locked or deferred: not expired here
                    continue
                at = rec.expires_at_ms
                if at is None:
                    sq.expiry_from = seq + 1
                    continue
                if at > now_ms:
                    if rec.ttl_ms == default:
                        return at  # derived: nothing behind it is due
                    sq.expiry_from = seq + 1  # a TTL of its own: its timer fires it
                    continue
                sq.expiry_from = seq + 1
                expire(sq, rec, now_ms)
            if len(rows) < chunk:
                return self._pending_expiry(now_ms)

    def _pending_expiry(self, now_ms: int) -> int | None:
        """When the first default-TTL message not yet in the store (its batch uncommitted or
        in flight) expires: looked at again, by a tick, once it is stored."""
        self._forget_stored_expiry()
        if not self._unstored_expiry:
            return None
        return max(min(self._unstored_expiry.values()), now_ms + 1)

    def _forget_stored_expiry(self) -> None:
        """Drop the expiry times of batches that landed (their messages are in the store)."""
        unstored = self._unstored_expiry
        if unstored:
            oldest = self.staging.oldest_unlanded()
            for batch in [b for b in unstored if b < oldest]:
                del unstored[batch]
