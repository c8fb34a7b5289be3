"""A large message record read back from the store off the event loop.

The read-ahead (SubQueueReader.refill) stops at a stored record of LARGE_RECORD bytes or more
(records.decode_ahead). Decoding it there copied its body (up to 100 MB on Premium) out of
LMDB's map into a new bytes object on the event loop: 45-60 ms of page faults and copying for
99 MB, and the worst loop pass of such a delivery took 79 ms on a quiet machine (`make
loop-hold`). So the read-ahead only notes where it stopped (`ahead`: the record's sequence
number, its fields read with the body left a view of the map), and the record is read by the
partition's next commit, on the commit's thread, after that commit's writes (`read`, from
PartitionStore.commit): the fields decoded as before, the body copied into fresh pages with
the GIL released, as writebatch.LargeRecord joins a large record on its way in. The record
joins the line back on the loop, once the commit is done (SubQueueReader), checked against
what was staged meanwhile.

The same holds for a line's next record read alone (`small_or_ahead`): a message delivered
again from the back line (abandoned, its lock lost) or a session's next message, whose line
waits for it meanwhile (SubQueueReader.pop_ready).

A record in an older layout is decoded whole where it is met, as before.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .records import MESSAGE_SCHEMA_VERSION, MessageRecord, decode_message
from .writebatch import LARGE_RECORD, join_without_gil

_FIELDS = msgspec.structs.fields(MessageRecord)
_NAMES = tuple(f.name for f in _FIELDS)
_TAIL = _NAMES.index("tail")
# MessageRecord's layout with the body decoded as a view of the value (no copy)
_Head = msgspec.defstruct(
    "LargeRecordHead",
    [
        (
            f.name,
            memoryview if f.name == "tail" else f.type,
            *(() if f.default is msgspec.NODEFAULT else (f.default,)),
        )
        for f in _FIELDS
    ],
    array_like=True,
    tag=MESSAGE_SCHEMA_VERSION,
)
_HEAD = msgspec.msgpack.Decoder(_Head).decode


NOT_READ = object()  # what a reader is given when the commit could not read the record


class Ahead:
    """A large record the read-ahead (or a peek) stopped at, not read yet."""

    __slots__ = ("sequence_number", "session_id")

    def __init__(self, sequence_number: int, session_id: str | None) -> None:
        self.sequence_number = sequence_number
        self.session_id = session_id


def ahead(value: Any) -> MessageRecord | Ahead:
    """The read-ahead's `decode_large`: where it stopped, or the record itself when it is in
    an older layout."""
    try:
        head: Any = _HEAD(value)
        return Ahead(head.sequence_number, head.session_id)
    except msgspec.MsgspecError:
        return decode_message(value)


def small_or_ahead(value: Any, _large: int = LARGE_RECORD) -> MessageRecord | Ahead:
    """A line's next record read alone (the back line, a session's line): decoded when it is
    small, noted (`ahead`) when it is LARGE_RECORD bytes or more."""
    if len(value) >= _large:
        return ahead(value)
    return decode_message(value)


def read(value: Any) -> MessageRecord:
    """The record in `value` (a view of LMDB's map, valid while its transaction is), its body
    copied with the GIL released (for the commit's thread)."""
    try:
        head = _HEAD(value)
    except msgspec.MsgspecError:
        return decode_message(value)
    fields = [getattr(head, name) for name in _NAMES]
    view = fields[_TAIL]
    fields[_TAIL] = join_without_gil((view,), len(view))
    return MessageRecord(*fields)
