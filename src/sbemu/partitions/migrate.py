"""A partition store written by an older sbemu, brought up to the current layout once.

Layouts: 1 kept no counters; 2 keeps the per-state counts in meta and the timers in the
deadlines database; 3 (LAYOUT) adds each sub-queue's byte count. A store below LAYOUT is read
once at load, record by record, and its counters (and before layout 2 its timers) written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .deadlines import timer_key
from .records import MessageRecord
from .store import PartitionStore
from .subqueue import SubQueue
from .writebatch import WriteBatch

LAYOUT = 3  # 2: counts in meta, timers in the deadlines database; 3: byte counts in meta


def migrate(
    store: PartitionStore,
    queues: dict[str, SubQueue],
    layout: int,
    each_record: Callable[[SubQueue], Iterator[MessageRecord]],
) -> None:
    """Count each sub-queue by state and bytes, and (before layout 2) put its timers in the
    deadlines database; the store is at LAYOUT after."""
    batch = WriteBatch()
    for sq in queues.values():
        counts = [0, 0, 0]
        size = 0
        for rec in each_record(sq):
            counts[rec.state] += 1
            size += rec.size
            key = timer_key(sq, rec) if layout < 2 else None
            if key is not None:
                batch.put_deadline(key)
            if len(batch.deadlines) >= 50_000:
                store.commit(batch)
                batch = WriteBatch()
        for k, n in zip("ads", counts, strict=True):
            batch.meta[f"n:{sq.name}:{k}"] = n
        batch.meta[f"n:{sq.name}:b"] = size
    batch.meta["layout"] = LAYOUT
    store.commit(batch)
