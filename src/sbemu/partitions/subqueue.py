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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec

from .records import MessageRecord, MessageState
from .tokens import token_of

READ_AHEAD = 64  # records a plain sub-queue reads from the store per read transaction

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
        # The large record the read-ahead stopped at while the next commit reads it off the
        # loop (largeread.py): nothing after it joins the line meanwhile (None: none).
        self.large_read: int | None = None
        # How many active messages are staged and not in line yet: they join it when their
        # commit lands; until then no newer message may join the read-ahead before its
        # commit (FIFO).
        self.awaiting_commit = 0
        # The batch of the newest message put in line before its commit (early delivery):
        # the forwarder takes nothing from this line until that batch landed (-1: none).
        self.early_batch = -1
        self.buffer: dict[int, MessageRecord] = {}
        # The next record of the back line or of a session's line when it is large: read by
        # a commit off the loop (largeread.py), by sequence number: READING until it is read,
        # then the record (None: gone) until that line takes it.
        self.read_alone: dict[int, object] = {}
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
        self.read_alone.clear()
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
        if self.read_alone:
            self.read_alone.pop(seq, None)
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
        if self.read_alone:
            self.read_alone.pop(seq, None)
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
            if self.read_alone:
                for seq in seqs:
                    self.read_alone.pop(seq, None)

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
