"""The index of a partition's sub-queues: which stored messages are ready, and the read-ahead.

Messages live in the store (LMDB) only; memory holds an index, so a backlog costs disk, not
memory. A plain sub-queue
reads its ready line straight from the store in sequence order (a read-ahead window of a few
records, and a heap of the messages made ready again behind the scan); a session-enabled one
keeps a ready line per session, rebuilt after a restart by a scan in chunks. Every read goes
through the overlay of staged, uncommitted records first (staging.py), then the locked copies,
then the store.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

import msgspec

from .records import MessageRecord, MessageState, decode_ahead, decode_message
from .store import PartitionStore, StoreError
from .tokens import token_of

READ_AHEAD = 64  # records a plain sub-queue reads from the store per read transaction
SESSION_SCAN_CHUNK = 2_048  # records a restart's session scan reads per timer tick
_MISSING = object()

# Staged records not yet committed, by (sub-queue, seq): the record (None: deleted) and the
# number of the batch that writes it (see staging.py).
Overlay = dict[tuple[str, int], tuple[MessageRecord | None, int]]


@dataclass(frozen=True, slots=True)
class SubQueueSettings:
    """Delivery rules of one sub-queue (a queue, a subscription, or a dead-letter queue)."""

    lock_duration_ms: int
    max_delivery_count: int | None  # None: never dead-letter on delivery count (DLQs)
    default_ttl_ms: int | None  # None: no default TTL (Azure's TimeSpan.MaxValue), or a DLQ
    dead_letter_on_expiration: bool
    dead_letter_queue: str | None  # name of the sub-queue that takes dead letters
    requires_session: bool = False
    # A message's own TTL applies even when the sub-queue has no default TTL (an entity whose
    # default is "never"); False for dead-letter queues, where no TTL is observed [Azure: DLQ].
    message_ttl: bool = False

    @property
    def expires(self) -> bool:
        """Whether messages expire in this sub-queue (by the default TTL or their own)."""
        return self.message_ttl or self.default_ttl_ms is not None


class Lock(msgspec.Struct):
    """A peek-lock held on one message. Its lock token is `key`, the token's int: inside
    partitions/ a lock is an int (tokens.token_of makes the UUID at the edges).

    A msgspec Struct (slots, mutable, compared field by field): one is built per
    peek-locked delivery, in C."""

    key: int
    queue: SubQueue
    seq: int
    until_ms: int
    session: SessionLock | None = None  # message locks of a session live as long as it does
    record: MessageRecord | None = None  # the locked message (the in-flight window is in memory)

    @property
    def token(self) -> uuid.UUID:
        """The lock token (a UUID, for the protocol and management edges)."""
        return token_of(self.key)


class SessionOwner(Protocol):
    """The receiver holding a session lock, as the partitions see it (protocol.links' link)."""

    def session_lost(self, lock: SessionLock) -> None:
        """The lock expired or a reload ended it: the receiver lets the session go."""


@dataclass(slots=True, eq=False)
class SessionLock:
    """One receiver's exclusive hold on a session [contract 4.4]."""

    queue: SubQueue
    session_id: str
    owner: SessionOwner
    until_ms: int
    armed_ms: int = 0  # the latest expiry the session heap holds for this lock (see touch_session)


class SessionState:
    """One session of a session-enabled sub-queue: its ready line, lock and state."""

    __slots__ = (
        "session_id",
        "ready",
        "ready_set",
        "lock",
        "state",
        "state_changed_ms",
        "messages",
    )

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.ready: list[int] = []
        self.ready_set: set[int] = set()
        self.lock: SessionLock | None = None
        self.state: bytes | None = None
        self.state_changed_ms = 0
        self.messages = 0  # stored records of this session (any state)

    def locked(self, now_ms: int) -> bool:
        """Whether a live lock holds this session."""
        return self.lock is not None and self.lock.until_ms > now_ms


class SubQueue:
    """The index of one sub-queue in one partition: which stored messages are ready.

    The messages themselves stay in LMDB. A plain sub-queue reads its ready line straight
    from the store in sequence order: `scan_from` is the next sequence number to read,
    `buffer` holds the few records read ahead, and `back` (a heap) the messages made ready
    again behind the scan (abandoned, released, dead-lettered in, activated). A
    session-enabled sub-queue keeps one ready line of sequence numbers per session (FIFO
    inside a session). Counts by state are kept here and persisted with every commit.
    """

    def __init__(self, name: str, settings: SubQueueSettings) -> None:
        self.name = name
        self.settings = settings
        self.scan_from = 0
        # Whether the store may hold ready messages the read-ahead has not read (at or after
        # scan_from): False once a read found the store's end, True again when a commit
        # stores one past it.
        self.more_in_store = True
        # How many active messages are staged and not in line yet: they join it when their
        # commit lands; until then no newer message may join the read-ahead before its
        # commit (FIFO).
        self.awaiting_commit = 0
        # The batch of the newest message put in line before its commit (early delivery):
        # the forwarder takes nothing from this line until that batch landed (-1: none).
        self.early_batch = -1
        self.buffer: dict[int, MessageRecord] = {}
        self.back: list[int] = []
        self.back_set: set[int] = set()
        self.locks: dict[int, Lock] = {}
        self.sessions: dict[str, SessionState] = {}
        self.counts = [0, 0, 0]  # by MessageState: active, deferred, scheduled
        self.bytes = 0  # encoded size of the stored messages (Azure's SizeInBytes)
        # A session-enabled sub-queue after a restart: its session lines are rebuilt by a scan
        # of the records stored before it, [session_scan, session_scan_end) still to read
        # (None: complete). Until the scan passes a record, memory knows nothing of it.
        self.session_scan: int | None = None
        self.session_scan_end = 0
        # Messages stored since (new, activated) that became ready while the scan runs: they
        # wait for it to end, so none overtakes an older message of its session (FIFO).
        self.session_held: list[int] = []
        # Derived TTL expiry (see deadlines.py): the sequence number the scan for expired
        # messages goes on from (everything below it is gone or was passed).
        self.expiry_from = 0

    def scanned(self, seq: int) -> bool:
        """Whether the session lines account for this record (not left to the scan)."""
        start = self.session_scan
        return start is None or seq < start or seq >= self.session_scan_end

    def set_counts(self, counts: list[int], nbytes: int) -> None:
        """The counts by state and the stored bytes, as the store holds them (a load)."""
        self.counts = counts
        self.bytes = nbytes

    def set_session_states(self, states: Mapping[str, bytes]) -> None:
        """The sessions' stored states, by session id (a load)."""
        for session_id, data in states.items():
            self.session(session_id).state = data

    def count_session(self, rec: MessageRecord, delta: int) -> None:
        """One more (or fewer) stored record in the message's session, unless the restart
        scan has yet to count it."""
        if self.scanned(rec.sequence_number):
            self.session(rec.session_id or "").messages += delta

    def clear(self) -> None:
        """Forget the index (read-ahead, ready lines, locks, sessions, counts): the partition
        reloads it from the store."""
        self.__init__(self.name, self.settings)  # type: ignore[misc]

    def clear_ready(self) -> None:
        """Forget every ready line and the read-ahead (the sub-queue was purged)."""
        self.buffer.clear()
        self.back.clear()
        self.back_set.clear()
        for sess in self.sessions.values():
            sess.ready.clear()
            sess.ready_set.clear()

    def session(self, session_id: str) -> SessionState:
        """The session's state, created on first use."""
        sess = self.sessions.get(session_id)
        if sess is None:
            sess = self.sessions[session_id] = SessionState(session_id)
        return sess

    def join_read_ahead(self, rec: MessageRecord) -> bool:
        """Put a new message of a plain sub-queue straight into the read-ahead, when the scan
        has reached the end of the store and it is the next one (no read transaction, no
        decode of what was just written); False: it is left to the scan."""
        seq = rec.sequence_number
        if self.more_in_store or len(self.buffer) >= READ_AHEAD or seq < self.scan_from:
            return False
        self.buffer[seq] = rec
        self.scan_from = seq + 1
        return True

    def make_ready(self, rec: MessageRecord) -> None:
        """Put a visible message (back) in line for delivery, in sequence order."""
        seq = rec.sequence_number
        if self.settings.requires_session:
            if self.session_scan is not None and seq >= self.session_scan:
                if seq >= self.session_scan_end:
                    self.session_held.append(seq)
                return  # the restart scan puts it in line when it gets there (or ends)
            sess = self.session(rec.session_id or "")
            if seq not in sess.ready_set:
                sess.ready_set.add(seq)
                heapq.heappush(sess.ready, seq)
            return
        if seq not in self.back_set and seq not in self.buffer:
            self.back_set.add(seq)
            heapq.heappush(self.back, seq)

    def unready(self, rec: MessageRecord) -> None:
        """Take a message out of line (lazy: heap entries are skipped later)."""
        seq = rec.sequence_number
        if self.settings.requires_session:
            sess = self.sessions.get(rec.session_id or "")
            if sess is not None:
                sess.ready_set.discard(seq)
            return
        self.back_set.discard(seq)
        self.buffer.pop(seq, None)

    def removed(self, rec: MessageRecord) -> None:
        """A stored message was deleted: out of its session's count and every ready line."""
        seq = rec.sequence_number
        if self.settings.requires_session:
            sess = self.sessions.get(rec.session_id or "")
            if sess is not None:
                if self.scanned(seq):
                    sess.messages -= 1
                sess.ready_set.discard(seq)
        else:
            self.back_set.discard(seq)

    def removed_run(self, recs: Sequence[MessageRecord], seqs: Sequence[int]) -> None:
        """removed() for each of `recs` (their sequence numbers `seqs`, in the same order)."""
        if self.settings.requires_session:
            for rec in recs:
                self.removed(rec)
        elif self.back_set:
            self.back_set.difference_update(seqs)

    @property
    def ready_count(self) -> int:
        """A lower bound of the messages waiting for delivery outside sessions (0: maybe none)."""
        return len(self.back_set) + len(self.buffer) + (1 if self.more_in_store else 0)

    def has_ready(self) -> bool:
        """Whether a message may wait for delivery outside sessions (cheap, never misses one)."""
        if self.settings.requires_session:
            return False
        return bool(self.buffer or self.back_set or self.more_in_store)

    def has_ready_any(self) -> bool:
        """Whether a message may wait for delivery, in or outside sessions."""
        return self.has_ready() or any(s.ready_set for s in self.sessions.values())

    def available_session(self, now_ms: int) -> SessionState | None:
        """An unlocked session with a ready message (the one whose next message is oldest)."""
        best: SessionState | None = None
        for sess in self.sessions.values():
            if sess.ready_set and not sess.locked(now_ms):
                if best is None or min(sess.ready_set) < min(best.ready_set):
                    best = sess
        return best

    def session_ids(self, changed_after_ms: int | None) -> list[str]:
        """Sessions with messages or state (or, with changed_after_ms, whose state changed since)."""
        if changed_after_ms is not None:
            return sorted(
                sid
                for sid, sess in self.sessions.items()
                if sess.state_changed_ms > changed_after_ms
            )
        with_messages = {sid for sid, sess in self.sessions.items() if sess.messages > 0}
        with_state = {sid for sid, sess in self.sessions.items() if sess.state is not None}
        return sorted(with_messages | with_state)

    def active_count(self) -> int:
        """Messages that are active (ready or locked), as Azure's ActiveMessageCount."""
        return self.counts[MessageState.ACTIVE]


class SubQueueReader:
    """Reads the partition's sub-queues from the store as they are now: staged changes
    (the overlay) first, then locked copies and the read-ahead, then the store.

    `overlay` is the staging's dict (never rebound); `on_ready(name)` is told when a restart's
    session scan put messages of a sub-queue in line.
    """

    def __init__(
        self,
        store: PartitionStore,
        queues: dict[str, SubQueue],
        overlay: Overlay,
        on_ready: Callable[[str], None],
    ) -> None:
        self.store = store
        self.queues = queues
        self.overlay = overlay
        self.on_ready = on_ready
        self.scanning: list[SubQueue] = []  # session-enabled sub-queues a restart scan rebuilds

    def get(self, sq: SubQueue, seq: int) -> MessageRecord | None:
        """A stored message as it is now: uncommitted changes first, then the store."""
        hit = self.overlay.get((sq.name, seq), _MISSING)
        if hit is not _MISSING:
            return hit[0]  # type: ignore[index]
        lock = sq.locks.get(seq)
        if lock is not None and lock.record is not None:
            return lock.record
        rec = sq.buffer.get(seq)
        if rec is not None:
            return rec
        return self.store.get(sq.name, seq, decode_message)

    def each_record(self, sq: SubQueue) -> Iterator[MessageRecord]:
        """Every stored record of a sub-queue, in sequence order (the store only)."""
        start = 0
        while True:
            rows = self.store.scan(sq.name, start, 4096, decode_message)
            for seq, rec in rows:
                start = seq + 1
                yield rec
            if len(rows) < 4096:
                return

    def current_records(self, sq: SubQueue) -> Iterator[MessageRecord]:
        """Every message of a sub-queue as it is now, in sequence order: read from the store
        in chunks, uncommitted changes and locked copies first (for purge; bounded memory)."""
        name = sq.name
        pending = {
            seq: rec for (q, seq), (rec, _gen) in self.overlay.items() if q == name
        }  # fmt: skip
        extra = sorted(pending)
        i = 0
        start = 0
        while True:
            rows = self.store.scan(name, start, 1024, decode_message)
            for seq, stored in rows:
                start = seq + 1
                while i < len(extra) and extra[i] < seq:
                    before = pending[extra[i]]
                    i += 1
                    if before is not None:
                        yield before
                if i < len(extra) and extra[i] == seq:
                    i += 1
                if seq in pending:
                    rec = pending[seq]
                else:
                    lock = sq.locks.get(seq)
                    rec = lock.record if lock is not None and lock.record is not None else stored
                if rec is not None:
                    yield rec
            if len(rows) < 1024:
                break
        for seq in extra[i:]:
            rest = pending[seq]
            if rest is not None:
                yield rest

    def peek(
        self, sq: SubQueue, from_seq: int, count: int, session_id: str | None
    ) -> list[MessageRecord]:
        """Up to `count` messages with sequence number >= from_seq, oldest first (locks ignored)."""
        queue = sq.name
        pending = {
            seq: rec for (name, seq), (rec, _gen) in self.overlay.items()
            if name == queue and seq >= from_seq
        }  # fmt: skip
        out: list[MessageRecord] = []
        start = from_seq
        limit = max(count, READ_AHEAD)
        while len(out) < count:
            rows = self.store.scan(queue, start, limit, decode_message)
            for seq, stored in rows:
                start = seq + 1
                rec = pending.pop(seq) if seq in pending else stored
                if rec is not None and (session_id is None or rec.session_id == session_id):
                    out.append(rec)
            if len(rows) < limit:
                break
        out.extend(
            r for r in pending.values()
            if r is not None and (session_id is None or r.session_id == session_id)
        )  # fmt: skip
        if sq.locks:  # a locked message as it is now (its lock holds the live copy)
            out = [sq.locks[r.sequence_number].record or r if r.sequence_number in sq.locks else r
                   for r in out]  # fmt: skip
        out.sort(key=lambda r: r.sequence_number)
        return out[:count]

    # ---------------------------------------------------------------- sessions after a restart
    def start_session_scan(self, sq: SubQueue, end: int) -> None:
        """A session-enabled sub-queue's lines are rebuilt after start-up, not during it: a
        scan of the records stored so far (below `end`), a chunk per timer tick (and one more
        when a receiver finds nothing; listing sessions finishes it). A session's line only
        ever holds its oldest records, so FIFO per session holds while the scan runs."""
        sq.session_scan = 0
        sq.session_scan_end = end
        self.scanning.append(sq)

    def scan_sessions(self, sq: SubQueue, limit: int = 0) -> None:
        """Read the next `limit` stored records (0: all the rest) of a session-enabled
        sub-queue into its session lines (in chunks: a restart never loads the whole backlog)."""
        start, end = sq.session_scan, sq.session_scan_end
        if start is None:
            return
        chunk = limit or SESSION_SCAN_CHUNK
        overlay, name = self.overlay, sq.name
        made_ready = False
        while True:
            rows = self.store.scan(name, start, chunk, decode_message)
            for seq, stored in rows:
                if seq >= end:
                    break
                start = sq.session_scan = seq + 1  # before make_ready: the record is scanned
                hit = overlay.get((name, seq), _MISSING)
                rec = stored if hit is _MISSING else hit[0]  # type: ignore[index]
                if rec is None:
                    continue  # deleted, not yet committed
                sq.session(rec.session_id or "").messages += 1
                if rec.state == MessageState.ACTIVE and seq not in sq.locks:
                    sq.make_ready(rec)
                    made_ready = True
            if len(rows) < chunk or start >= end or rows[-1][0] >= end:
                sq.session_scan = None
                held, sq.session_held = sq.session_held, []
                for seq in held:
                    rec = self.get(sq, seq)
                    if rec is not None and rec.state == MessageState.ACTIVE and seq not in sq.locks:
                        sq.make_ready(rec)
                        made_ready = True
                break
            if limit:
                break
        if made_ready and self.queues.get(name) is sq:
            self.on_ready(name)

    def scan_chunk(self, sq: SubQueue) -> None:
        """Read the next SESSION_SCAN_CHUNK records of a restart's session scan (if running)."""
        self.scan_sessions(sq, SESSION_SCAN_CHUNK)

    def session_scans(self) -> list[SubQueue]:
        """The restart scans still running (dropped sub-queues left out)."""
        if self.scanning:
            self.scanning = [
                sq for sq in self.scanning
                if sq.session_scan is not None and self.queues.get(sq.name) is sq
            ]  # fmt: skip
        return self.scanning

    # ---------------------------------------------------------------- the ready line
    def refill(self, sq: SubQueue) -> None:
        """Read the next few ready messages of a plain sub-queue from the store."""
        # (a large message ends a read: records.decode_ahead)
        recs, cut = self.store.read_ahead(
            sq.name, sq.scan_from, READ_AHEAD, decode_ahead, decode_message
        )
        if len(recs) < READ_AHEAD and not cut:
            sq.more_in_store = False
        if not recs:
            return
        sq.scan_from = recs[-1].sequence_number + 1
        overlay, name = self.overlay, sq.name
        buffer, locks, back, active = sq.buffer, sq.locks, sq.back_set, MessageState.ACTIVE
        for rec in recs:
            seq = rec.sequence_number
            if overlay:  # a change not committed yet is the truth
                hit = overlay.get((name, seq), _MISSING)
                if hit is not _MISSING:
                    rec = hit[0]  # type: ignore[index]
                    if rec is None:
                        continue
            if rec.state == active and seq not in locks and seq not in back:
                buffer[seq] = rec

    def pop_ready(self, sq: SubQueue, session_id: str | None) -> MessageRecord | None:
        """The ready message with the lowest sequence number (of one session), out of line."""
        if sq.settings.requires_session and session_id is None:
            return None  # a session-enabled sub-queue serves session receivers only
        if session_id is not None:
            sess = sq.sessions.get(session_id)
            if sq.session_scan is not None and (sess is None or not sess.ready_set):
                # its next message may be unread: one chunk now (bounded, so the loop never
                # stalls on a long scan); the timer ticks read the rest and call on_ready
                self.scan_sessions(sq, SESSION_SCAN_CHUNK)
                sess = sq.sessions.get(session_id)
            if sess is None:
                return None
            heap, ready = sess.ready, sess.ready_set
            while heap:
                seq = heapq.heappop(heap)
                if seq in ready:
                    ready.discard(seq)
                    rec = self.get(sq, seq)
                    if rec is not None and rec.state == MessageState.ACTIVE and seq not in sq.locks:
                        return rec
            return None
        back, back_set = sq.back, sq.back_set
        while True:
            while not sq.buffer and sq.more_in_store:
                self.refill(sq)
            while back and back[0] not in back_set:
                heapq.heappop(back)
            if sq.buffer:
                first = next(iter(sq.buffer))
                if not back or first < back[0]:
                    return sq.buffer.pop(first)
            elif not back:
                return None
            seq = heapq.heappop(back)
            back_set.discard(seq)
            rec = self.get(sq, seq)
            if rec is not None and rec.state == MessageState.ACTIVE and seq not in sq.locks:
                return rec

    def pop_run(self, sq: SubQueue, limit: int) -> list[MessageRecord]:
        """pop_ready(sq, None) up to `limit` times (a sub-queue outside sessions), in one call:
        while nothing waits back in line, the read-ahead buffer's run is taken at once. A
        store fault after some were taken hands those over (the next call meets it again)."""
        out: list[MessageRecord] = []
        if sq.settings.requires_session:
            return out
        buffer, back = sq.buffer, sq.back
        try:
            while len(out) < limit:
                if buffer and not back:  # the buffer is in sequence order, nothing before it
                    pop = buffer.pop
                    out.extend([pop(seq) for seq in list(islice(buffer, limit - len(out)))])
                    continue
                rec = self.pop_ready(sq, None)
                if rec is None:
                    break
                out.append(rec)
        except StoreError:
            if not out:
                raise
        return out

    def take_ready(self, sq: SubQueue, limit: int) -> list[MessageRecord]:
        """Up to `limit` ready messages of a sub-queue, oldest first, across its sessions
        too, taken out of line without a lock."""
        out: list[MessageRecord] = []
        if not sq.settings.requires_session:
            while len(out) < limit:
                rec = self.pop_ready(sq, None)
                if rec is None:
                    break
                out.append(rec)
            return out
        self.scan_sessions(sq, SESSION_SCAN_CHUNK)  # a restart's scan advances (if running)
        heads: list[tuple[int, str]] = []
        for sid, sess in sq.sessions.items():
            live = [s for s in sess.ready if s in sess.ready_set]
            if live:
                heads.append((min(live), sid))
        heapq.heapify(heads)
        while heads and len(out) < limit:
            _, sid = heapq.heappop(heads)
            rec = self.pop_ready(sq, sid)
            if rec is None:
                continue
            out.append(rec)
            sess = sq.sessions[sid]
            live = [s for s in sess.ready if s in sess.ready_set]
            if live:
                heapq.heappush(heads, (min(live), sid))
        out.sort(key=lambda r: r.sequence_number)
        return out
