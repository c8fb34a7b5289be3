"""LMDB storage of one partition: the only module that imports lmdb.

One LMDB environment per partition [SB partitioning P1]. Inside it:
  meta            counters: next sequence number, next log offset, and (once the log was
                  trimmed) log_trimmed_below: every log record below it is deleted
  log             the append-only partition log (key: 8-byte big-endian offset)
  q:<sub-queue>   one database per sub-queue (queue, its DLQ, a subscription, ...),
                  key: 8-byte big-endian sequence number, value: records.encode_message()
  s:<sub-queue>   session state of a session-enabled sub-queue, key: UTF-8 session id
  fwd             auto-forwarding markers: source message key -> empty, written with a
                  forwarded message at its destination (see partitions/forwarding.py)
  dd:id           duplicate-detection history: UTF-8 MessageId -> 8-byte first-seen time (ms)
  dd:t            the same history in time order: 8-byte time + MessageId -> empty, so the
                  expired part is swept from the front (see partitions/dedup.py)

Writes arrive as a WriteBatch and are committed in one durable transaction (group commit: the
caller collects a whole event-loop turn of work per partition into one batch). commit() runs
in a worker thread; py-lmdb releases the GIL while LMDB syncs.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import lmdb

if TYPE_CHECKING:
    from lmdb import _Database  # defined only in lmdb's type stubs

_U64 = struct.Struct(">Q")
META_DB = b"meta"
LOG_DB = b"log"
TRIMMED_BELOW_META = b"log_trimmed_below"
TRIM_LIMIT = 50_000  # log records deleted per trim_log() call (one write transaction)
FORWARD_DB = b"fwd"
DEDUP_ID_DB = b"dd:id"
DEDUP_TIME_DB = b"dd:t"
DEDUP_SWEEP_LIMIT = 10_000  # expired history entries deleted per commit


class StoreError(Exception):
    """A storage fault of one partition."""


class StoreFull(StoreError):
    """The partition reached its configured maximum size (LMDB map full)."""


class StoreUnavailable(StoreError):
    """The partition's store failed (I/O error, corruption, closed)."""


@dataclass(slots=True)
class WriteBatch:
    """The writes of one group commit, applied in order in one transaction."""

    ops: list[tuple[int, str, int, bytes | None]] = field(default_factory=list)
    session_ops: list[tuple[str, str, bytes | None]] = field(default_factory=list)
    meta: dict[str, int] = field(default_factory=dict)
    log: list[tuple[int, bytes]] = field(default_factory=list)
    # duplicate detection: MessageIds admitted by this batch (id, time ms), and the time below
    # which history is swept in the same transaction (None: no sweep)
    dedup: list[tuple[bytes, int]] = field(default_factory=list)
    dedup_sweep_before: int | None = None
    # auto-forwarding markers (key, True: put / False: delete), see partitions/forwarding.py
    markers: list[tuple[bytes, bool]] = field(default_factory=list)

    def put(self, queue: str, seq: int, value: bytes) -> None:
        """Queue a put of one message record."""
        self.ops.append((0, queue, seq, value))

    def delete(self, queue: str, seq: int) -> None:
        """Queue a delete of one message record."""
        self.ops.append((1, queue, seq, None))

    def put_session_state(self, queue: str, session_id: str, state: bytes | None) -> None:
        """Queue a write (or, with None, a delete) of one session's state."""
        self.session_ops.append((queue, session_id, state))

    def __bool__(self) -> bool:
        return bool(
            self.ops or self.meta or self.log or self.session_ops or self.dedup
            or self.dedup_sweep_before is not None or self.markers
        )


@dataclass(slots=True)
class StoredState:
    """Everything load() read back: counters and each sub-queue's records in key order."""

    meta: dict[str, int]
    queues: dict[str, list[bytes]]
    session_states: dict[str, dict[str, bytes]]


def key_of(seq: int) -> bytes:
    """The LMDB key of a sequence number or log offset."""
    return _U64.pack(seq)


class PartitionStore:
    """One partition's LMDB environment."""

    def __init__(self, path: str, *, map_size: int, durable: bool = True) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        try:
            self._env = lmdb.open(
                path,
                map_size=map_size,
                max_dbs=8192,
                max_readers=512,
                sync=durable,
                metasync=durable,
                readahead=False,
            )
        except lmdb.Error as exc:
            raise StoreUnavailable(f"cannot open store at {path}: {exc}") from exc
        self._dbs: dict[bytes, _Database] = {}
        with self._env.begin(write=True) as txn:
            self._meta = self._env.open_db(META_DB, txn=txn)
            self._log = self._env.open_db(LOG_DB, txn=txn)
            self._dd_id = self._env.open_db(DEDUP_ID_DB, txn=txn)
            self._dd_t = self._env.open_db(DEDUP_TIME_DB, txn=txn)
            self._fwd = self._env.open_db(FORWARD_DB, txn=txn)

    def _db(self, queue: str, txn: lmdb.Transaction, prefix: bytes = b"q:") -> _Database:
        name = prefix + queue.encode("utf-8")
        db = self._dbs.get(name)
        if db is None:
            db = self._env.open_db(name, txn=txn)
            self._dbs[name] = db
        return db

    def load(self) -> StoredState:
        """Read counters and every sub-queue's records (in sequence order)."""
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
        try:
            with self._env.begin(write=True) as txn:
                for op, queue, seq, value in batch.ops:
                    db = self._db(queue, txn)
                    if op == 0:
                        assert value is not None  # WriteBatch.put always carries a value
                        txn.put(_U64.pack(seq), value, db=db)
                    else:
                        txn.delete(_U64.pack(seq), db=db)
                for queue, session_id, state in batch.session_ops:
                    db = self._db(queue, txn, b"s:")
                    if state is None:
                        txn.delete(session_id.encode("utf-8"), db=db)
                    else:
                        txn.put(session_id.encode("utf-8"), state, db=db)
                for name, number in batch.meta.items():
                    txn.put(name.encode(), _U64.pack(number), db=self._meta)
                for offset, value in batch.log:
                    txn.put(_U64.pack(offset), value, db=self._log, append=True)
                for key, present in batch.markers:
                    if present:
                        txn.put(key, b"", db=self._fwd)
                    else:
                        txn.delete(key, db=self._fwd)
                if batch.dedup or batch.dedup_sweep_before is not None:
                    self._write_dedup(txn, batch)
        except lmdb.MapFullError as exc:
            raise StoreFull(f"partition store {self.path} is full") from exc
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc

    def _write_dedup(self, txn: lmdb.Transaction, batch: WriteBatch) -> None:
        """Record admitted MessageIds and sweep expired ones (inside the commit's transaction)."""
        for mid, at in batch.dedup:
            old = txn.get(mid, db=self._dd_id)
            if old is not None:
                txn.delete(bytes(old) + mid, db=self._dd_t)
            stamp = _U64.pack(at)
            txn.put(mid, stamp, db=self._dd_id)
            txn.put(stamp + mid, b"", db=self._dd_t)
        cutoff = batch.dedup_sweep_before
        if cutoff is None:
            return
        cur = txn.cursor(db=self._dd_t)
        swept = 0
        if not cur.first():
            return
        while swept < DEDUP_SWEEP_LIMIT:
            key = cur.key()
            if not key or _U64.unpack(key[:8])[0] >= cutoff:
                break
            mid = bytes(key[8:])
            if txn.get(mid, db=self._dd_id) == key[:8]:
                txn.delete(mid, db=self._dd_id)
            swept += 1
            if not cur.delete():
                break

    def dedup_seen(self, ids: list[bytes], since_ms: int) -> set[bytes]:
        """Which of these MessageIds were admitted at or after `since_ms` (committed history)."""
        found: set[bytes] = set()
        with self._env.begin(db=self._dd_id) as txn:
            for mid in ids:
                raw = txn.get(mid)
                if raw is not None and _U64.unpack(raw)[0] >= since_ms:
                    found.add(mid)
        return found

    def forward_markers(self) -> list[bytes]:
        """Every auto-forwarding marker (few: only those of an interrupted forward remain)."""
        with self._env.begin() as txn:
            return [bytes(k) for k, _ in txn.cursor(db=self._fwd)]

    def dedup_size(self) -> int:
        """How many MessageIds the stored history holds."""
        with self._env.begin() as txn:
            return int(txn.stat(self._dd_id)["entries"])

    def read_log(self, start: int, limit: int) -> list[tuple[int, bytes]]:
        """Read up to `limit` log records from offset `start`."""
        out: list[tuple[int, bytes]] = []
        with self._env.begin() as txn:
            cur = txn.cursor(db=self._log)
            if not cur.set_range(_U64.pack(start)):
                return out
            for k, v in cur:
                out.append((_U64.unpack(k)[0], bytes(v)))
                if len(out) >= limit:
                    break
        return out

    def log_bounds(self) -> tuple[int, int]:
        """(first offset still stored, next offset): the log holds [first, end)."""
        with self._env.begin() as txn:
            raw = txn.get(b"next_log_offset", db=self._meta)
            end = _U64.unpack(raw)[0] if raw else 0
            cur = txn.cursor(db=self._log)
            if cur.first():
                first = _U64.unpack(cur.key())[0]
                if cur.last():
                    end = max(end, _U64.unpack(cur.key())[0] + 1)
            else:
                low = txn.get(TRIMMED_BELOW_META, db=self._meta)
                first = min(end, _U64.unpack(low)[0]) if low else end
        return first, end

    def trim_log(self, below: int, *, limit: int = TRIM_LIMIT) -> int:
        """Delete up to `limit` log records below offset `below`, in one write transaction.

        Records meta ``log_trimmed_below`` (never lowered) so readers can tell a trimmed log
        from one that starts later. Returns how many records were deleted.
        """
        deleted = 0
        try:
            with self._env.begin(write=True) as txn:
                cur = txn.cursor(db=self._log)
                last = -1
                if cur.first():
                    while deleted < limit:
                        off = _U64.unpack(cur.key())[0]
                        if off >= below:
                            break
                        last = off
                        deleted += 1
                        if not cur.delete():  # moves to the next record
                            break
                        if cur.key() == b"":
                            break
                if deleted:
                    nxt = txn.get(b"next_log_offset", db=self._meta)
                    end = max(last + 1, _U64.unpack(nxt)[0] if nxt else 0)
                    mark = min(below, end) if deleted < limit else last + 1
                    old = txn.get(TRIMMED_BELOW_META, db=self._meta)
                    if not old or _U64.unpack(old)[0] < mark:
                        txn.put(TRIMMED_BELOW_META, _U64.pack(mark), db=self._meta)
        except lmdb.Error as exc:
            raise StoreUnavailable(f"partition store {self.path} failed: {exc}") from exc
        return deleted

    def close(self) -> None:
        """Close the environment (after the last commit)."""
        self._env.close()
