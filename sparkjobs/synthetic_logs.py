"""Synthetic partition logs, written straight into partition stores: volume for the reporting
job's benchmark (sparkjobs.bench, sparkjobs.cds) and its tests (tests/spark), without a server.

Each message lives through a few log events (enqueued, delivered, then completed, abandoned or
dead-lettered); `write_logs` lays the entity out as the router does (entity.json, one
PartitionStore per partition) and appends the events in batched transactions, as the broker
would. What the messages look like (ids, sessions, sizes, times, how they end) is a `Traffic`.

It imports no pyspark: it lives here, beside its users, because only the Spark side needs
logs made this way; tests may import it, sbemu never does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sbemu.partitions import (
    LogEvent,
    MessageRecord,
    MessageState,
    PartitionStore,
    WriteBatch,
    encode_log,
    entity_dir,
)

# (event, when in ms, dead-letter reason) of one log record
Step = tuple[LogEvent, int, str | None]


@dataclass(frozen=True, slots=True)
class Traffic:
    """What the synthetic messages look like; the defaults are the benchmark's. Message `seq`
    (from 1 in each partition) is enqueued at start_ms + seq * spacing_ms, delivered
    delivered_after_ms later and settled settled_after_ms + seq % settle_spread_ms after its
    enqueue: dead-lettered (with `reason`) when seq is a multiple of dead_letter_every, else
    abandoned when it is one of abandon_every, else completed."""

    start_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    spacing_ms: int = 3
    delivered_after_ms: int = 2
    settled_after_ms: int = 5
    settle_spread_ms: int = 200
    dead_letter_every: int = 50
    abandon_every: int = 20
    reason: str = "bench"
    message_id: str = "msg-{pid}-{seq}"  # str.format'ed with pid and seq
    session_id: str = "session-{n}"  # with n = seq % sessions, for every session_every-th
    sessions: int = 100
    session_every: int = 3
    size: int = 200  # plus seq % size_spread
    size_spread: int = 300

    def message(self, pid: int, seq: int) -> tuple[MessageRecord, list[Step]]:
        """Message `seq` of partition `pid` and the steps of its life."""
        now = self.start_ms + seq * self.spacing_ms
        session = (
            self.session_id.format(n=seq % self.sessions) if seq % self.session_every == 0 else None
        )
        rec = MessageRecord(
            sequence_number=(pid << 48) | seq,
            enqueued_time_ms=now,
            state=MessageState.ACTIVE,
            delivery_count=0,
            message_id=self.message_id.format(pid=pid, seq=seq),
            session_id=session,
            partition_key=None,
            ttl_ms=None,
            expires_at_ms=None,
            durable=True,
            priority=None,
            annotation_count=0,
            annotations=b"",
            tail=b"",
            size=self.size + seq % self.size_spread,
        )
        settled = now + self.settled_after_ms + seq % self.settle_spread_ms
        if seq % self.dead_letter_every == 0:
            last: Step = (LogEvent.DEADLETTERED, settled, self.reason)
        elif seq % self.abandon_every == 0:
            last = (LogEvent.ABANDONED, settled, None)
        else:
            last = (LogEvent.COMPLETED, settled, None)
        return rec, [
            (LogEvent.ENQUEUED, now, None),
            (LogEvent.DELIVERED, now + self.delivered_after_ms, None),
            last,
        ]


def lay_out_entity(
    data_dir: str, namespace: str, name: str, partitions: int, partitioned: bool
) -> str:
    """Create an entity's directory where the router looks for it, with its manifest
    (entity.json); returns the directory."""
    base = str(entity_dir(Path(data_dir), namespace, name))
    os.makedirs(base, exist_ok=True)
    with open(os.path.join(base, "entity.json"), "w") as f:
        json.dump({"partition_count": partitions, "partitioned": partitioned}, f)
    return base


def write_logs(
    data_dir: str,
    namespace: str,
    name: str,
    counts: Sequence[int],
    traffic: Traffic,
    *,
    commit_every: int,
    map_size: int | None = None,
    durable: bool = True,
) -> int:
    """Write `counts[pid]` log records of `traffic` into each partition of a new entity
    (partitioned when it has more than one), message after message (the last one's steps cut
    at the count),
    committing every `commit_every` records; returns how many were written. `map_size`: the
    stores' (default: room for the records); `durable` False: without fsync."""
    base = lay_out_entity(data_dir, namespace, name, len(counts), len(counts) > 1)
    written = 0
    for pid, target in enumerate(counts):
        store = PartitionStore(
            os.path.join(base, f"partition-{pid:02d}"),
            map_size=map_size or max(64 << 20, target * 600),
            durable=durable,
        )
        batch, offset, seq = WriteBatch(), 0, 0
        while offset < target:
            seq += 1
            rec, steps = traffic.message(pid, seq)
            for event, at, reason in steps:
                if offset >= target:
                    break
                batch.log.append(
                    (
                        offset,
                        encode_log(
                            namespace=namespace,
                            entity=name,
                            queue="main",
                            partition=pid,
                            offset=offset,
                            event=event,
                            record=rec,
                            event_ms=at,
                            reason=reason,
                        ),
                    )
                )
                offset += 1
            if len(batch.log) >= commit_every:
                batch.meta["next_log_offset"] = offset
                store.commit(batch)
                batch = WriteBatch()
        if batch:
            batch.meta["next_log_offset"] = offset
            store.commit(batch)
        store.close()
        written += offset
    return written
