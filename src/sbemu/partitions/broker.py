"""One partition's message broker: sequence numbers, sub-queues, locks, settlement, expiry.

A partition [SB partitioning P1] holds one or more sub-queues: a queue and its dead-letter
queue, or (for a topic partition) each subscription and its dead-letter queue. Messages live
in the store (LMDB) only; memory holds an index [issue 10]: per sub-queue a read-ahead window
and the messages made ready again, per-state counts, locks with their in-flight records,
session lines, and the records changed since the last commit (the overlay, read before the
store until their commit lands). Timers (TTL, scheduled) are a sorted database in the store.
Writes go through a WriteBatch that the server commits once per event-loop turn (group
commit). Rules:

- A new message becomes visible (peekable, deliverable) only after the commit that stores it,
  and the sender is acknowledged only then: an accepted message is never lost.
- Settlements change memory at once and are confirmed to the client after their commit.
- Locks live in memory only: they are released on restart [issue 2, durability].
- No clocks: every operation takes `now_ms` (Unix milliseconds).

Sequence numbers are per partition, starting at 1; on a partitioned entity the partition id
sits in the top 16 bits [SB partitioning P11, contract 9].
"""

from __future__ import annotations

import heapq
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..completions import Done
from ..errors import (
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    QuotaExceeded,
    ServerBusy,
    ServiceBusError,
    SessionCannotBeLocked,
    SessionLockLost,
)
from .records import (
    IncomingMessage,
    LogEvent,
    MessageRecord,
    MessageState,
    decode_message,
    encode_log_after,
    encode_message,
    log_prefix,
)
from .stats import PartitionStats
from .store import (
    PartitionStore,
    StoreError,
    StoreFull,
    WriteBatch,
    deadline_key,
    parse_deadline_key,
)

DLQ_SUFFIX = "/$deadletterqueue"
MAX_DELIVERY_COUNT_REASON = "MaxDeliveryCountExceeded"
TTL_EXPIRED_REASON = "TTLExpiredException"
SEQUENCE_BITS = 48
FAULT_RETRY_MS = 1_000  # first wait before reopening a store after an I/O fault (then doubled)
FAULT_RETRY_MAX_MS = 30_000  # longest wait between two reopen attempts
ROOM_RECHECK_MS = 1_000  # how often a partition whose disk is low on room measures it again
# A topic partition keeps scheduled messages here, not yet copied to any subscription: they
# are fanned out through the subscriptions' rules only when they fire [Azure: scheduling].
SCHEDULED_QUEUE = "$scheduled"


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


@dataclass(frozen=True, slots=True)
class Route:
    """Where one copy of an incoming message goes (a topic sends one per matching rule)."""

    queue: str
    overrides: dict[str, bytes] | None = None  # encoded application-property changes
    dead_letter_reason: str | None = None  # set when the copy goes straight to a DLQ
    dead_letter_description: str | None = None


@dataclass(slots=True)
class Lock:
    """A peek-lock held on one message. Its lock token is `key`, the token's int: the
    receive path keeps and passes ints (no UUID object per delivery); `token` makes the
    UUID when one is wanted."""

    key: int
    queue: SubQueue
    seq: int
    until_ms: int
    session: SessionLock | None = None  # message locks of a session live as long as it does
    record: MessageRecord | None = None  # the locked message (the in-flight window is in memory)

    @property
    def token(self) -> uuid.UUID:
        """The lock token."""
        return token_of(self.key)


@dataclass(slots=True, eq=False)
class SessionLock:
    """One receiver's exclusive hold on a session [contract 4.4]."""

    queue: SubQueue
    session_id: str
    owner: object
    until_ms: int
    armed_ms: int = 0  # the latest expiry the session heap holds for this lock (see touch_session)


class SessionState:
    """One session of a session-enabled sub-queue: its ready line, lock and state."""

    __slots__ = (
        "session_id", "ready", "ready_set", "lock", "state", "state_changed_ms", "messages"
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


def _merge_overrides(rec: MessageRecord, overrides: dict[str, bytes] | None) -> None:
    """Apply property changes (abandon/defer/dead-letter) on top of earlier ones."""
    if overrides:
        merged = dict(rec.property_overrides or {})
        merged.update(overrides)
        rec.property_overrides = merged


# Lock tokens are drawn from os.urandom a few KB at a time: one system call per
# _TOKEN_POOL tokens rather than one per delivery (only the loop thread makes tokens).
_TOKEN_POOL = 256
_token_pool = b""
_token_at = 0
# A token's int: the random bits minus the version nibble, the variant bits and the last two
# bytes; then version 4, variant 10 (RFC 4122) and the partition id in the last two bytes.
_TOKEN_KEEP = ((1 << 128) - 1) & ~((0xF << 76) | (0x3 << 62) | 0xFFFF)
_TOKEN_V4 = (0x4 << 76) | (0x2 << 62)
# uuid.UUID(int=...) checks its arguments in Python (about 10x the cost of the object): a
# token's int is valid by construction, so the UUID is made as its __init__ ends, directly.
_UUID = uuid.UUID
_new_object = object.__new__
_set_slot = object.__setattr__
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


def make_lock_key(partition_id: int) -> int:
    """The int of a random version-4 GUID whose last two bytes carry the partition id (for
    O(1) lookup): a lock token as the receive path keeps it."""
    global _token_pool, _token_at
    at = _token_at
    if at >= len(_token_pool):
        _token_pool, at = os.urandom(16 * _TOKEN_POOL), 0
    _token_at = at + 16
    bits = int.from_bytes(_token_pool[at : at + 16], "big")
    return (bits & _TOKEN_KEEP) | _TOKEN_V4 | (partition_id & 0xFFFF)


def token_of(key: int) -> uuid.UUID:
    """The lock token (a UUID) whose int is `key`."""
    token = _new_object(_UUID)
    _set_slot(token, "int", key)
    _set_slot(token, "is_safe", _SAFE_UNKNOWN)
    return token


def partition_of_token(token: uuid.UUID) -> int:
    """The partition id a lock token was issued by."""
    return token.int & 0xFFFF


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
        self.more = True  # the store may hold ready messages at or after scan_from
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
        # Derived TTL expiry (see PartitionBroker._expire_heads): the sequence number the scan
        # for expired messages goes on from (everything below it is gone or was passed).
        self.expiry_from = 0

    def scanned(self, seq: int) -> bool:
        """Whether the session lines account for this record (not left to the scan)."""
        start = self.session_scan
        return start is None or seq < start or seq >= self.session_scan_end

    def count_session(self, rec: MessageRecord, delta: int) -> None:
        """One more (or fewer) stored record in the message's session, unless the restart
        scan has yet to count it."""
        if self.scanned(rec.sequence_number):
            self.session(rec.session_id or "").messages += delta

    def clear(self) -> None:
        """Forget the index (read-ahead, ready lines, locks, sessions, counts): the partition
        reloads it from the store."""
        self.__init__(self.name, self.settings)  # type: ignore[misc]

    def session(self, session_id: str) -> SessionState:
        """The session's state, created on first use."""
        sess = self.sessions.get(session_id)
        if sess is None:
            sess = self.sessions[session_id] = SessionState(session_id)
        return sess

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

    @property
    def ready_count(self) -> int:
        """A lower bound of the messages waiting for delivery outside sessions (0: maybe none)."""
        return len(self.back_set) + len(self.buffer) + (1 if self.more else 0)

    def has_ready(self) -> bool:
        """Whether a message may wait for delivery outside sessions (cheap, never misses one)."""
        if self.settings.requires_session:
            return False
        return bool(self.buffer or self.back_set or self.more)

    def available_session(self, now_ms: int) -> SessionState | None:
        """An unlocked session with a ready message (the one whose next message is oldest)."""
        best: SessionState | None = None
        for sess in self.sessions.values():
            if sess.ready_set and not sess.locked(now_ms):
                if best is None or min(sess.ready_set) < min(best.ready_set):
                    best = sess
        return best

    def active_count(self) -> int:
        """Messages that are active (ready or locked), as Azure's ActiveMessageCount."""
        return self.counts[MessageState.ACTIVE]


READ_AHEAD = 64  # records a plain sub-queue reads from the store per read transaction
LAZY_MAX_WRITES = 512  # log records of lazy writes after which the partition commits anyway
SESSION_SCAN_CHUNK = 2_048  # records a restart's session scan reads per timer tick
LOCK_HEAP_SLACK = 4_096  # stale lock-heap entries tolerated before it is rebuilt
DEADLINES_PER_TICK = 5_000  # timers handled per on_timer call (a cold backlog expires in steps)
EXPIRY, SCHEDULED_ACTIVATION = 0, 1  # deadline kinds
EXPIRY_SCAN_CHUNK = 512  # records read per store scan of derived TTL expiry (_expire_head)
LOAD_HEAD_SCAN = 64  # records a load looks at for a sub-queue's first expiry (beyond: a tick)
LAYOUT = 3  # 2: counts in meta, timers in the deadlines database; 3: byte counts in meta
_MISSING = object()


class PartitionBroker:
    """One partition of one entity: its sub-queues, counters, locks and pending writes."""

    def __init__(
        self,
        store: PartitionStore,
        *,
        namespace: str,
        entity: str,
        partition_id: int,
        partitioned: bool,
        queues: dict[str, SubQueueSettings],
        mark_dirty: Callable[[PartitionBroker], None],
        mark_lazy: Callable[[PartitionBroker], None] | None = None,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.entity = entity
        self.partition_id = partition_id
        self.partitioned = partitioned
        self.queues = {name: SubQueue(name, s) for name, s in queues.items()}
        # Live locks by their token's int (a UUID hashes in Python code, its int in C).
        self.locks: dict[int, Lock] = {}
        self._lock_heap: list[tuple[int, int, int]] = []  # (until, seq, lock key)
        self._session_heap: list[tuple[int, str, str]] = []
        self._mark_dirty = mark_dirty
        # Writes nobody waits for (see _dirty): the committer takes them with the partition's
        # next commit or at the next timer tick. None: every write is committed at once.
        self._mark_lazy = mark_lazy
        self._lazy = False
        self._batch = WriteBatch()
        self._callbacks: list[Done] = []
        # Records changed (None: deleted) but not yet committed, by (sub-queue, seq): read
        # before the store. Tagged with the generation of the batch that writes them.
        self._overlay: dict[tuple[str, int], tuple[MessageRecord | None, int]] = {}
        self._gen = 0
        self._gen_keys: dict[int, list[tuple[str, int]]] = {}
        self._taken_gens: list[int] = []
        self._counts_dirty: set[SubQueue] = set()
        # The counter values the taken batches write (meta key -> value): take_commit() leaves
        # out a counter whose value is already on its way to the store, one LMDB put (and GIL
        # round trip of the commit thread) fewer per unchanged counter. Forgotten with any
        # uncommitted change (a failed commit, a reload): then every dirty counter is written.
        self._counts_sent: dict[str, int] = {}
        # Timers on disk: the first key still to look at, and the next due time (cached).
        self._deadline_from = b""
        self._deadline_at: int | None = None
        self._batch_deadline_min: int | None = None
        self._batch_has_deadlines = False
        # Derived TTL expiry: when the oldest message with its sub-queue's default TTL is due
        # (None: none stored). Those messages store no timer (see _add_deadline).
        self._expiry_due: int | None = None
        self._unstored_expiry: dict[int, int] = {}  # batch generation -> its first expiry
        self._next_seq = 1
        self._next_offset = 0
        self._scanning: list[SubQueue] = []  # session-enabled sub-queues a restart scan rebuilds
        self.log_bodies = False  # put message bodies in the partition log (serve --log-bodies)
        self.stats = PartitionStats()  # counters for the dashboard and /metrics
        self.on_ready: Callable[[str], None] = lambda queue: None
        self.on_session_lost: Callable[[SessionLock], None] = lambda lock: None
        # A topic partition: where a due scheduled message goes (the subscriptions' routes).
        self.fan_out: Callable[[MessageRecord], list[Route]] | None = None
        # healthy: False while taken offline or after a store I/O fault (no sends, no receives:
        # its messages wait, neither lost nor delivered). accepting (a property): False while
        # the stored messages fill the quota (no new messages; receivers still drain it).
        self.healthy = True
        self.unhealthy_reason: str | None = None
        # MaxSizeInMegabytes of this partition in bytes (0: no quota), enforced on the stored
        # byte counts (stored_bytes: every sub-queue, DLQ and scheduled included, uncommitted
        # sends too) before anything is stored, so the store's map never fills at the quota.
        self.max_bytes = 0
        self.stored_bytes = 0
        # stored_bytes when a send was last refused for the quota: the partition counts as full
        # (not accepting) until messages are removed, then sends are tried again
        self._full_at: int | None = None
        self._epoch = 0  # counts reloads from the store (_reload)
        # A store I/O fault: the partition reopens its store by itself (recover(now_ms)) from
        # fault_retry_at_ms on, waiting twice as long after each failed attempt.
        self.store_fault = False
        self.held_offline = False  # taken offline by the operator: recover() waits for online
        self.fault_retry_at_ms: int | None = None
        self._fault_backoff_ms = FAULT_RETRY_MS
        self._room_checked_ms = 0  # when check_room() last measured the disk

    # ---------------------------------------------------------------- load
    def load(self) -> None:
        """Open the store without reading the backlog: counters, session states, and (for
        session-enabled sub-queues only) each session's ready line; every lock starts released.
        """
        store = self.store
        store.ensure_queues(list(self.queues))
        meta = store.load_meta()
        self._next_seq = meta.get("next_sequence", 1)
        self._next_offset = meta.get("next_log_offset", 0)
        if meta.get("layout", 1) < LAYOUT:
            self._migrate(meta.get("layout", 1))
            meta = store.load_meta()
        for name, sq in self.queues.items():
            sq.counts = [meta.get(f"n:{name}:{k}", 0) for k in "ads"]
            sq.bytes = meta.get(f"n:{name}:b", 0)
        self.stored_bytes = sum(max(sq.bytes, 0) for sq in self.queues.values())
        self._full_at = None
        for sq in self.queues.values():
            if sq.settings.requires_session:
                self._load_sessions(sq)
        for name, states in store.load_session_states().items():
            target = self.queues.get(name)
            if target is None:
                continue
            for session_id, data in states.items():
                target.session(session_id).state = data
        self._refresh_deadline()
        # Derived TTL expiry: when the oldest message is due (a look at the first records).
        self._expiry_due = None
        for sq in self.queues.values():
            sq.expiry_from = 0
            if sq.settings.default_ttl_ms is not None and sq.counts[MessageState.ACTIVE] > 0:
                self._due_for_expiry(self._expire_head(sq, -1, LOAD_HEAD_SCAN))

    def _each_record(self, sq: SubQueue) -> Iterator[MessageRecord]:
        start = 0
        while True:
            rows = self.store.scan(sq.name, start, 4096, decode_message)
            for seq, rec in rows:
                start = seq + 1
                yield rec
            if len(rows) < 4096:
                return

    def _current_records(self, sq: SubQueue) -> Iterator[MessageRecord]:
        """Every message of a sub-queue as it is now, in sequence order: read from the store
        in chunks, uncommitted changes and locked copies first (for purge; bounded memory)."""
        name = sq.name
        pending = {
            seq: rec for (q, seq), (rec, _gen) in self._overlay.items() if q == name
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

    def _load_sessions(self, sq: SubQueue) -> None:
        """A session-enabled sub-queue's lines are rebuilt after start-up, not during it: a
        scan of the records stored so far, a chunk per timer tick (and one more when a
        receiver finds nothing; listing sessions finishes it). A session's line only ever
        holds its oldest records, so FIFO per session holds while the scan runs."""
        sq.session_scan = 0
        sq.session_scan_end = self.sequence_base() | self._next_seq
        self._scanning.append(sq)

    def _scan_sessions(self, sq: SubQueue, limit: int = 0) -> None:
        """Read the next `limit` stored records (0: all the rest) of a session-enabled
        sub-queue into its session lines [issue 10: restart does not load the backlog]."""
        start, end = sq.session_scan, sq.session_scan_end
        if start is None:
            return
        chunk = limit or SESSION_SCAN_CHUNK
        overlay, name = self._overlay, sq.name
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
                    rec = self._get(sq, seq)
                    if rec is not None and rec.state == MessageState.ACTIVE and seq not in sq.locks:
                        sq.make_ready(rec)
                        made_ready = True
                break
            if limit:
                break
        if made_ready and self.queues.get(name) is sq:
            self.on_ready(name)

    def _session_scans(self) -> list[SubQueue]:
        """The restart scans still running (dropped sub-queues left out)."""
        if self._scanning:
            self._scanning = [
                sq for sq in self._scanning
                if sq.session_scan is not None and self.queues.get(sq.name) is sq
            ]  # fmt: skip
        return self._scanning

    def _migrate(self, layout: int) -> None:
        """A store written before the current layout, once: count each sub-queue by state
        and bytes, and (before layout 2) put its timers in the deadlines database."""
        batch = WriteBatch()
        for sq in self.queues.values():
            counts = [0, 0, 0]
            size = 0
            for rec in self._each_record(sq):
                counts[rec.state] += 1
                size += rec.size
                key = self._deadline_key(sq, rec) if layout < 2 else None
                if key is not None:
                    batch.put_deadline(key)
                if len(batch.deadlines) >= 50_000:
                    self.store.commit(batch)
                    batch = WriteBatch()
            for k, n in zip("ads", counts, strict=True):
                batch.meta[f"n:{sq.name}:{k}"] = n
            batch.meta[f"n:{sq.name}:b"] = size
        batch.meta["layout"] = LAYOUT
        self.store.commit(batch)

    # ---------------------------------------------------------------- index
    def _get(self, sq: SubQueue, seq: int) -> MessageRecord | None:
        """A stored message as it is now: uncommitted changes first, then the store."""
        hit = self._overlay.get((sq.name, seq), _MISSING)
        if hit is not _MISSING:
            return hit[0]  # type: ignore[index]
        lock = sq.locks.get(seq)
        if lock is not None and lock.record is not None:
            return lock.record
        rec = sq.buffer.get(seq)
        if rec is not None:
            return rec
        return self.store.get(sq.name, seq, decode_message)

    def _refill(self, sq: SubQueue) -> None:
        """Read the next few ready messages of a plain sub-queue from the store."""
        rows = self.store.scan(sq.name, sq.scan_from, READ_AHEAD, decode_message)
        if len(rows) < READ_AHEAD:
            sq.more = False
        overlay, name = self._overlay, sq.name
        buffer = sq.buffer
        for seq, rec in rows:
            sq.scan_from = seq + 1
            hit = overlay.get((name, seq), _MISSING)
            if hit is not _MISSING:
                rec = hit[0]  # type: ignore[index]
            if (
                rec is None
                or rec.state != MessageState.ACTIVE
                or seq in sq.locks
                or seq in sq.back_set
            ):
                continue
            buffer[seq] = rec

    def _pop_ready(self, sq: SubQueue, session_id: str | None) -> MessageRecord | None:
        """The ready message with the lowest sequence number (of one session), out of line."""
        if sq.settings.requires_session and session_id is None:
            return None  # a session-enabled sub-queue serves session receivers only
        if session_id is not None:
            sess = sq.sessions.get(session_id)
            if sq.session_scan is not None and (sess is None or not sess.ready_set):
                # its next message may be unread: one chunk now (bounded, so the loop never
                # stalls on a long scan); the timer ticks read the rest and call on_ready
                self._scan_sessions(sq, SESSION_SCAN_CHUNK)
                sess = sq.sessions.get(session_id)
            if sess is None:
                return None
            heap, ready = sess.ready, sess.ready_set
            while heap:
                seq = heapq.heappop(heap)
                if seq in ready:
                    ready.discard(seq)
                    rec = self._get(sq, seq)
                    if rec is not None and rec.state == MessageState.ACTIVE and seq not in sq.locks:
                        return rec
            return None
        back, back_set = sq.back, sq.back_set
        while True:
            while not sq.buffer and sq.more:
                self._refill(sq)
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
            rec = self._get(sq, seq)
            if rec is not None and rec.state == MessageState.ACTIVE and seq not in sq.locks:
                return rec

    def _count(self, sq: SubQueue, state: MessageState, delta: int, nbytes: int = 0) -> None:
        """Adjust a sub-queue's count of one state (and its byte count); persisted with the
        next commit."""
        sq.counts[state] += delta
        sq.bytes += nbytes
        self.stored_bytes += nbytes
        if self._full_at is not None and self.stored_bytes < self._full_at:
            self._full_at = None  # messages were removed: there may be room again
        self._counts_dirty.add(sq)

    @staticmethod
    def _deadline_key(sq: SubQueue, rec: MessageRecord) -> bytes | None:
        """The timer a stored message has in its current state (None: none)."""
        if rec.state == MessageState.SCHEDULED:
            if rec.scheduled_enqueue_time_ms is None:
                return None
            return deadline_key(
                rec.scheduled_enqueue_time_ms, SCHEDULED_ACTIVATION, rec.sequence_number, sq.name
            )
        settings = sq.settings
        if rec.expires_at_ms is not None and settings.expires and rec.ttl_ms != settings.default_ttl_ms:
            return deadline_key(rec.expires_at_ms, EXPIRY, rec.sequence_number, sq.name)
        return None  # none, or derived: the sub-queue's default TTL (see _expire_heads)

    def _add_deadline(self, sq: SubQueue, rec: MessageRecord) -> None:
        key = self._deadline_key(sq, rec)
        if key is None:
            if rec.state != MessageState.SCHEDULED and rec.expires_at_ms is not None:
                self._derived_expiry(rec.expires_at_ms)  # no timer stored
            return
        at = rec.scheduled_enqueue_time_ms if rec.state == MessageState.SCHEDULED else rec.expires_at_ms
        assert at is not None  # _deadline_key made a key from it
        self._batch.put_deadline(key)
        self._batch_has_deadlines = True
        if self._batch_deadline_min is None or at < self._batch_deadline_min:
            self._batch_deadline_min = at
        if self._deadline_at is None or at < self._deadline_at:
            self._deadline_at = at
        if key < self._deadline_from:
            self._deadline_from = key

    def _refresh_deadline(self) -> None:
        at = self.store.first_deadline(self._deadline_from)
        pending = self._batch_deadline_min
        if pending is not None and (at is None or pending < at):
            at = pending
        self._deadline_at = at

    def _derived_expiry(self, at: int) -> None:
        """A default-TTL message expiring at `at` was staged (it stores no timer)."""
        self._due_for_expiry(at)
        unstored = self._unstored_expiry  # (not in the store yet: _pending_expiry)
        first = unstored.get(self._gen)
        if first is None:
            self._forget_stored_expiry()
            unstored[self._gen] = at
        elif at < first:
            unstored[self._gen] = at

    def _due_for_expiry(self, at: int | None) -> None:
        if at is not None and (self._expiry_due is None or at < self._expiry_due):
            self._expiry_due = at

    def _expire_heads(self, now_ms: int) -> None:
        """Derived TTL expiry: a message with its sub-queue's default TTL stores no timer
        (a put per message saved, and a delete per complete). Such messages expire in the
        order they were enqueued (expiry = enqueued time + the one default TTL), and a message
        with a TTL of its own has a shorter one and a timer, so the scan from the oldest stored
        message on stops at the first live default-TTL one that is not due: no default-TTL
        message behind it is. Due messages it passes are expired whatever their TTL.
        (If the clock stepped back or the default TTL changed, a message can expire late here,
        never early; like Azure, which expires lazily, a receiver never gets an expired
        message: take_next checks.)"""
        self._expiry_due = None
        budget = DEADLINES_PER_TICK
        for sq in list(self.queues.values()):
            if sq.settings.default_ttl_ms is None:
                continue
            at = self._expire_head(sq, now_ms, budget)
            if at is not None and at <= now_ms:
                self._expiry_due = now_ms  # the tick's share is used up: the next goes on
                return
            self._due_for_expiry(at)

    def _expire_head(self, sq: SubQueue, now_ms: int, budget: int) -> int | None:
        """Expire the due messages at the head of one sub-queue (at most `budget` looked at);
        returns when its head is due next (now_ms: the budget ran out; None: nothing live)."""
        name, overlay, locks = sq.name, self._overlay, sq.locks
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
                self._expire(sq, rec, now_ms)
            if len(rows) < chunk:
                return self._pending_expiry(sq, now_ms)

    def _pending_expiry(self, sq: SubQueue, now_ms: int) -> int | None:
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
            oldest = self._taken_gens[0] if self._taken_gens else self._gen
            for gen in [g for g in unstored if g < oldest]:
                del unstored[gen]

    def _remove(self, sq: SubQueue, rec: MessageRecord) -> None:
        """Delete a stored message from its sub-queue (and its timer)."""
        seq = rec.sequence_number
        self._delete(sq, seq)
        key = self._deadline_key(sq, rec)
        if key is not None:
            self._batch.delete_deadline(key)
        self._count(sq, rec.state, -1, -rec.size)
        if sq.settings.requires_session:
            sess = sq.sessions.get(rec.session_id or "")
            if sess is not None:
                if sq.scanned(seq):
                    sess.messages -= 1
                sess.ready_set.discard(seq)
        else:
            sq.back_set.discard(seq)

    # ---------------------------------------------------------------- writes
    def _put(self, sq: SubQueue, rec: MessageRecord) -> None:
        """Write a visible message: seen at once through the overlay, stored at the commit."""
        seq = rec.sequence_number
        self._batch.put(sq.name, seq, encode_message(rec))
        self._remember(sq.name, seq, rec)
        if seq in sq.buffer:
            sq.buffer[seq] = rec
        self._dirty()

    def _delete(self, sq: SubQueue, seq: int) -> None:
        self._batch.delete(sq.name, seq)
        self._remember(sq.name, seq, None)
        sq.buffer.pop(seq, None)
        self._dirty()

    def _remember(self, queue: str, seq: int, rec: MessageRecord | None) -> None:
        key = (queue, seq)
        self._overlay[key] = (rec, self._gen)
        keys = self._gen_keys.get(self._gen)
        if keys is None:
            keys = self._gen_keys[self._gen] = []
        keys.append(key)

    def _log(
        self, sq: SubQueue, event: LogEvent, rec: MessageRecord, now_ms: int, reason: str | None = None
    ) -> None:
        self._log_run(sq, event, (rec,), now_ms, reason)

    def _log_run(
        self,
        sq: SubQueue,
        event: LogEvent,
        recs: list[MessageRecord] | tuple[MessageRecord, ...],
        now_ms: int,
        reason: str | None = None,
    ) -> None:
        """Log one event for each of `recs` (messages of one sub-queue), in order."""
        prefix = log_prefix(self.namespace, self.entity, sq.name, self.partition_id)
        with_body = self.log_bodies
        put = self._batch.log.append
        offset = self._next_offset
        for rec in recs:
            put((offset, encode_log_after(prefix, offset, event, rec, now_ms, reason, with_body)))
            offset += 1
        self._next_offset = offset
        self.stats.events[event] += len(recs)
        self._batch.meta["next_log_offset"] = offset
        self._dirty()

    def remember_ids(self, ids: list[bytes], now_ms: int, sweep_before: int, done: Done) -> None:
        """Store duplicate-detection history in the next commit (with the messages it admits)
        and sweep history older than `sweep_before` in the same transaction; `done` after."""
        self._batch.dedup.extend((mid, now_ms) for mid in ids)
        self._batch.dedup_sweep_before = sweep_before
        self.after_commit(done)

    def put_forward_markers(self, keys: list[bytes], present: bool) -> None:
        """Write (or delete) auto-forwarding markers in the next commit (see forwarding.py)."""
        self._batch.markers.extend((k, present) for k in keys)
        self._dirty()

    def forward_out(
        self,
        queue: str,
        seq: int,
        now_ms: int,
        to_queue: str | None = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> None:
        """A message left a forwarding sub-queue: removed (forwarded), or moved to `to_queue`
        (the transfer dead-letter queue) with a dead-letter reason."""
        sq = self.queues[queue]
        rec = self._get(sq, seq)
        if rec is None:
            return
        sq.unready(rec)
        self._remove(sq, rec)
        if to_queue is None:
            self._log(sq, LogEvent.COMPLETED, rec, now_ms, reason)
            return
        target = self.queues[to_queue]
        moved = rec.copy()
        moved.state = MessageState.ACTIVE
        moved.dead_letter_reason = reason
        moved.dead_letter_description = description
        self._put(target, moved)
        self._count(target, MessageState.ACTIVE, 1, moved.size)
        if target.settings.requires_session:
            target.count_session(moved, 1)
        target.make_ready(moved)
        self._log(sq, LogEvent.DEADLETTERED, rec, now_ms, reason)
        self.on_ready(to_queue)

    def after_commit(self, done: Done) -> None:
        """Run `done` once the writes queued so far are committed."""
        self._callbacks.append(done)
        self._dirty()

    def _dirty(self) -> None:
        # Lazy writes (the log record of a peek-lock delivery, a completion the client
        # settled without waiting for the outcome) need not be durable before anything is
        # answered: they ride with the partition's next commit (a send's), or go at the next
        # timer tick, instead of each costing a commit of its own (with a send, three
        # commits per message at low rates). A batch past LAZY_MAX_WRITES commits at once.
        if self._lazy and len(self._batch.log) < LAZY_MAX_WRITES:
            self._mark_lazy(self)  # type: ignore[misc]  # _lazy is only set with a _mark_lazy
        else:
            self._mark_dirty(self)

    def take_commit(self) -> tuple[WriteBatch, list[Done]] | None:
        """Hand the pending writes and their completions to the committer (None: nothing)."""
        if self._counts_dirty:
            meta, sent = self._batch.meta, self._counts_sent
            for sq in self._counts_dirty:
                name = sq.name
                for k, n in zip("adsb", (*sq.counts, max(sq.bytes, 0)), strict=True):
                    key = f"n:{name}:{k}"
                    if sent.get(key) != n:
                        meta[key] = sent[key] = n
            self._counts_dirty.clear()
        if not self._batch and not self._callbacks:
            return None
        batch, callbacks = self._batch, self._callbacks
        self._batch, self._callbacks = WriteBatch(), []
        self._taken_gens.append(self._gen)
        self._gen += 1
        self._batch_deadline_min = None
        return batch, callbacks

    def _landed(self, committed: bool) -> None:
        """The oldest taken batch is done: its overlay entries are in the store now (or, if
        it failed, the store is the truth again); the sub-queues it wrote may have ready
        messages past their scan."""
        if not self._taken_gens:
            return
        gen = self._taken_gens.pop(0)
        overlay = self._overlay
        touched: set[str] = set()
        for key in self._gen_keys.pop(gen, ()):
            hit = overlay.get(key)
            if hit is not None and hit[1] == gen:
                del overlay[key]
                if hit[0] is not None:
                    touched.add(key[0])
        if committed:
            for name in touched:
                sq = self.queues.get(name)
                if sq is not None and not sq.settings.requires_session:
                    sq.more = True

    @property
    def batch_number(self) -> int:
        """Which batch the writes staged now go into: it changes each time take_commit() hands
        the gathered writes to the committer."""
        return self._gen

    @property
    def accepting(self) -> bool:
        """Whether new messages may fit: the stored bytes are below MaxSizeInMegabytes and no
        send was refused for the quota since messages were last removed, and the store's disk
        has room beyond its reserve (PartitionStore.measure_room)."""
        return not self.store.room_low and (self.max_bytes <= 0 or (
            self.stored_bytes < self.max_bytes and self._full_at is None
        ))

    def disk_full_error(self) -> ServerBusy:
        """What a send gets while the store's disk is low on room (server-busy: the SDKs
        retry it; receives and completions go on and make room)."""
        where = f"partition {self.partition_id} of '{self.entity}'"
        return ServerBusy(
            f"The disk under {where} is almost full (what is left is kept for completions): "
            "no new messages until there is room again. "
            "Receive or delete messages, or give the disk room; the send can be retried."
        )

    def check_room(self, now_ms: int) -> None:
        """While the store's disk is low on room: measure it again (at most every
        ROOM_RECHECK_MS), so sends are taken again once there is room (messages removed, the
        disk grown) even when nothing commits meanwhile."""
        if now_ms - self._room_checked_ms >= ROOM_RECHECK_MS:
            self._room_checked_ms = now_ms
            self.store.measure_room()

    def quota_error(self, incoming: int) -> ServiceBusError | None:
        """Azure's quota error if `incoming` more bytes do not fit (None: they fit); the
        disk_full_error() while the disk is low on room."""
        store = self.store
        if store.room_low or (store.room_bytes is not None and 2 * incoming > store.room_bytes):
            return self.disk_full_error()  # (twice the bytes: LMDB's pages, a commit's copies)
        if self.max_bytes <= 0 or self.stored_bytes + incoming <= self.max_bytes:
            return None
        where = f"'{self.entity}'" + (f" partition {self.partition_id}" if self.partitioned else "")
        return QuotaExceeded(
            f"The maximum entity size has been reached or exceeded for {where}. Size of entity "
            f"in bytes:{self.stored_bytes}, Max entity size in bytes:{self.max_bytes}. "
            "Receive or delete messages to make room; sends are accepted again as soon as "
            "they fit."
        )

    def refuse_over_quota(self, incoming: int) -> ServiceBusError | None:
        """quota_error(), and if there is no room the partition counts as full (accepting is
        False) until messages are removed."""
        error = self.quota_error(incoming)
        if isinstance(error, QuotaExceeded):
            self._full_at = self.stored_bytes
        return error

    def commit_done(self, callbacks: list[Done], error: BaseException | None) -> None:
        """Run the completions of a committed (or failed) batch, in order.

        A failed commit leaves the store as it was before the batch, so the partition forgets
        every change not yet committed (the failed batch and the one gathered meanwhile, both
        answered with the error) and reads its state back from the store: held locks end
        (settling them fails with lock-lost; the messages are delivered again), nothing
        acknowledged is touched. A full LMDB map is grown at once (the partition stays in
        service; the completions get server-busy, which the SDKs retry); an I/O fault takes
        the partition out of service until recover() reopens the store.
        """
        self._landed(error is None)
        if error is None:
            self._fault_backoff_ms = FAULT_RETRY_MS  # (recover() alone does not reset it)
            # No read of the timers here: the next timer time stays a lower bound. Timers added
            # lowered it as they were staged, and one removed (a completed message's expiry)
            # only makes the tick that reaches it look early; _fire_deadlines then finds
            # nothing due and reads the true first timer. (This was a read transaction per
            # commit on the loop thread.)
            for cb in callbacks:
                cb(None)
            return
        pending = self._forget_pending()
        failure = self.store_failed(error)
        for cb in callbacks + pending:
            cb(failure)

    def store_failed(self, error: BaseException) -> ServiceBusError:
        """Record a store fault on this partition (no commit may be in flight); returns the
        error to report. A full map grows and the partition reloads from its store; any other
        fault (or a map that cannot grow) takes the partition out of service."""
        where = f"partition {self.partition_id} of '{self.entity}'"
        if isinstance(error, StoreFull) and not self._taken_gens and self.store.grow():
            try:
                self._reload()
            except StoreError as exc:
                error = exc
            else:
                return ServerBusy(
                    f"The store of {where} was full and has grown to {self.store.map_size} "
                    "bytes; the operation can be retried."
                )
        self.healthy = False
        self.store_fault = True
        self.fault_retry_at_ms = None  # the next recover(now_ms) schedules the first retry
        self.unhealthy_reason = f"store fault: {error}"
        return ServerBusy(f"The store of {where} is unavailable: {error}")

    def recover(self, now_ms: int) -> bool:
        """After a store fault: reopen the store and reload the partition once the retry time
        has come (backing off while the fault lasts). No commit may be in flight; the
        router's timer calls it for unhealthy partitions. True: back in service."""
        if not self.store_fault or self.held_offline or self._taken_gens:
            return False  # (a batch still in flight must land before the store is reopened)
        if self.fault_retry_at_ms is None:
            self.fault_retry_at_ms = now_ms + self._fault_backoff_ms
            return False
        if now_ms < self.fault_retry_at_ms:
            return False
        try:
            self.store.reopen()
            self._reload()
        except StoreError as exc:
            self._fault_backoff_ms = min(self._fault_backoff_ms * 2, FAULT_RETRY_MAX_MS)
            self.fault_retry_at_ms = now_ms + self._fault_backoff_ms
            self.unhealthy_reason = f"store fault: {exc}"
            return False
        # The next wait is longer until a commit lands (commit_done resets it): a store that
        # opens but fails every commit (a full disk) is retried less and less often, not
        # reopened every second for good.
        self._fault_backoff_ms = min(self._fault_backoff_ms * 2, FAULT_RETRY_MAX_MS)
        self.store_fault = False
        self.fault_retry_at_ms = None
        self.set_online(True)
        return True

    def _forget_pending(self) -> list[Done]:
        """Drop the writes gathered since the last taken batch; returns their completions."""
        pending = self._callbacks
        self._batch, self._callbacks = WriteBatch(), []
        self._counts_dirty.clear()
        self._counts_sent.clear()
        return pending

    def _reload(self) -> None:
        """Forget every uncommitted change, lock and read-ahead and load the partition's
        state from the store again (as a restart of this partition would); the held session
        locks are reported lost. Raises StoreError if the store cannot be read."""
        lost = [
            sess.lock for sq in self.queues.values() for sess in sq.sessions.values()
            if sess.lock is not None
        ]  # fmt: skip
        self._epoch += 1
        for cb in self._forget_pending():  # (none when a failed commit led here)
            cb(ServerBusy(f"Partition {self.partition_id} of '{self.entity}' was reloaded."))
        self._overlay.clear()
        self._gen_keys.clear()
        self._taken_gens.clear()
        self.locks.clear()
        self._lock_heap.clear()
        self._session_heap.clear()
        for sq in self.queues.values():
            sq.clear()
        self._deadline_from = b""
        self._deadline_at = None
        self._batch_deadline_min = None
        self._batch_has_deadlines = False
        self.load()
        for lock in lost:
            self.on_session_lost(lock)
        self._announce_ready()

    def _announce_ready(self) -> None:
        for name, sq in self.queues.items():
            if sq.has_ready() or any(s.ready_set for s in sq.sessions.values()):
                self.on_ready(name)

    def set_online(self, online: bool, reason: str | None = None) -> None:
        """Take the partition out of service (operator command) or bring it back. After a
        store fault the store is reopened first; if it still fails the partition stays out."""
        self.held_offline = not online
        if online and self.store_fault:
            self.fault_retry_at_ms = -1  # at once
            self.recover(0)
            return
        self.healthy = online
        self.unhealthy_reason = None if online else (reason or "taken offline")
        if online:
            self._full_at = None  # sends are tried against the quota again
            self._announce_ready()

    # ---------------------------------------------------------------- sending
    def sequence_base(self) -> int:
        """The partition id shifted into the top 16 bits (0 on non-partitioned entities)."""
        return (self.partition_id << SEQUENCE_BITS) if self.partitioned else 0

    def enqueue(
        self,
        messages: list[IncomingMessage],
        routes: list[list[Route]],
        now_ms: int,
        done: Done,
    ) -> list[int | None]:
        """Store each message in the sub-queues its routes name; visible and acknowledged after
        the commit, all or nothing (one transaction).

        Returns each message's sequence number (None for a message routed nowhere). Copies of a
        message share its sequence number [Azure: topic sequence numbers], except a second copy
        in the same sub-queue (several rule actions matched), which gets a number of its own.
        """
        quota = self.refuse_over_quota(
            sum(msg.size * len(targets) for msg, targets in zip(messages, routes, strict=True))
        )
        if quota is not None:  # refused before anything is staged: answered after this turn
            self.after_commit(lambda _error: done(quota))
            return [None] * len(messages)
        staged: list[tuple[SubQueue, MessageRecord]] = []
        numbers: list[int | None] = []
        base = self.sequence_base()
        # The hot path of every send: what _put, _count, _add_deadline and _log do per
        # message, done once per call where it can be (counts, counters, log prefixes).
        batch, queues, new_record = self._batch, self.queues, self._new_record
        put_op, put_log = batch.ops.append, batch.log.append
        events, with_body = self.stats.events, self.log_bodies
        added: dict[tuple[SubQueue, MessageState], list[int]] = {}
        prefixes: dict[str, bytes] = {}
        derived: int | None = None  # the first expiry of the default-TTL messages staged
        next_seq, offset = self._next_seq, self._next_offset
        active = MessageState.ACTIVE
        for msg, targets in zip(messages, routes, strict=True):
            if not targets:
                numbers.append(None)
                continue
            seq = base | next_seq
            next_seq += 1
            numbers.append(seq)
            used: set[str] | None = None
            for route in targets:
                name = route.queue
                sq = queues[name]
                copy_seq = seq
                if used is None:
                    used = {name}
                elif name in used:
                    copy_seq = base | next_seq
                    next_seq += 1
                else:
                    used.add(name)
                rec = new_record(sq, msg, copy_seq, now_ms)
                if route.overrides:
                    rec.property_overrides = dict(route.overrides)
                if route.dead_letter_reason is not None:
                    rec.dead_letter_reason = route.dead_letter_reason
                    rec.dead_letter_description = route.dead_letter_description
                put_op((0, name, copy_seq, encode_message(rec)))
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
                else:
                    self._add_deadline(sq, rec)
                prefix = prefixes.get(name)
                if prefix is None:
                    prefix = prefixes[name] = log_prefix(
                        self.namespace, self.entity, name, self.partition_id
                    )
                event = LogEvent.SCHEDULED if state == MessageState.SCHEDULED else LogEvent.ENQUEUED
                events[event] += 1
                put_log((offset, encode_log_after(prefix, offset, event, rec, now_ms, None, with_body)))
                offset += 1
                if route.dead_letter_reason is not None:
                    events[LogEvent.DEADLETTERED] += 1
                    put_log((offset, encode_log_after(
                        prefix, offset, LogEvent.DEADLETTERED, rec, now_ms,
                        route.dead_letter_reason, with_body,
                    )))  # fmt: skip
                    offset += 1
                staged.append((sq, rec))
        self._next_seq, self._next_offset = next_seq, offset
        batch.meta["next_sequence"] = next_seq
        if staged:
            batch.meta["next_log_offset"] = offset
        for (sq, state), (count, size) in added.items():
            self._count(sq, state, count, size)
        if derived is not None:
            self._derived_expiry(derived)
        self._dirty()
        epoch = self._epoch

        def on_commit(error: Exception | None) -> None:
            if error is None:
                self.stats.incoming += len(messages)
                touched: set[str] = set()
                for sq, rec in staged:
                    if sq.settings.requires_session:
                        sq.count_session(rec, 1)
                        if rec.state == MessageState.ACTIVE:
                            sq.make_ready(rec)
                    elif (
                        not sq.more
                        and rec.state == MessageState.ACTIVE
                        and len(sq.buffer) < READ_AHEAD
                        and rec.sequence_number >= sq.scan_from
                    ):
                        # The scan had reached the end of the store and the new message is
                        # the next one: it joins the read-ahead as it is, without a read
                        # transaction and a decode of what was just written (a receiver
                        # keeping up gets each message straight from its commit).
                        sq.buffer[rec.sequence_number] = rec
                        sq.scan_from = rec.sequence_number + 1
                    else:
                        sq.more = True  # the store now holds it past the scan
                    touched.add(sq.name)
                for name in touched:
                    self.on_ready(name)
            elif self._epoch == epoch:  # (after a reload the counts come from the store)
                for sq, rec in staged:
                    self._count(sq, rec.state, -1, -rec.size)
            done(error)

        self.after_commit(on_commit)
        return numbers

    @staticmethod
    def _new_record(
        sq: SubQueue, msg: IncomingMessage, seq: int, now_ms: int
    ) -> MessageRecord:
        # The effective TTL is the smaller of the message's and the entity's default.
        ttl = msg.ttl_ms
        default = sq.settings.default_ttl_ms
        if default is not None and (ttl is None or ttl == 0 or ttl > default):
            ttl = default
        scheduled = msg.scheduled_enqueue_time_ms
        state = MessageState.ACTIVE
        if scheduled is not None and scheduled > now_ms:
            state = MessageState.SCHEDULED
        else:
            scheduled = None
        start = scheduled if scheduled is not None else now_ms
        return MessageRecord(  # positional (one call per message): the fields in their order
            seq, now_ms, state, 0, msg.message_id, msg.session_id, msg.partition_key, ttl,
            (start + ttl) if ttl is not None else None, msg.durable, msg.priority,
            msg.annotation_count, msg.annotations, msg.tail, msg.size, scheduled,
            None, None, None, None,  # dead-letter reason, description, source; overrides
            msg.original_sequence_number, msg.properties_span, msg.body_span, msg.transfer_hops,
        )

    # ---------------------------------------------------------------- delivery
    def has_ready(self, queue: str) -> bool:
        """Whether a sub-queue has a message waiting (outside sessions)."""
        return self.queues[queue].has_ready()

    def take_next(
        self,
        queue: str,
        now_ms: int,
        peek_lock: bool,
        session: SessionLock | None = None,
    ) -> tuple[MessageRecord, Lock | None] | None:
        """Take the next deliverable message: locked (peek-lock) or removed (receive-and-delete).

        With `session`, only that session's messages, and only while its lock is live.
        """
        sq = self.queues[queue]
        if session is not None:
            sess = sq.sessions.get(session.session_id)
            if sess is None or sess.lock is not session or session.until_ms <= now_ms:
                return None
        while True:
            rec = self._pop_ready(sq, session.session_id if session is not None else None)
            if rec is None:
                return None
            if session is not None:
                self.touch_session(session, now_ms)  # a delivery is activity on the session
            if rec.expires_at_ms is not None and rec.expires_at_ms <= now_ms and sq.settings.expires:
                self._expire(sq, rec, now_ms)
                continue
            if peek_lock:
                return rec, self._lock(sq, rec, now_ms, session)
            # Receive-and-delete: consumed when put on the wire [contract 4.2].
            self._remove(sq, rec)
            self._log(sq, LogEvent.DELIVERED, rec, now_ms)
            self._log(sq, LogEvent.COMPLETED, rec, now_ms)
            return rec, None

    def take_batch(
        self, queue: str, now_ms: int, limit: int
    ) -> list[tuple[MessageRecord, Lock | None]]:
        """Up to `limit` messages peek-locked for a receiver outside sessions: what as many
        take_next calls would give, in one call (the receive hot path: a dispatch takes a
        run of messages from a partition, not one message per call down the stack)."""
        sq = self.queues[queue]
        out: list[tuple[MessageRecord, Lock | None]] = []
        if sq.settings.requires_session:
            return out
        pop = self._pop_ready
        expires = sq.settings.expires
        until = now_ms + sq.settings.lock_duration_ms
        pid = self.partition_id
        sq_locks, locks, heap, push = sq.locks, self.locks, self._lock_heap, heapq.heappush
        try:
            while len(out) < limit:
                rec = pop(sq, None)
                if rec is None:
                    break
                at = rec.expires_at_ms
                if at is not None and at <= now_ms and expires:
                    self._expire(sq, rec, now_ms)
                    continue
                # _lock() for a message outside sessions, its log record lazy (see _dirty)
                seq = rec.sequence_number
                key = make_lock_key(pid)
                lock = Lock(key, sq, seq, until, None, rec)
                sq_locks[seq] = lock
                locks[key] = lock
                push(heap, (until, seq, key))
                out.append((rec, lock))
        except StoreError:
            if not out:
                raise  # nothing taken: the caller sees the fault as from take_next
            # else: hand over what was locked; the next take meets the fault again
        finally:
            if out:
                self._lazy = self._mark_lazy is not None
                try:
                    self._log_run(sq, LogEvent.DELIVERED, [rec for rec, _ in out], now_ms)
                finally:
                    self._lazy = False
        return out

    def take_deferred(
        self, queue: str, seq: int, now_ms: int, peek_lock: bool
    ) -> tuple[MessageRecord, Lock | None]:
        """Fetch a deferred message by sequence number: locked, or removed (receive-and-delete)."""
        sq = self.queues[queue]
        rec = None if seq in sq.locks else self._get(sq, seq)
        if rec is None or rec.state != MessageState.DEFERRED:
            raise MessageNotFound(
                f"Failed to lock one or more specified messages. Either the message is already "
                f"locked or it does not exist. The sequence number {seq} is not a deferred "
                "message that can be received."
            )
        if peek_lock:
            return rec, self._lock(sq, rec, now_ms)
        self._remove(sq, rec)
        self._log(sq, LogEvent.DELIVERED, rec, now_ms)
        self._log(sq, LogEvent.COMPLETED, rec, now_ms)
        return rec, None

    def _lock(
        self, sq: SubQueue, rec: MessageRecord, now_ms: int, session: SessionLock | None = None
    ) -> Lock:
        until = session.until_ms if session is not None else now_ms + sq.settings.lock_duration_ms
        lock = Lock(make_lock_key(self.partition_id), sq, rec.sequence_number, until, session, rec)
        sq.locks[rec.sequence_number] = lock
        self.locks[lock.key] = lock
        if session is None:  # a session's message locks end with the session lock
            heapq.heappush(self._lock_heap, (lock.until_ms, rec.sequence_number, lock.key))
        # A lock is memory only; its log record may ride with the next commit (see _dirty).
        self._lazy = self._mark_lazy is not None
        try:
            self._log(sq, LogEvent.DELIVERED, rec, now_ms)
        finally:
            self._lazy = False
        return lock

    def _expire(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """A message outlived its TTL: dead-letter it or drop it."""
        sq.unready(rec)
        if sq.settings.dead_letter_on_expiration and sq.settings.dead_letter_queue:
            self._move_to_dlq(
                sq, rec, now_ms, TTL_EXPIRED_REASON, "The message expired and was dead lettered."
            )
        else:
            self._remove(sq, rec)
            self._log(sq, LogEvent.EXPIRED, rec, now_ms)

    def _move_to_dlq(
        self,
        sq: SubQueue,
        rec: MessageRecord,
        now_ms: int,
        reason: str | None,
        description: str | None,
        overrides: dict[str, bytes] | None = None,
    ) -> None:
        assert sq.settings.dead_letter_queue is not None
        dlq = self.queues[sq.settings.dead_letter_queue]
        sq.unready(rec)
        self._remove(sq, rec)
        moved = rec.copy()
        moved.state = MessageState.ACTIVE
        moved.dead_letter_reason = reason
        moved.dead_letter_description = description
        moved.dead_letter_source = None
        _merge_overrides(moved, overrides)
        self._put(dlq, moved)
        self._count(dlq, MessageState.ACTIVE, 1, moved.size)
        if dlq.settings.requires_session:
            dlq.count_session(moved, 1)
        dlq.make_ready(moved)
        self._log(sq, LogEvent.DEADLETTERED, rec, now_ms, reason)
        self.on_ready(dlq.name)

    # ---------------------------------------------------------------- settlement
    def _live_lock(self, token: uuid.UUID, now_ms: int) -> Lock:
        lock = self.locks.get(token.int)
        if lock is not None and lock.session is not None:
            session = lock.session
            current = lock.queue.sessions.get(session.session_id)
            if current is None or current.lock is not session or session.until_ms <= now_ms:
                raise SessionLockLost(
                    f"The session lock for session '{session.session_id}' was lost. "
                    "Accept the session again."
                )
            return lock
        if lock is None or lock.until_ms <= now_ms:
            raise MessageLockLost(
                "The lock supplied is invalid. Either the lock expired, or the message has "
                "already been removed from the queue."
            )
        return lock

    def _unlock(self, lock: Lock) -> MessageRecord:
        del self.locks[lock.key]
        del lock.queue.locks[lock.seq]
        self._trim_lock_heap()
        assert lock.record is not None  # every lock carries its message
        return lock.record

    def _trim_lock_heap(self) -> None:
        """Settled and renewed locks leave their heap entry until it is due (a lock duration
        later): draining 5k msg/s under a 1-minute lock would keep 300k of them (~70 MB).
        Once stale entries outnumber live locks, rebuild from the live ones, in place
        (on_timer may be popping this very list)."""
        heap = self._lock_heap
        if len(heap) > 2 * len(self.locks) + LOCK_HEAP_SLACK:
            heap[:] = [(k.until_ms, k.seq, k.key) for k in self.locks.values() if k.session is None]
            heapq.heapify(heap)

    def complete(
        self, token: uuid.UUID, now_ms: int, done: Done | None, lazy: bool = False
    ) -> None:
        """Delete a locked message; `done` runs after the commit (None: nobody waits).

        `lazy`: the client settled its accept without waiting for an outcome, so the
        deletion may wait for the partition's next commit or the next timer tick (an
        unconfirmed completion may come back after a crash: at least once)."""
        lock = self._live_lock(token, now_ms)
        rec = self._unlock(lock)
        sq = lock.queue
        self._lazy = lazy and self._mark_lazy is not None
        try:
            self._remove(sq, rec)
            self._log(sq, LogEvent.COMPLETED, rec, now_ms)
            if done is not None:
                self.after_commit(done)
        finally:
            self._lazy = False

    def complete_lazy(self, keys: list[int], now_ms: int) -> None:
        """complete(token, now_ms, None, lazy=True) for each lock token (by its int), in
        order, a lost lock skipped: nobody waits for these outcomes (pre-settled accepts), so
        a message whose lock was lost comes back as if its lock had expired, unannounced."""
        locks = self.locks
        run: list[MessageRecord] = []  # completed messages of `sq`, logged together
        sq: SubQueue | None = None
        self._lazy = self._mark_lazy is not None
        try:
            for key in keys:
                lock = locks.get(key)
                if lock is None:
                    continue
                if lock.session is None:
                    if lock.until_ms <= now_ms:
                        continue
                else:
                    try:
                        self._live_lock(lock.token, now_ms)  # the session's lock must be held
                    except ServiceBusError:
                        continue
                if lock.queue is not sq:
                    if run and sq is not None:
                        self._log_run(sq, LogEvent.COMPLETED, run, now_ms)
                        run = []
                    sq = lock.queue
                # _unlock(), the lock heap trimmed once for the whole run
                del locks[key]
                del sq.locks[lock.seq]
                rec = lock.record
                assert rec is not None  # every lock carries its message
                self._remove(sq, rec)
                run.append(rec)
            if run and sq is not None:
                self._log_run(sq, LogEvent.COMPLETED, run, now_ms)
        finally:
            self._lazy = False
            self._trim_lock_heap()

    def abandon(
        self, token: uuid.UUID, now_ms: int, overrides: dict[str, bytes] | None, done: Done
    ) -> None:
        """Unlock with delivery count + 1; dead-letter when MaxDeliveryCount is reached."""
        lock = self._live_lock(token, now_ms)
        rec = self._unlock(lock)
        self._redeliver(lock.queue, rec, now_ms, overrides, LogEvent.ABANDONED)
        self.after_commit(done)

    def release(self, token: uuid.UUID, now_ms: int) -> None:
        """Unlock without counting a delivery attempt [contract 4.7]."""
        lock = self.locks.get(token.int)
        if lock is None:
            return
        rec = self._unlock(lock)
        if rec.state == MessageState.ACTIVE:
            lock.queue.make_ready(rec)
        self._log(lock.queue, LogEvent.RELEASED, rec, now_ms)
        self.on_ready(lock.queue.name)

    def _redeliver(
        self,
        sq: SubQueue,
        rec: MessageRecord,
        now_ms: int,
        overrides: dict[str, bytes] | None,
        event: LogEvent,
    ) -> None:
        rec.delivery_count += 1
        _merge_overrides(rec, overrides)
        limit = sq.settings.max_delivery_count
        if rec.state == MessageState.DEFERRED:
            # A deferred message stays deferred when its lock ends [Azure: deferral].
            self._put(sq, rec)
            self._log(sq, event, rec, now_ms)
            return
        if limit is not None and rec.delivery_count >= limit and sq.settings.dead_letter_queue:
            self._log(sq, event, rec, now_ms)
            self._move_to_dlq(
                sq,
                rec,
                now_ms,
                MAX_DELIVERY_COUNT_REASON,
                f"Message could not be consumed after {limit} delivery attempts.",
            )
            return
        self._put(sq, rec)
        self._log(sq, event, rec, now_ms)
        sq.make_ready(rec)
        self.on_ready(sq.name)

    def defer(
        self, token: uuid.UUID, now_ms: int, overrides: dict[str, bytes] | None, done: Done
    ) -> None:
        """Set a locked message aside; it is fetched later by sequence number."""
        lock = self._live_lock(token, now_ms)
        rec = self._unlock(lock)
        self._count(lock.queue, rec.state, -1)
        rec.state = MessageState.DEFERRED
        self._count(lock.queue, rec.state, 1)
        _merge_overrides(rec, overrides)
        self._put(lock.queue, rec)
        self._log(lock.queue, LogEvent.DEFERRED, rec, now_ms)
        self.after_commit(done)

    def dead_letter(
        self,
        token: uuid.UUID,
        now_ms: int,
        reason: str | None,
        description: str | None,
        overrides: dict[str, bytes] | None,
        done: Done,
    ) -> None:
        """Move a locked message to the dead-letter queue with reason and description."""
        lock = self._live_lock(token, now_ms)
        rec = self._unlock(lock)
        sq = lock.queue
        if sq.settings.dead_letter_queue is None:
            raise ServiceBusError("A message in a dead-letter queue cannot be dead-lettered again.")
        self._move_to_dlq(sq, rec, now_ms, reason, description, overrides)
        self.after_commit(done)

    def renew(self, token: uuid.UUID, now_ms: int) -> int:
        """Extend a lock by the lock duration from now; returns the new locked-until (ms)."""
        lock = self._live_lock(token, now_ms)
        if lock.session is not None:
            raise InvalidOperation(
                "The lock of a message received from a session cannot be renewed; renew the "
                "session lock instead."
            )
        lock.until_ms = now_ms + lock.queue.settings.lock_duration_ms
        heapq.heappush(self._lock_heap, (lock.until_ms, lock.seq, lock.key))
        self._trim_lock_heap()
        return lock.until_ms

    def lock_of(self, token: uuid.UUID) -> Lock | None:
        """The live lock for a token, if any (no expiry check)."""
        return self.locks.get(token.int)

    # ---------------------------------------------------------------- browsing
    def peek(
        self, queue: str, from_seq: int, count: int, session_id: str | None = None
    ) -> list[MessageRecord]:
        """Up to `count` messages with sequence number >= from_seq, oldest first (locks ignored)."""
        sq = self.queues[queue]
        pending = {
            seq: rec for (name, seq), (rec, _gen) in self._overlay.items()
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

    def remove(self, queue: str, seq: int, now_ms: int) -> MessageRecord | None:
        """Operator removal of one unlocked message (dashboard purge / resubmit), logged as
        completed; None when it is gone or locked. Durable with the next commit."""
        sq = self.queues[queue]
        if seq in sq.locks:
            return None
        rec = self._get(sq, seq)
        if rec is None:
            return None
        sq.unready(rec)
        self._remove(sq, rec)
        self._log(sq, LogEvent.COMPLETED, rec, now_ms)
        return rec

    def contains(self, queue: str, seq: int) -> bool:
        """Whether a sub-queue holds the message now (uncommitted changes included)."""
        sq = self.queues.get(queue)
        return sq is not None and self._get(sq, seq) is not None

    def make_ready(self, queue: str, rec: MessageRecord) -> None:
        """Put a message taken out of line (take_ready) back in line, if it is still stored."""
        sq = self.queues.get(queue)
        if sq is not None and self._get(sq, rec.sequence_number) is not None:
            sq.make_ready(rec)

    def take_ready(self, queue: str, limit: int) -> list[MessageRecord]:
        """Up to `limit` ready messages of a sub-queue, oldest first, across its sessions
        too, taken out of line without a lock (the forwarder's outbox step); each is put back
        with make_ready or removed with forward_out."""
        sq = self.queues[queue]
        out: list[MessageRecord] = []
        if not sq.settings.requires_session:
            while len(out) < limit:
                rec = self._pop_ready(sq, None)
                if rec is None:
                    break
                out.append(rec)
            return out
        self._scan_sessions(sq, SESSION_SCAN_CHUNK)  # a restart's scan advances (if running)
        heads: list[tuple[int, str]] = []
        for sid, sess in sq.sessions.items():
            live = [s for s in sess.ready if s in sess.ready_set]
            if live:
                heads.append((min(live), sid))
        heapq.heapify(heads)
        while heads and len(out) < limit:
            _, sid = heapq.heappop(heads)
            rec = self._pop_ready(sq, sid)
            if rec is None:
                continue
            out.append(rec)
            sess = sq.sessions[sid]
            live = [s for s in sess.ready if s in sess.ready_set]
            if live:
                heapq.heappush(heads, (min(live), sid))
        out.sort(key=lambda r: r.sequence_number)
        return out

    def has_ready_any(self, queue: str) -> bool:
        """Whether a sub-queue may have a ready message, in or outside sessions."""
        sq = self.queues.get(queue)
        return sq is not None and (
            sq.has_ready() or any(s.ready_set for s in sq.sessions.values())
        )

    def counts(self, queue: str) -> dict[str, int]:
        """Runtime counts of a sub-queue, as Azure reports them."""
        active, deferred, scheduled = self.queues[queue].counts
        return {"active": active, "deferred": deferred, "scheduled": scheduled}

    # ---------------------------------------------------------------- time
    def on_timer(self, now_ms: int) -> None:
        """Expire locks and messages, activate scheduled messages that are due."""
        heap = self._lock_heap
        while heap and heap[0][0] <= now_ms:
            until, _seq, key = heapq.heappop(heap)
            lock = self.locks.get(key)
            if lock is None or lock.until_ms != until:
                continue  # settled, or renewed (a newer heap entry exists)
            rec = self._unlock(lock)
            self._redeliver(lock.queue, rec, now_ms, None, LogEvent.LOCK_EXPIRED)
        sessions = self._session_heap
        while sessions and sessions[0][0] <= now_ms:
            until, name, session_id = heapq.heappop(sessions)
            sess = self.queues[name].sessions.get(session_id)
            if sess is None or sess.lock is None or sess.lock.until_ms != until:
                if sess is not None and sess.lock is not None:
                    self._rearm_session(sess.lock, until)
                continue  # released, or renewed
            lost = sess.lock
            self._end_session(lost, now_ms, count_delivery=True)
            self.on_session_lost(lost)
        if self._deadline_at is not None and self._deadline_at <= now_ms:
            self._fire_deadlines(now_ms)
        if self._expiry_due is not None and self._expiry_due <= now_ms:
            self._expire_heads(now_ms)
        for sq in list(self._session_scans()):
            self._scan_sessions(sq, SESSION_SCAN_CHUNK)

    def _fire_deadlines(self, now_ms: int) -> None:
        """TTL expiry and scheduled activation from the timers on disk, oldest first."""
        keys = self.store.due_deadlines(self._deadline_from, now_ms, DEADLINES_PER_TICK)
        for key in keys:
            self._deadline_from = key + b"\x00"  # the next key after this one
            self._batch.delete_deadline(key)
            self._dirty()
            at, kind, seq, name = parse_deadline_key(key)
            sq = self.queues.get(name)
            if sq is None:
                continue
            rec = self._get(sq, seq)
            if rec is None:
                continue
            if kind == EXPIRY:
                if not sq.settings.expires:
                    continue  # the sub-queue's settings changed: its messages no longer expire
                if seq in sq.locks or rec.state != MessageState.ACTIVE or rec.expires_at_ms != at:
                    continue  # locked: checked again when it comes back; or no longer active
                self._expire(sq, rec, now_ms)
            elif rec.state == MessageState.SCHEDULED:
                self._activate(sq, rec, now_ms)
        if len(keys) >= DEADLINES_PER_TICK:
            self._deadline_at = now_ms  # more are due: the next tick goes on
        else:
            self._refresh_deadline()

    def _activate(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """A scheduled message is due: it is enqueued anew with a new sequence number [D3]."""
        if sq.name == SCHEDULED_QUEUE and self.fan_out is not None:
            self._fan_out(sq, rec, now_ms)
            return
        self._remove(sq, rec)
        new = rec.copy()
        new.sequence_number = self.sequence_base() | self._next_seq
        self._next_seq += 1
        self._batch.meta["next_sequence"] = self._next_seq
        new.state = MessageState.ACTIVE
        new.enqueued_time_ms = now_ms
        new.scheduled_enqueue_time_ms = rec.scheduled_enqueue_time_ms
        self._put(sq, new)
        self._count(sq, MessageState.ACTIVE, 1, new.size)
        self._add_deadline(sq, new)
        if sq.settings.requires_session:
            sq.count_session(new, 1)
        self._log(sq, LogEvent.ACTIVATED, new, now_ms)
        sq.make_ready(new)
        self.on_ready(sq.name)

    def _fan_out(self, sq: SubQueue, rec: MessageRecord, now_ms: int) -> None:
        """A topic's scheduled message is due: copy it to the subscriptions whose rules match
        now, each copy enqueued anew (one new sequence number shared by the copies), in the
        same transaction that removes it from the scheduled sub-queue."""
        assert self.fan_out is not None
        self._remove(sq, rec)
        self._log(sq, LogEvent.ACTIVATED, rec, now_ms)
        routes = self.fan_out(rec)
        if not routes:
            return
        base = self.sequence_base()
        seq = base | self._next_seq
        self._next_seq += 1
        used: set[str] = set()
        for route in routes:
            target = self.queues.get(route.queue)
            if target is None:
                continue
            copy_seq = seq
            if route.queue in used:
                copy_seq = base | self._next_seq
                self._next_seq += 1
            used.add(route.queue)
            new = self.restamp(target, rec, copy_seq, now_ms)
            new.scheduled_enqueue_time_ms = rec.scheduled_enqueue_time_ms
            if route.overrides:
                _merge_overrides(new, route.overrides)
            if route.dead_letter_reason is not None:
                new.dead_letter_reason = route.dead_letter_reason
                new.dead_letter_description = route.dead_letter_description
            self._put(target, new)
            self._count(target, MessageState.ACTIVE, 1, new.size)
            self._add_deadline(target, new)
            if target.settings.requires_session:
                target.count_session(new, 1)
            self._log(target, LogEvent.ENQUEUED, new, now_ms)
            target.make_ready(new)
            self.on_ready(target.name)
        self._batch.meta["next_sequence"] = self._next_seq

    @staticmethod
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

    def cancel_scheduled(self, queue: str, seq: int, now_ms: int) -> bool:
        """Drop a scheduled message by its sequence number; False if there is none."""
        sq = self.queues.get(queue)
        if sq is None:
            return False
        rec = self._get(sq, seq)
        if rec is None or rec.state != MessageState.SCHEDULED:
            return False
        self._remove(sq, rec)
        self._log(sq, LogEvent.CANCELLED, rec, now_ms)
        return True

    # ---------------------------------------------------------------- sessions
    def accept_session(
        self, queue: str, session_id: str | None, owner: object, now_ms: int
    ) -> SessionLock | None:
        """Lock a named session, or the next available one (None if there is none)."""
        sq = self.queues[queue]
        if session_id is None:
            sess = sq.available_session(now_ms)
            if sess is None and sq.session_scan is not None:
                # one chunk now (bounded); the timer ticks read the rest and wake waiters
                self._scan_sessions(sq, SESSION_SCAN_CHUNK)
                sess = sq.available_session(now_ms)
            if sess is None:
                return None
        else:
            sess = sq.session(session_id)
            if sess.locked(now_ms) and sess.lock is not None and sess.lock.owner is not owner:
                raise SessionCannotBeLocked(
                    f"The requested session '{session_id}' cannot be accepted. It may be locked "
                    "by another receiver."
                )
        lock = SessionLock(sq, sess.session_id, owner, now_ms + sq.settings.lock_duration_ms)
        sess.lock = lock
        self._arm_session(lock)
        return lock

    def _session_lock(
        self, queue: str, session_id: str, owner: object | None, now_ms: int
    ) -> SessionLock:
        sess = self.queues[queue].sessions.get(session_id)
        lock = sess.lock if sess is not None else None
        if lock is None or lock.until_ms <= now_ms or (owner is not None and lock.owner is not owner):
            raise SessionLockLost(
                f"The session lock for session '{session_id}' has expired or is not held by "
                "this receiver."
            )
        return lock

    def renew_session(self, queue: str, session_id: str, owner: object | None, now_ms: int) -> int:
        """Extend a session lock (and its message locks); returns the new locked-until (ms)."""
        lock = self._session_lock(queue, session_id, owner, now_ms)
        lock.until_ms = now_ms + lock.queue.settings.lock_duration_ms
        for msg_lock in lock.queue.locks.values():
            if msg_lock.session is lock:
                msg_lock.until_ms = lock.until_ms
        self._arm_session(lock)
        return lock.until_ms

    def touch_session(self, lock: SessionLock, now_ms: int) -> None:
        """Receive activity on a held session (a delivery, a receive request) keeps its lock:
        it expires only once the session stayed idle for the lock duration ("no operations
        performed on the session" [Azure SDK: SessionLockLostException]). A receive-and-delete
        session receiver that keeps receiving never loses its session, and one whose last
        receive waits out its max_wait_time closes before the lock ends."""
        sess = lock.queue.sessions.get(lock.session_id)
        if sess is None or sess.lock is not lock or lock.until_ms <= now_ms:
            return  # lost or released: activity does not bring a lock back
        until = now_ms + lock.queue.settings.lock_duration_ms
        if until > lock.until_ms:
            lock.until_ms = until  # no heap push per delivery: on_timer re-arms (_rearm_session)

    def _arm_session(self, lock: SessionLock) -> None:
        lock.armed_ms = lock.until_ms
        heapq.heappush(self._session_heap, (lock.until_ms, lock.queue.name, lock.session_id))

    def _rearm_session(self, lock: SessionLock, popped_ms: int) -> None:
        """The heap entry at `popped_ms` came due but the lock was extended since: one new
        entry at its current expiry (only for the lock's latest entry, so none doubles up)."""
        if popped_ms == lock.armed_ms and lock.until_ms > popped_ms:
            self._arm_session(lock)

    def session_owner(self, queue: str, session_id: str, now_ms: int) -> object | None:
        """Who holds a live lock on the session, if anyone."""
        sess = self.queues[queue].sessions.get(session_id)
        return sess.lock.owner if sess is not None and sess.locked(now_ms) and sess.lock else None

    def release_session(self, lock: SessionLock, now_ms: int) -> None:
        """The receiver closed: end its session lock; its unsettled messages become ready."""
        sess = lock.queue.sessions.get(lock.session_id)
        if sess is not None and sess.lock is lock:
            self._end_session(lock, now_ms, count_delivery=False)

    def _end_session(self, lock: SessionLock, now_ms: int, count_delivery: bool) -> None:
        sq = lock.queue
        sess = sq.sessions[lock.session_id]
        sess.lock = None
        for msg_lock in [m for m in sq.locks.values() if m.session is lock]:
            rec = self._unlock(msg_lock)
            if count_delivery:
                self._redeliver(sq, rec, now_ms, None, LogEvent.LOCK_EXPIRED)
            else:
                if rec.state == MessageState.ACTIVE:
                    sq.make_ready(rec)
                self._log(sq, LogEvent.RELEASED, rec, now_ms)
        if sess.ready_set:
            self.on_ready(sq.name)

    def get_session_state(self, queue: str, session_id: str) -> bytes | None:
        """A session's stored state (None if it has none)."""
        sess = self.queues[queue].sessions.get(session_id)
        return sess.state if sess is not None else None

    def set_session_state(
        self, queue: str, session_id: str, state: bytes | None, now_ms: int, done: Done
    ) -> None:
        """Store (or clear) a session's state durably; `done` runs after the commit."""
        sess = self.queues[queue].session(session_id)
        sess.state = state
        sess.state_changed_ms = now_ms
        self._batch.put_session_state(queue, session_id, state)
        self._dirty()
        self.after_commit(done)

    def session_ids(self, queue: str, changed_after_ms: int | None = None) -> list[str]:
        """Sessions with messages or state (or, with changed_after_ms, whose state changed since)."""
        sq = self.queues[queue]
        self._scan_sessions(sq)  # a restart's scan not yet through: finish it (once)
        if changed_after_ms is not None:
            return sorted(
                sid for sid, sess in sq.sessions.items() if sess.state_changed_ms > changed_after_ms
            )
        with_messages = {sid for sid, sess in sq.sessions.items() if sess.messages > 0}
        with_state = {sid for sid, sess in sq.sessions.items() if sess.state is not None}
        return sorted(with_messages | with_state)

    def next_deadline(self) -> int | None:
        """The earliest time (ms) on_timer has work, or None."""
        times = [h[0][0] for h in (self._lock_heap, self._session_heap) if h]
        if self._deadline_at is not None:
            times.append(self._deadline_at)
        if self._expiry_due is not None:
            times.append(self._expiry_due)
        if self._scanning and self._session_scans():
            times.append(0)  # a restart's session scan goes on at every tick
        return min(times) if times else None

    # ---------------------------------------------------------------- management (admin API)
    def add_queue(self, name: str, settings: SubQueueSettings) -> None:
        """A sub-queue created at runtime (a new subscription, its DLQs)."""
        if name not in self.queues:
            self.queues[name] = SubQueue(name, settings)

    def update_queue_settings(self, name: str, settings: SubQueueSettings) -> None:
        """New delivery rules for a sub-queue; they apply from the next lock, expiry or delivery."""
        self.queues[name].settings = settings

    def purge_queue(self, name: str, now_ms: int) -> int:
        """Delete every message of a sub-queue (active, locked, deferred, scheduled), each logged
        as purged; held locks end (settling them fails with lock-lost). Returns the count."""
        sq = self.queues[name]
        count = 0
        for rec in self._current_records(sq):  # streamed from the store in chunks
            self._remove(sq, rec)
            self._log(sq, LogEvent.PURGED, rec, now_ms)
            count += 1
        for token in [t for t, lock in self.locks.items() if lock.queue is sq]:
            del self.locks[token]
        sq.locks.clear()
        sq.buffer.clear()
        sq.back.clear()
        sq.back_set.clear()
        for sess in sq.sessions.values():
            sess.ready.clear()
            sess.ready_set.clear()
        return count

    def drop_queue(self, name: str, now_ms: int) -> int:
        """Purge a sub-queue and forget it (a deleted subscription); returns the purged count."""
        if name not in self.queues:
            return 0
        count = self.purge_queue(name, now_ms)
        for session_id, sess in self.queues[name].sessions.items():
            if sess.state is not None:
                self._batch.put_session_state(name, session_id, None)
        del self.queues[name]
        kept = [item for item in self._session_heap if item[1] != name]
        heapq.heapify(kept)
        self._session_heap = kept
        return count
