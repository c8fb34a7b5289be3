"""The duplicate-detection history in a partition's LMDB environment [P6]: writing, sweeping
and looking it up.

Two databases (store.DEDUP_ID_DB and store.DEDUP_TIME_DB): `dd:id` maps a MessageId (its
dedup.history_key) to the 8-byte big-endian time (ms) it was admitted, `dd:t` holds the same
history in time order (8-byte time + MessageId -> empty), so the expired part is swept from its
front. These functions work in the transaction the store gives them (store.py opens it and
turns LMDB's errors into StoreError); the policy (window, what is admitted) is dedup.py's.
"""

from __future__ import annotations

import struct
from typing import Any

from .writebatch import WriteBatch

_U64 = struct.Struct(">Q")
DEDUP_SWEEP_LIMIT = 10_000  # expired history entries deleted per commit


def write_history(txn: Any, id_db: Any, time_db: Any, batch: WriteBatch) -> None:
    """Record the MessageIds a batch admitted and sweep expired ones (inside the commit's
    write transaction)."""
    for mid, at in batch.dedup:
        old = txn.get(mid, db=id_db)
        if old is not None:
            txn.delete(bytes(old) + mid, db=time_db)
        stamp = _U64.pack(at)
        txn.put(mid, stamp, db=id_db)
        txn.put(stamp + mid, b"", db=time_db)
    cutoff = batch.dedup_sweep_before
    if cutoff is None:
        return
    cur = txn.cursor(db=time_db)
    swept = 0
    if not cur.first():
        return
    while swept < DEDUP_SWEEP_LIMIT:
        key = cur.key()
        if not key or _U64.unpack(key[:8])[0] >= cutoff:
            break
        mid = bytes(key[8:])
        if txn.get(mid, db=id_db) == key[:8]:
            txn.delete(mid, db=id_db)
        swept += 1
        if not cur.delete():
            break


def seen(txn: Any, ids: list[bytes], since_ms: int) -> set[bytes]:
    """Which of these MessageIds the history holds from `since_ms` on (a read transaction
    whose default database is `dd:id`)."""
    found: set[bytes] = set()
    for mid in ids:
        raw = txn.get(mid)
        if raw is not None and _U64.unpack(raw)[0] >= since_ms:
            found.add(mid)
    return found
