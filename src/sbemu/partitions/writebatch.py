"""The writes of one group commit of a partition, as the broker stages them and the store
applies them (PartitionStore.commit, one durable transaction).

Staging (staging.py) fills one per partition over an event-loop turn; the committer hands it
to the store, which applies each part in order (see store.py for the databases they go to).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class WriteBatch:
    """The writes of one group commit, applied in order in one transaction."""

    ops: list[tuple[int, str, int, bytes | None]] = field(default_factory=list)
    session_ops: list[tuple[str, str, bytes | None]] = field(default_factory=list)
    meta: dict[str, int] = field(default_factory=dict)
    log: list[tuple[int, bytes]] = field(default_factory=list)
    deadlines: list[tuple[bytes, bool]] = field(default_factory=list)  # (key, put?)
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

    def delete_many(self, queue: str, seqs: Sequence[int]) -> None:
        """delete() for each of `seqs`."""
        self.ops.extend([(1, queue, seq, None) for seq in seqs])

    def put_session_state(self, queue: str, session_id: str, state: bytes | None) -> None:
        """Queue a write (or, with None, a delete) of one session's state."""
        self.session_ops.append((queue, session_id, state))

    def put_deadline(self, key: bytes) -> None:
        """Queue a put of one timer (a deadline_key())."""
        self.deadlines.append((key, True))

    def delete_deadline(self, key: bytes) -> None:
        """Queue a delete of one timer (absent keys are ignored)."""
        self.deadlines.append((key, False))

    def __bool__(self) -> bool:
        return bool(
            self.ops
            or self.meta
            or self.log
            or self.session_ops
            or self.deadlines
            or self.dedup
            or self.dedup_sweep_before is not None
            or self.markers
        )
