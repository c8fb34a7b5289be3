"""The writes of one group commit of a partition, as the broker stages them and the store
applies them (PartitionStore.commit, one durable transaction).

Staging (staging.py) fills one per partition over an event-loop turn; the committer hands it
to the store, which applies each part in order (see store.py for the databases they go to).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cffi

# A stored value of this many bytes or more is a large message (up to 100 MB on Premium): no
# read on the event loop decodes it (records.decode_ahead, largeread.py), and the store notes
# it when it writes it (largeindex.py)
LARGE_RECORD = 4 * 1024 * 1024

_memmove = ctypes.memmove  # a foreign call: the GIL is released while it copies
_ffi = cffi.FFI()  # only for the address of a buffer that may be read-only (LMDB's map)


def join_without_gil(parts: Sequence[bytes | memoryview], size: int) -> bytes:
    """The `size` bytes of `parts` joined into a new bytes object, copied with the GIL
    released (off the event loop: a large record's bytes on their way in or out)."""
    # calloc'd (fresh zero pages for a block this large), filled in place before anyone else
    # sees it
    out = bytes(size)
    at = ctypes.cast(ctypes.c_char_p(out), ctypes.c_void_p).value or 0
    for part in parts:
        n = len(part)
        if n:
            source = _ffi.from_buffer(part)
            _memmove(at, int(_ffi.cast("uintptr_t", source)), n)
            at += n
    return out


class LargeRecord:
    """A large message record (records.encode_staged) as its parts, joined into its bytes on
    the commit's thread (join_large) rather than on the event loop, where copying 99 MB into
    new pages took 100-120 ms on a developer machine; copied with the GIL released, so the
    loop runs meanwhile."""

    __slots__ = ("parts", "size", "session_id")

    # made and not joined yet, across batches: while none is, a commit looks for none (a
    # commit of thousands of small records pays nothing for the rare large one); one that
    # is never joined (its batch dropped) only makes commits look
    outstanding = 0
    _count_lock = threading.Lock()

    def __init__(self, parts: tuple[bytes, ...], session_id: str | None = None) -> None:
        self.parts = parts
        self.size = sum(len(p) for p in parts)
        self.session_id = session_id  # (for the store's note of a large record: largeindex.py)
        with LargeRecord._count_lock:
            LargeRecord.outstanding += 1

    def join(self) -> bytes:
        """The record's bytes (b"".join(parts)), copied without the GIL."""
        out = join_without_gil(self.parts, self.size)
        with LargeRecord._count_lock:
            LargeRecord.outstanding -= 1
        return out


@dataclass(slots=True)
class WriteBatch:
    """The writes of one group commit, applied in order in one transaction."""

    # (0 put / 1 delete, sub-queue, sequence number, record): a LargeRecord until join_large
    ops: list[tuple[int, str, int, bytes | LargeRecord | None]] = field(default_factory=list)
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
    # large records to read back after the writes (sub-queue, sequence number, decoder), and
    # what was read: the record, None when it is gone (largeread.py); none when a read failed
    reads: list[tuple[str, int, Callable[[Any], Any]]] = field(default_factory=list)
    read: dict[tuple[str, int], Any] = field(default_factory=dict)
    # the LARGE_RECORD-sized records join_large made, for the store to note (largeindex.py):
    # (sub-queue, sequence number, session id)
    large: list[tuple[str, int, str | None]] = field(default_factory=list)

    def put(self, queue: str, seq: int, value: bytes | LargeRecord) -> None:
        """Queue a put of one message record."""
        self.ops.append((0, queue, seq, value))

    def off_the_loop(self) -> bool:
        """Whether the commit has a large record to join or read (a commit thread's work even
        where commits run inline)."""
        return bool(self.reads) or self.has_large()

    def has_large(self) -> bool:
        """Whether a record is still to be joined (join_large)."""
        if not LargeRecord.outstanding:
            return False
        return any(type(op[3]) is LargeRecord for op in self.ops)

    def join_large(self) -> list[tuple[int, str, int, bytes | None]]:
        """The ops with each large record joined into its bytes (on the commit's thread,
        before the store writes the batch)."""
        ops = self.ops
        if self.has_large():
            for i, (op, queue, seq, value) in enumerate(ops):
                if type(value) is LargeRecord:
                    ops[i] = (op, queue, seq, value.join())
                    if value.size >= LARGE_RECORD:
                        self.large.append((queue, seq, value.session_id))
        return ops  # type: ignore[return-value]  # (bytes only now)

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
            or self.reads
        )
