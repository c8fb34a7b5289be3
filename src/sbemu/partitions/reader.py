"""Reading a partition's sub-queues as they are now: the overlay of staged, uncommitted
records first (staging.py), then the locked copies and the read-ahead, then the store; the
read-ahead of a plain sub-queue (a large record in it read off the loop: largeread.py) and a
session-enabled sub-queue's scan after a restart. The index it fills is subqueue.py's.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from functools import partial
from itertools import islice

from . import largeindex, largeread, subqueue
from .largeread import NOT_READ
from .records import MessageRecord, MessageState, decode_ahead, decode_message
from .store import PartitionStore, StoreError
from .subqueue import Overlay, SubQueue

SESSION_SCAN_CHUNK = 2_048  # records a restart's session scan reads per timer tick
_MISSING = object()
READING = object()  # SubQueue.read_alone: a commit is reading the record
WAIT = object()  # _take: the line waits for its next record, read off the loop
# Staging.read_later: (sub-queue, sequence number, decoder, then) where `then` is given the
# record read after the next commit, None when it is gone, NOT_READ when the read failed
ReadLater = Callable[[str, int, Callable[[object], object], Callable[[object], None]], None]


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
        read_later: ReadLater,
    ) -> None:
        self.store = store
        self.queues = queues
        self.overlay = overlay
        self.on_ready = on_ready
        self.read_later = read_later  # staging's: a large record read by the next commit
        self.scanning: list[SubQueue] = []  # session-enabled sub-queues a restart scan rebuilds

    def get(
        self, sq: SubQueue, seq: int, read: MessageRecord | None = None
    ) -> MessageRecord | None:
        """A stored message as it is now: uncommitted changes first, then the store (`read`:
        the store's record, read before)."""
        rec = self._in_memory(sq, seq)
        if rec is not _MISSING:
            return rec  # type: ignore[return-value]
        if read is not None:
            return read
        return self.store.get(sq.name, seq, decode_message)

    def get_or_later(
        self, sq: SubQueue, seq: int, later: Callable[[MessageRecord | None], None]
    ) -> object:
        """get(), except that a large record only the store has is read by the next commit,
        off the loop: WAIT then, and `later` gets the message as it is once read (a timer
        that fires for it: deadlines.py)."""
        rec = self._in_memory(sq, seq)
        if rec is not _MISSING:
            return rec
        rec = self.store.get(sq.name, seq, largeread.small_or_ahead, largeread.Ahead)
        if type(rec) is largeread.Ahead:
            self.read_large(sq.name, seq, lambda stored: later(self.get(sq, seq, stored)))
            return WAIT
        return rec

    def _in_memory(self, sq: SubQueue, seq: int) -> object:
        """Message `seq` as memory holds it now (a staged change, a locked copy, the
        read-ahead); _MISSING when only the store has it."""
        hit = self.overlay.get((sq.name, seq), _MISSING)
        if hit is not _MISSING:
            return hit[0]  # type: ignore[index]
        lock = sq.locks.get(seq)
        if lock is not None and lock.record is not None:
            return lock.record
        rec = sq.buffer.get(seq)
        return _MISSING if rec is None else rec

    def _take(self, sq: SubQueue, seq: int) -> object:
        """get() for the next record of the back line or a session's line, except that a
        large record in the store is read by the next commit, off the loop (largeread.py):
        WAIT until then; the line takes it once it is read."""
        alone = sq.read_alone
        if alone:
            got = alone.get(seq, _MISSING)
            if got is READING:
                return WAIT
            if got is not _MISSING:
                del alone[seq]
                hit = self.overlay.get((sq.name, seq), _MISSING)  # a change since is the truth
                return got if hit is _MISSING else hit[0]  # type: ignore[index]
        rec = self._in_memory(sq, seq)
        if rec is not _MISSING:
            return rec
        rec = self.store.get(sq.name, seq, largeread.small_or_ahead, largeread.Ahead)
        if type(rec) is largeread.Ahead:
            alone[seq] = READING
            self.read_later(sq.name, seq, largeread.read, partial(self._read_alone, sq, seq))
            return WAIT
        return rec

    def _read_alone(self, sq: SubQueue, seq: int, rec: object) -> None:
        """The large record `seq` a line waits for (_take), read by a commit: kept for the
        line to take, and the line goes on."""
        if sq.read_alone.get(seq) is not READING or self.queues.get(sq.name) is not sq:
            return  # (out of line or the sub-queue dropped or rebuilt meanwhile)
        if rec is NOT_READ:  # the read failed: on the loop, as before
            rec = self._read_on_loop(sq, seq)
            if rec is NOT_READ:
                del sq.read_alone[seq]  # the line's next pop tries again
                return
        sq.read_alone[seq] = rec
        self.on_ready(sq.name)

    def _read_on_loop(self, sq: SubQueue, seq: int) -> object:
        """A record a commit could not read, read here; NOT_READ when the store fails too
        (this runs among a commit's completions: it must not raise into them)."""
        try:
            return self.store.get(sq.name, seq, decode_message)
        except StoreError:
            return NOT_READ

    def read_stored(
        self, queue: str, seq: int, then: Callable[[MessageRecord | None], None]
    ) -> None:
        """`then(record)`: message `seq` of `queue` as stored (None: not stored), read at once
        when small, by the next commit off the loop when large (a receive by sequence
        number, a cancel)."""
        rec = self.store.get(queue, seq, largeread.small_or_ahead, largeread.Ahead)
        if type(rec) is largeread.Ahead:
            self.read_large(queue, seq, then)
        else:
            then(rec)

    def read_large(
        self, queue: str, seq: int, then: Callable[[MessageRecord | None], None]
    ) -> None:
        """Have the next commit read the large record `seq` of `queue` off the loop; `then`
        gets it, None when it is gone (or the store fails here too)."""

        def done(rec: object) -> None:
            if rec is NOT_READ:  # the read failed: on the loop, as before
                try:
                    rec = self.store.get(queue, seq, decode_message)
                except StoreError:
                    rec = None
            then(rec)  # type: ignore[arg-type]

        self.read_later(queue, seq, largeread.read, done)

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

    def current_records(
        self, sq: SubQueue, start: int = 0, ahead_of: largeindex.AheadOf | None = None
    ) -> Iterator[MessageRecord]:
        """Every message of a sub-queue from sequence number `start` on, as it is now, in
        sequence order: read from the store in chunks, uncommitted changes and locked copies
        first (for purge; bounded memory). `ahead_of`: a large one only the store has is
        that, unread (store.py)."""
        name = sq.name
        pending = {
            seq: rec for (q, seq), (rec, _gen) in self.overlay.items() if q == name and seq >= start
        }  # fmt: skip
        extra = sorted(pending)
        i = 0
        while True:
            rows = self.store.scan(name, start, 1024, decode_message, ahead_of)
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
        self,
        sq: SubQueue,
        from_seq: int,
        count: int,
        session_id: str | None,
        large_later: bool = False,
    ) -> list[MessageRecord]:
        """Up to `count` messages with sequence number >= from_seq, oldest first (locks
        ignored); `large_later`: a large one stored is only noted (largeread.Ahead), for the
        caller to have it read off the loop (SubQueueReader.read_large)."""
        decode = largeread.small_or_ahead if large_later else decode_message
        ahead_of = largeread.Ahead if large_later else None
        queue = sq.name
        pending = {
            seq: rec for (name, seq), (rec, _gen) in self.overlay.items()
            if name == queue and seq >= from_seq
        }  # fmt: skip
        out: list[MessageRecord] = []
        start = from_seq
        limit = max(count, subqueue.READ_AHEAD)
        while len(out) < count:
            rows = self.store.scan(queue, start, limit, decode, ahead_of)
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
        # (a large message ends a read: records.decode_ahead; it is read off the loop:
        # largeread.py)
        if sq.large_read is not None:
            return  # the line goes on once that record is read
        recs, cut = self.store.read_ahead(
            sq.name, sq.scan_from, subqueue.READ_AHEAD, decode_ahead, largeread.ahead,
            largeread.Ahead,
        )  # fmt: skip
        if recs and type(recs[-1]) is largeread.Ahead:
            seq = recs.pop().sequence_number
            sq.large_read = seq
            self.read_later(sq.name, seq, largeread.read, partial(self._large_read, sq, seq))
        elif len(recs) < subqueue.READ_AHEAD and not cut:
            sq.more_in_store = False
        if not recs:
            return
        sq.scan_from = recs[-1].sequence_number + 1
        self._join_line(sq, recs)

    def _large_read(self, sq: SubQueue, seq: int, rec: object) -> None:
        """The large record `seq` the read-ahead stopped at, read by a commit (largeread.py):
        it joins the line as the read-ahead's records do, and the line goes on."""
        if sq.large_read != seq or self.queues.get(sq.name) is not sq:
            return  # (the sub-queue was dropped or rebuilt meanwhile)
        sq.large_read = None
        if rec is NOT_READ:  # the read failed: on the loop, as before
            rec = self._read_on_loop(sq, seq)
            if rec is NOT_READ:
                return  # the next read-ahead tries again (a commit's completions go on)
        if sq.scan_from <= seq:
            sq.scan_from = seq + 1
            if rec is not None:
                self._join_line(sq, [rec])  # type: ignore[list-item]
        self.on_ready(sq.name)

    def _join_line(self, sq: SubQueue, recs: list[MessageRecord]) -> None:
        """Records read from the store join the ready line, as they are now."""
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
                seq = heap[0]
                if seq in ready:
                    got = self._take(sq, seq)
                    if got is WAIT:
                        return None  # the session's line waits for it (FIFO)
                    ready.discard(seq)
                    heapq.heappop(heap)
                    rec: MessageRecord | None = got  # type: ignore[assignment]
                    if rec is not None and rec.state == MessageState.ACTIVE and seq not in sq.locks:
                        return rec
                else:
                    heapq.heappop(heap)
            return None
        back, back_set = sq.back, sq.back_set
        while True:
            while not sq.buffer and sq.more_in_store and sq.large_read is None:
                self.refill(sq)
            while back and back[0] not in back_set:
                heapq.heappop(back)
            if sq.buffer:
                first = next(iter(sq.buffer))
                if not back or first < back[0]:
                    return sq.buffer.pop(first)
            elif not back:
                return None
            seq = back[0]
            got = self._take(sq, seq)
            if got is WAIT:
                return None  # the line waits for it: nothing after it goes first
            heapq.heappop(back)
            back_set.discard(seq)
            rec = got  # type: ignore[assignment]
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
