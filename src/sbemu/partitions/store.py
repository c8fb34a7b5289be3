"""LMDB storage of one partition: the only module that imports lmdb.

One LMDB environment per partition [SB partitioning P1]. Inside it:
  meta            counters: next sequence number, next log offset, and (once the log was
                  trimmed) log_trimmed_below: every log record below it is deleted
  log             the append-only partition log (key: 8-byte big-endian offset; reading,
                  bounds and trimming in partitions/logdb.py)
  q:<sub-queue>   one database per sub-queue (queue, its DLQ, a subscription, ...),
                  key: 8-byte big-endian sequence number, value: records.encode_message()
  s:<sub-queue>   session state of a session-enabled sub-queue, key: UTF-8 session id
  deadlines       the partition's timers on disk (TTL expiry, scheduled activation): keys
                  by due time, values empty (deadlinedb.py)
  fwd             auto-forwarding markers: source message key -> empty, written with a
                  forwarded message at its destination (see partitions/forwarding.py)
  large           the large records (largeindex.py): 8-byte sequence number + UTF-8
                  sub-queue name -> session id, so a read on the loop knows one unread
  dd:id           duplicate-detection history: UTF-8 MessageId -> 8-byte first-seen time (ms)
  dd:t            the same history in time order: 8-byte time + MessageId -> empty, so the
                  expired part is swept from the front (see partitions/dedup.py; written and
                  read in partitions/dedupdb.py)

Reads (get, scan, due_deadlines) run in short read transactions with buffers=True: values are
memoryviews into the map, valid only inside the transaction, so they are decoded (copied into
Python objects) before it ends; message bytes stay in LMDB, not in memory.

Writes arrive as a WriteBatch and are committed in one durable transaction (group commit: the
caller collects a whole event-loop turn of work per partition into one batch). commit() runs
in a worker thread; py-lmdb releases the GIL while LMDB syncs.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

import lmdb

from . import deadlinedb, dedupdb, largeindex, logdb
from .diskroom import MIB, DiskRoom
from .lockfile import place_lock_file, release_lock_file
from .logdb import TRIM_LIMIT
from .resident import ResidentPages
from .writebatch import WriteBatch

if TYPE_CHECKING:
    from lmdb import _Database  # defined only in lmdb's type stubs

_U64 = struct.Struct(">Q")
META_DB = b"meta"
LOG_DB = b"log"
DEADLINE_DB = b"deadlines"
FORWARD_DB = b"fwd"
DEDUP_ID_DB = b"dd:id"
DEDUP_TIME_DB = b"dd:t"
LARGE_DB = b"large"
READ_TXNS_KEPT = 2  # spare read transactions per store: the loop's reads and log retention's
MAP_HEADROOM = 64 * MIB  # map room beyond twice the quota (log, timers, dedup, page churn)
MAX_MAP_SIZE = 1 << 40  # grow() stops here: beyond it a full map is a fault, not growth


def map_size_for(quota_bytes: int) -> int:
    """The LMDB map size a partition opens with for a MaxSizeInMegabytes quota of
    `quota_bytes`: the quota is enforced on the stored byte counts (Health.refuse_over_quota),
    never by the map filling, so the map has room beyond it for what must always commit
    (completes, dead-letters, log records, timers, duplicate-detection history, LMDB's
    copy-on-write pages).
    The map is address space, not disk: the file grows only with the pages written."""
    return 2 * max(quota_bytes, 0) + MAP_HEADROOM


class StoreError(Exception):
    """A storage fault of one partition."""


class StoreFull(StoreError):
    """The partition's LMDB map is full (the quota itself is enforced on byte counts before
    anything is stored; this is the map behind it, grown by PartitionStore.grow())."""


class StoreUnavailable(StoreError):
    """The partition's store failed (I/O error, corruption, closed)."""


@dataclass(slots=True)
class StoredState:
    """Everything load() read back: counters and each sub-queue's records in key order."""

    meta: dict[str, int]
    queues: dict[str, list[bytes]]
    session_states: dict[str, dict[str, bytes]]


class PartitionStore:
    """One partition's LMDB environment."""

    def __init__(self, path: str, *, map_size: int, durable: bool = True) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self._durable = durable
        self.map_size = map_size
        # Held by the work that may run off the event loop on this environment (log retention)
        # and by grow()/reopen(), which remap it: no transaction may be open meanwhile.
        self.remap_lock = threading.Lock()
        # Room for new messages on the store's disk beyond its reserve (diskroom.py).
        self.room = DiskRoom(path, self._freed_bytes)
        self._open()
        self.room.measure()

    def _open(self, *, create: bool = True) -> None:
        path, durable, map_size = self.path, self._durable, self.map_size
        # the reader table on tmpfs: a read on the event loop never waits on this disk
        self._lock_file: str | None = place_lock_file(path, create=create)
        try:
            self._env = lmdb.open(
                path,
                map_size=map_size,
                max_dbs=8192,
                max_readers=512,
                # A read transaction's begin callocs its table of max_dbs databases (~400 KB
                # zeroed); py-lmdb keeps this many ended read transactions to renew instead
                # (its default is none): ~6% of the receive path's instructions per message.
                max_spare_txns=READ_TXNS_KEPT,
                sync=durable,
                metasync=durable,
                readahead=False,
            )
        except lmdb.Error as exc:
            raise StoreUnavailable(f"cannot open store at {path}: {exc}") from exc
        self._dbs: dict[bytes, _Database] = {}
        self._resident = ResidentPages(os.path.join(path, "data.mdb"))
        self._closed = False
        try:
            with self._env.begin(write=True) as txn:
                self._meta = self._env.open_db(META_DB, txn=txn)
                self._log = self._env.open_db(LOG_DB, txn=txn)
                self._deadlines = self._env.open_db(DEADLINE_DB, txn=txn)
                self._dd_id = self._env.open_db(DEDUP_ID_DB, txn=txn)
                self._dd_t = self._env.open_db(DEDUP_TIME_DB, txn=txn)
                self._fwd = self._env.open_db(FORWARD_DB, txn=txn)
                self._large_db = self._env.open_db(LARGE_DB, txn=txn)
                self._large = largeindex.LargeIndex()
                self._large.load(txn.cursor(db=self._large_db))
        except lmdb.Error as exc:
            self._env.close()
            release_lock_file(self._lock_file)
            raise StoreUnavailable(f"cannot open store at {path}: {exc}") from exc

    def ensure_queues(self, names: list[str]) -> None:
        """Create (open) the databases of these sub-queues, so reads never need a write txn."""
        try:
            with self._env.begin(write=True) as txn:
                for name in names:
                    self._db(name, txn)
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc

    def _opened_db(self, queue: str) -> _Database | None:
        """A sub-queue's database if it is open (None: not yet)."""
        return self._dbs.get(b"q:" + queue.encode("utf-8"))

    def _read_db(self, queue: str) -> _Database:
        db = self._opened_db(queue)
        if db is None:  # a sub-queue added at runtime: create its database once
            self.ensure_queues([queue])
            db = self._dbs[b"q:" + queue.encode("utf-8")]
        return db

    # ------------------------------------------------------------ reads (index + lazy bytes)
    def load_meta(self) -> dict[str, int]:
        """The counters (next sequence number, log offset, per-sub-queue counts, layout)."""
        try:
            with self._env.begin() as txn:
                return {bytes(k).decode(): _U64.unpack(v)[0] for k, v in txn.cursor(db=self._meta)}
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc

    def load_session_states(self) -> dict[str, dict[str, bytes]]:
        """Every session-enabled sub-queue's stored session states."""
        states: dict[str, dict[str, bytes]] = {}
        with self._env.begin(write=True) as txn:
            names = [bytes(k) for k, _ in txn.cursor()]
            for name in names:
                if name.startswith(b"s:"):
                    db = self._db(name[2:].decode("utf-8"), txn, b"s:")
                    states[name[2:].decode("utf-8")] = {
                        bytes(k).decode("utf-8"): bytes(v) for k, v in txn.cursor(db=db)
                    }
        return states

    def get(
        self,
        queue: str,
        seq: int,
        decode: Callable[[Any], Any],
        ahead_of: largeindex.AheadOf | None = None,
    ) -> Any:
        """One message record, decoded inside the read transaction (None if absent); with
        `ahead_of`, a large one noted (largeindex.py) is `ahead_of(seq, session id)`, unread."""
        db = self._read_db(queue)
        noted = self._large.of(queue) if ahead_of is not None else None
        try:
            with self._env.begin(db=db, buffers=True) as txn:
                if noted and seq in noted:
                    present = txn.cursor().set_key(_U64.pack(seq))
                    return ahead_of(seq, noted[seq]) if present else None  # type: ignore[misc]
                raw = txn.get(_U64.pack(seq))
                return None if raw is None else decode(raw)
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc

    def scan(
        self,
        queue: str,
        start: int,
        limit: int,
        decode: Callable[[Any], Any],
        ahead_of: largeindex.AheadOf | None = None,
    ) -> list[tuple[int, Any]]:
        """Up to `limit` (sequence number, decoded record) from `start` on, in key order; with
        `ahead_of`, a large record noted (largeindex.py) is `ahead_of(seq, session id)`."""
        db = self._read_db(queue)
        unpack = _U64.unpack
        noted = self._large.of(queue) if ahead_of is not None else None
        try:
            with self._env.begin(db=db, buffers=True) as txn:
                cur = txn.cursor()
                if not cur.set_range(_U64.pack(max(start, 0))):
                    return []
                if noted and largeindex.noted_from(noted, start):
                    return largeindex.scan_noting(cur, limit, noted, decode, ahead_of)  # type: ignore[arg-type]
                return [(unpack(k)[0], decode(v)) for k, v in islice(cur, limit)]
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc

    def read_ahead(
        self,
        queue: str,
        start: int,
        limit: int,
        decode: Callable[[Any], Any],
        decode_large: Callable[[Any], Any],
        ahead_of: largeindex.AheadOf | None = None,
    ) -> tuple[list[Any], bool]:
        """The read-ahead: up to `limit` decoded records from `start` on, in key order, without
        their keys (a record carries its sequence number). `decode` ends the read at a value
        it does not take (by raising StopIteration: records.decode_ahead, a large message);
        that value is then decoded alone by `decode_large` and ends the read, so one read
        decodes at most one large message, not up to `limit` of them. True with the records
        when the read was ended so and a record follows. With `ahead_of`, a large record
        noted (largeindex.py) ends the read unread, as `ahead_of(seq, session id)`."""
        db = self._read_db(queue)
        noted = self._large.of(queue) if ahead_of is not None else None
        try:
            with self._env.begin(db=db, buffers=True) as txn:
                cur = txn.cursor()
                first = _U64.pack(max(start, 0))
                if not cur.set_range(first):
                    return [], False
                stop = None  # (place, sequence number) of the first noted record within reach
                if noted and largeindex.noted_from(noted, start):
                    stop = largeindex.first_noted(cur, limit, noted)
                    cur.set_range(first)
                take = limit if stop is None else stop[0]
                out = list(map(decode, islice(cur.iternext(keys=False, values=True), take)))
                if len(out) < take:
                    value = cur.value()  # empty once the cursor ran past the last record
                    if value:
                        out.append(decode_large(value))
                        return out, cur.next()
                elif stop is not None:
                    out.append(ahead_of(stop[1], noted[stop[1]]))  # type: ignore[index,misc]
                    return out, True
                return out, False
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc

    def due_deadlines(self, start: bytes, now_ms: int, limit: int) -> list[bytes]:
        """Up to `limit` timer keys >= `start` that are due at `now_ms`, in order."""
        try:
            with self._env.begin(db=self._deadlines) as txn:
                return deadlinedb.due(txn.cursor(), start, now_ms, limit)
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc

    def first_deadline(self, start: bytes) -> int | None:
        """The due time of the first timer key >= `start` (None: no timers)."""
        try:
            with self._env.begin(db=self._deadlines) as txn:
                return deadlinedb.first_due(txn.cursor(), start)
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc

    def queue_names(self) -> list[str]:
        """The sub-queues whose databases hold records (the main database lists them)."""
        try:
            with self._env.begin() as txn:
                names = [bytes(k) for k, _ in txn.cursor()]
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc
        queues = [n[2:].decode("utf-8") for n in names if n.startswith(b"q:")]
        return [q for q in queues if self.entries(q) > 0]

    def entries(self, queue: str) -> int:
        """How many records a sub-queue's database holds (LMDB keeps the count)."""
        db = self._read_db(queue)
        with self._env.begin(db=db) as txn:
            return int(txn.stat(db)["entries"])

    def pages(self, queue: str) -> int:
        """How many pages (branch, leaf, overflow) a sub-queue's database takes on disk."""
        db = self._read_db(queue)
        with self._env.begin(db=db) as txn:
            st = txn.stat(db)
        return int(st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"])

    def _db(self, queue: str, txn: lmdb.Transaction, prefix: bytes = b"q:") -> _Database:
        name = prefix + queue.encode("utf-8")
        db = self._dbs.get(name)
        if db is None:
            db = self._env.open_db(name, txn=txn)
            self._dbs[name] = db
        return db

    def load(self) -> StoredState:
        """Read counters and every sub-queue's records (in sequence order): for tools and
        tests; the broker never loads a whole backlog (see load_meta, scan, get)."""
        meta: dict[str, int] = {}
        queues: dict[str, list[bytes]] = {}
        states: dict[str, dict[str, bytes]] = {}
        with self._env.begin(write=True) as txn:
            for k, v in txn.cursor(db=self._meta):
                meta[k.decode()] = _U64.unpack(v)[0]
            names = [bytes(k) for k, _ in txn.cursor()]  # the main db lists the named dbs
            for name in names:
                if name.startswith(b"q:"):
                    db = self._db(name[2:].decode("utf-8"), txn)
                    queues[name[2:].decode("utf-8")] = [bytes(v) for _, v in txn.cursor(db=db)]
                elif name.startswith(b"s:"):
                    db = self._db(name[2:].decode("utf-8"), txn, b"s:")
                    states[name[2:].decode("utf-8")] = {
                        bytes(k).decode("utf-8"): bytes(v) for k, v in txn.cursor(db=db)
                    }
        return StoredState(meta, queues, states)

    def commit(self, batch: WriteBatch) -> None:
        """Apply a batch in one durable transaction; raises StoreFull / StoreUnavailable."""
        ops = batch.join_large()  # large records' bytes, made here: on the commit's thread
        try:
            with self._env.begin(write=True) as txn:
                if batch.large:  # (before the ops: a delete among them forgets the note)
                    self._large.note(txn, self._large_db, batch.large)
                self._write_ops(txn, ops)
                for queue, session_id, state in batch.session_ops:
                    db = self._db(queue, txn, b"s:")
                    if state is None:
                        txn.delete(session_id.encode("utf-8"), db=db)
                    else:
                        txn.put(session_id.encode("utf-8"), state, db=db)
                if batch.meta:
                    txn.cursor(db=self._meta).putmulti(
                        [(name.encode(), _U64.pack(n)) for name, n in batch.meta.items()]
                    )
                if batch.log:
                    pack = _U64.pack
                    txn.cursor(db=self._log).putmulti(
                        [(pack(offset), value) for offset, value in batch.log], append=True
                    )
                for key, put in batch.deadlines:
                    if put:  # timers of a constant TTL arrive in due order: append
                        if not txn.put(key, b"", db=self._deadlines, append=True):
                            txn.put(key, b"", db=self._deadlines)
                    else:
                        txn.delete(key, db=self._deadlines)
                for key, present in batch.markers:
                    if present:
                        txn.put(key, b"", db=self._fwd)
                    else:
                        txn.delete(key, db=self._fwd)
                if batch.dedup or batch.dedup_sweep_before is not None:
                    dedupdb.write_history(txn, self._dd_id, self._dd_t, batch)
        except lmdb.MapFullError as exc:
            raise StoreFull(f"partition store {self.path} is full") from exc
        except lmdb.Error as exc:
            raise StoreUnavailable(
                f"partition store {self.path} failed: {exc}{self.room.disk_full_note()}"
            ) from exc
        self.room.committed()
        if batch.reads:
            self._read_large(batch)

    def _read_large(self, batch: WriteBatch) -> None:
        """The large records the batch asks for, read after its writes (largeread.py); a read
        that fails is left out (the read-ahead then reads the record on the loop)."""
        for queue, seq, decode in batch.reads:
            db = self._opened_db(queue)  # (a commit's thread creates no database)
            if db is None:
                continue
            try:
                with self._env.begin(db=db, buffers=True) as txn:
                    value = txn.get(_U64.pack(seq))
                    batch.read[(queue, seq)] = decode(value) if value else None
            except (lmdb.Error, ValueError):
                continue  # (the read-ahead reads it on the loop, and reports what fails)

    # ------------------------------------------------------------ room on the disk
    def _freed_bytes(self) -> int:
        """What the disk room counts of the pages LMDB freed inside its file (0 while closed
        or when LMDB cannot say)."""
        if self._closed:
            return 0
        try:
            return self._free_pages_bytes()
        except lmdb.Error:
            return 0

    def _free_pages_bytes(self) -> int:
        """About how many bytes of data.mdb LMDB has freed for reuse: the file's pages up to
        the last one used, less the pages of every open database and the two meta pages."""
        env = self._env
        with env.begin() as txn:
            main = env.stat()
            used = main["branch_pages"] + main["leaf_pages"] + main["overflow_pages"]
            fixed = (self._meta, self._log, self._deadlines, self._dd_id, self._dd_t, self._fwd)
            for db in (*fixed, self._large_db, *self._dbs.values()):
                st = txn.stat(db)
                used += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            last = env.info()["last_pgno"]
        return max(0, last + 1 - 2 - used) * int(main["psize"])

    def _write_ops(
        self, txn: lmdb.Transaction, ops: list[tuple[int, str, int, bytes | None]]
    ) -> None:
        """Message puts and deletes, in order; a run of puts into one sub-queue goes to LMDB
        in one putmulti call (the common case: a turn's sends, one per partition).

        New messages arrive in sequence order, so the run is appended (MDB_APPEND fills leaf
        pages: 3 x 1 KB records per 4 KB page instead of the 2 a mid-page split leaves); a
        run with a key not above the last one (an update) is written again with plain puts."""
        pack = _U64.pack
        run: list[tuple[bytes, bytes]] = []
        run_queue: str | None = None
        gone: list[bytes] = []  # a run of deletes from one sub-queue (gone_queue)
        gone_queue: str | None = None
        for op, queue, seq, value in ops:
            if op == 0 and queue == run_queue:
                assert value is not None  # WriteBatch.put always carries a value
                run.append((pack(seq), value))
                continue
            if op == 1 and queue == gone_queue:
                gone.append(pack(seq))
                continue
            if run:
                self._put_run(txn, run_queue, run)  # type: ignore[arg-type]
                run, run_queue = [], None
            if gone:
                self._delete_run(txn, gone_queue, gone)  # type: ignore[arg-type]
                gone, gone_queue = [], None
            if op == 0:
                assert value is not None
                run, run_queue = [(pack(seq), value)], queue
            else:
                gone, gone_queue = [pack(seq)], queue
        if run:
            self._put_run(txn, run_queue, run)  # type: ignore[arg-type]
        if gone:
            self._delete_run(txn, gone_queue, gone)  # type: ignore[arg-type]

    def _delete_run(self, txn: lmdb.Transaction, queue: str, keys: list[bytes]) -> None:
        """Delete `keys` from a sub-queue, in order. Completions delete messages in sequence
        order, mostly neighbours in the database: a cursor deletes each where the previous
        delete left it (the next record) and looks a key up only when it is elsewhere,
        instead of a search from the root per key."""
        self._large.forget(txn, self._large_db, queue, keys)
        cur = txn.cursor(db=self._db(queue, txn))
        at = cur.key
        for key in keys:
            if at() == key or cur.set_key(key):
                cur.delete()

    def _put_run(self, txn: lmdb.Transaction, queue: str, run: list[tuple[bytes, bytes]]) -> None:
        db = self._db(queue, txn)
        _consumed, added = txn.cursor(db=db).putmulti(run, append=True)
        if added != len(run):  # some key was not above the last: overwrite in place
            for key, value in run:
                txn.put(key, value, db=db)

    def dedup_seen(self, ids: list[bytes], since_ms: int) -> set[bytes]:
        """Which of these MessageIds were admitted at or after `since_ms` (committed history)."""
        with self._env.begin(db=self._dd_id) as txn:
            return dedupdb.seen(txn, ids, since_ms)

    def forward_markers(self) -> list[bytes]:
        """Every auto-forwarding marker (few: only those of an interrupted forward remain)."""
        with self._env.begin() as txn:
            return [bytes(k) for k, _ in txn.cursor(db=self._fwd)]

    def dedup_size(self) -> int:
        """How many MessageIds the stored history holds."""
        with self._env.begin() as txn:
            return int(txn.stat(self._dd_id)["entries"])

    def read_log(self, start: int, limit: int) -> list[tuple[int, bytes]]:
        """Read up to `limit` log records from offset `start` (run records expanded: one
        version-1 record per offset; see logdb.read_log_events)."""
        with self._env.begin() as txn:
            return logdb.read_log_events(txn.cursor(db=self._log), start, None, limit)[0]

    def log_bounds(self) -> tuple[int, int]:
        """(first offset still stored, next offset): the log holds [first, end).
        Safe off the event loop (log retention): holds remap_lock."""
        with self.remap_lock, self._env.begin() as txn:
            return logdb.log_bounds(txn, self._log, self._meta)

    def trim_log(self, below: int, *, limit: int = TRIM_LIMIT) -> int:
        """Delete up to `limit` log records below offset `below`, in one write transaction
        (see logdb.trim_log); returns how many records (offsets) were deleted.
        Safe off the event loop (log retention): holds remap_lock."""
        try:
            with self.remap_lock, self._env.begin(write=True) as txn:
                return logdb.trim_log(txn, self._log, self._meta, below, limit)
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc

    def release_resident(self) -> None:
        """Unmap the pages of the store this process touched (MADV_DONTNEED on the read-only
        shared map): they stay in the kernel's page cache and fault back in when read again,
        so the server's resident memory does not grow with the data it has written or read.
        Linux only; a no-op elsewhere. Call it between transactions of this thread.
        """
        if not self._closed:  # closed: the address range may belong to another mapping by now
            self._resident.release()

    def grow(self) -> bool:
        """Double the map after a MapFullError (False: at MAX_MAP_SIZE, or it failed).

        Call it on the thread that reads this store, with no commit in flight: LMDB remaps the
        file, so no transaction of this process may be open on it meanwhile (log retention,
        the one other user, holds remap_lock)."""
        if self.map_size >= MAX_MAP_SIZE or self._closed:
            return False
        size = min(self.map_size * 2, MAX_MAP_SIZE)
        with self.remap_lock:
            try:
                self._env.set_mapsize(size)
            except lmdb.Error:
                return False
            self.map_size = size
            self._resident.forget()  # the map may have moved
        return True

    def reopen(self) -> None:
        """Close and open the environment again (recovery after an I/O fault, when LMDB may
        refuse every further transaction); raises StoreUnavailable while the fault lasts.
        Same conditions as grow(): no commit in flight, no transaction open.

        It opens only the store that is there: a directory without its data.mdb (the disk
        unmounted for repair, its empty mount point showing) is a fault, not a new empty store
        (LMDB would create one there, and the partition would lose its messages from view and
        write new ones beside the disk). And the file LMDB opened must still be the one at the
        path once it is open (not a disk mounted over it meanwhile)."""
        with self.remap_lock:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(lmdb.Error):
                    self._env.close()
                release_lock_file(self._lock_file)
            self._dbs.clear()
            self._resident.forget()
            before = self._stored_file()
            self._open(create=False)
            if self._stored_file() != before:
                self._env.close()
                release_lock_file(self._lock_file)
                raise StoreUnavailable(f"the store at {self.path} changed while it was opened")
            self._closed = False
        self.room.measure()

    def _stored_file(self) -> tuple[int, int]:
        """(device, inode) of the store's data.mdb; StoreUnavailable when there is none."""
        try:
            st = os.stat(os.path.join(self.path, "data.mdb"))
        except OSError as exc:
            raise StoreUnavailable(
                f"no store at {self.path} ({exc.strerror}; is its disk mounted?)"
            ) from exc
        if st.st_size == 0:
            raise StoreUnavailable(f"no store at {self.path} (data.mdb is empty)")
        return st.st_dev, st.st_ino

    def close(self) -> None:
        """Close the environment (after the last commit)."""
        self._closed = True
        self._env.close()
        release_lock_file(self._lock_file)
