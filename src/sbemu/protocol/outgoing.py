"""A peek-locked delivery's message bytes, the common case in few steps (the receive hot path).

messages.encode_delivery rebuilds a stored message with its service annotations [contract 3.7]
for every reader (deliveries, peek, receive-by-sequence-number). A receiver's delivery is by
far the most frequent, and most stored messages carry nothing to rewrite (no dead-letter
fields, no property overrides, not scheduled, not forwarded). For those, locked_deliveries
gives the very same bytes with less work: the header section comes from a small cache (it
depends only on durable, priority, ttl and delivery count), the lock token's
delivery-annotations section is a constant head and 16 bytes, the three or four stamps are
packed by one struct call, and the message is joined once. Anything else goes to
encode_delivery (a sender's own delivery-annotations among them): locked_deliveries is the one
place that decides which. delivery_bytes is its form for one message.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from ..partitions import MessageRecord
from . import sections
from .largedelivery import LARGE_DELIVERY, Pieces
from .messages import (
    K_ENQUEUED,
    K_LOCK_TOKEN,
    K_LOCKED_UNTIL,
    K_PARTITION_ID,
    K_SEQUENCE,
    encode_delivery,
    encode_delivery_parts,
    lock_token_stamp,
)

_ANNOTATIONS = b"\x00\x53\x72"
# delivery-annotations {x-opt-lock-token: uuid} up to the 16 token bytes [contract 3.7]
_LOCK_TOKEN_HEAD = (
    b"\x00\x53\x71\xc1" + bytes((1 + len(K_LOCK_TOKEN) + 17, 2)) + K_LOCK_TOKEN + b"\x98"
)
_CLIENT_DA = b"\x00\x53\x71"  # a tail starting so holds the sender's delivery-annotations
# Stamps as encode_delivery writes them: sequence number as long (0x81 when beyond smalllong),
# enqueued time and locked-until as timestamps (0x83), partition id as short (0x61).
_K_SEQ, _K_ENQ, _K_LOCK, _K_PID = (
    K_SEQUENCE + b"\x81",
    K_ENQUEUED + b"\x83",
    K_LOCKED_UNTIL + b"\x83",
    K_PARTITION_ID + b"\x61",
)
_STAMPS = struct.Struct(f">{len(_K_SEQ)}sq{len(_K_ENQ)}sq{len(_K_LOCK)}sq")
_STAMPS_PID = struct.Struct(f">{len(_K_SEQ)}sq{len(_K_ENQ)}sq{len(_K_LOCK)}sq{len(_K_PID)}sh")
_SMALLLONG_MAX = 127  # a sequence number up to this is a smalllong: left to encode_delivery
_HEADERS_MAX = 1024  # header sections cached (cleared when full)
_headers: dict[tuple[bool | None, int | None, int | None, int, bool | None], bytes] = {}


def _header(
    durable: bool | None,
    priority: int | None,
    ttl_ms: int | None,
    count: int,
    first_acquirer: bool | None,
) -> bytes:
    key = (durable, priority, ttl_ms, count, first_acquirer)
    hdr = _headers.get(key)
    if hdr is None:
        if len(_headers) >= _HEADERS_MAX:
            _headers.clear()
        hdr = _headers[key] = sections.build_message(
            durable=durable,
            priority=priority,
            ttl_ms=ttl_ms,
            delivery_count=count,
            first_acquirer=first_acquirer,
            annotations=b"",
            annotation_count=0,
            stamps=[],
            tail=b"",
        )
    return hdr


def _map_head(size: int, count: int) -> bytes:
    """The head of a map of `count` pairs whose items take `size` bytes: map8 when size and
    count (2 per pair) fit a byte, else map32."""
    if size < 0xFF and count <= 0x7F:
        return bytes((0xC1, size + 1, 2 * count))
    return b"\xd1" + (size + 4).to_bytes(4, "big") + (2 * count).to_bytes(4, "big")


# A lock token as its delivery tag: the GUID's bytes in .NET order (UUID.bytes_le) [contract
# 4.6], from its 16 big-endian bytes by one unpack and one pack.
_GUID_BE = struct.Struct(">IHH8s")
_GUID_LE = struct.Struct("<IHH8s")


class Held(Protocol):
    """What a delivery's bytes take of its lock (partitions.subqueue.Lock has them)."""

    @property
    def key(self) -> int: ...  # the lock token's int
    @property
    def until_ms(self) -> int: ...  # locked until (Unix ms)


# (delivery tag, message bytes, lock key) of one peek-locked delivery: the bytes unjoined
# (largedelivery.Pieces) for a message larger than LARGE_DELIVERY
Locked = tuple[bytes, bytes | Pieces, int]


class _Held(NamedTuple):
    key: int
    until_ms: int


def locked_deliveries(
    taken: Sequence[tuple[MessageRecord, Held | None]], partition_id: int | None
) -> list[Locked]:
    """(delivery tag, message bytes, lock key) of each peek-locked message of a run: the tag
    is the lock token in .NET byte order and the bytes are encode_delivery's exactly, built in
    one loop (the receive hot path: one call per run, the constants looked up once). A
    message larger than LARGE_DELIVERY keeps its stored tail unjoined (Pieces), so it is not
    copied here: largedelivery.py hands it to the engine a slice at a time."""
    out: list[Locked] = []
    append = out.append
    be, le = _GUID_BE.unpack, _GUID_LE.pack
    headers, da_head, ann_head, client_da = _headers, _LOCK_TOKEN_HEAD, _ANNOTATIONS, _CLIENT_DA
    join = b"".join
    if partition_id is None:
        pack, stamps_count, stamps_size = _STAMPS.pack, 3, _STAMPS.size
    else:
        pack, stamps_count, stamps_size = _STAMPS_PID.pack, 4, _STAMPS_PID.size
    heads: dict[int, bytes] = {}  # message-annotations section heads of this run
    k_seq, k_enq, k_lock, k_pid = _K_SEQ, _K_ENQ, _K_LOCK, _K_PID
    large = LARGE_DELIVERY
    for rec, lock in taken:
        assert lock is not None  # peek-locked: each message has its lock
        key = lock.key
        token = key.to_bytes(16, "big")
        tag = le(*be(token))
        seq = rec.sequence_number
        if (
            seq <= _SMALLLONG_MAX
            or rec.tail.startswith(client_da)
            or rec.property_overrides
            or rec.dead_letter_reason is not None
            or rec.dead_letter_description is not None
            or rec.dead_letter_source is not None
            or rec.scheduled_enqueue_time_ms is not None
            or rec.original_sequence_number is not None
        ):
            stamp = lock_token_stamp(key)
            if len(rec.tail) > large:
                parts = encode_delivery_parts(rec, partition_id, lock.until_ms, False, stamp)
                append((tag, Pieces(parts), key))
                continue
            data = encode_delivery(rec, partition_id, lock.until_ms, delivery_stamps=stamp)
            append((tag, data, key))
            continue
        if stamps_count == 3:
            stamps = pack(k_seq, seq, k_enq, rec.enqueued_time_ms, k_lock, lock.until_ms)
        else:
            stamps = pack(
                k_seq, seq, k_enq, rec.enqueued_time_ms, k_lock, lock.until_ms, k_pid, partition_id
            )
        annotations = rec.annotations
        # the message-annotations section's head: its map's size and count (a few shapes)
        akey = (len(annotations) << 32) | rec.annotation_count
        map_head = heads.get(akey)
        if map_head is None:
            map_head = heads[akey] = ann_head + _map_head(
                len(annotations) + stamps_size, rec.annotation_count + stamps_count
            )
        hkey = (rec.durable, rec.priority, rec.ttl_ms, rec.delivery_count, rec.first_acquirer)
        header = headers.get(hkey)
        if header is None:
            header = _header(*hkey)
        tail = rec.tail
        if len(tail) > large:
            head = join((header, da_head, token, map_head, annotations, stamps))
            append((tag, Pieces((head, tail)), key))
            continue
        data = join((header, da_head, token, map_head, annotations, stamps, tail))
        append((tag, data, key))
    return out


def delivery_bytes(
    rec: MessageRecord, partition_id: int | None, locked_until_ms: int, lock_key: int
) -> bytes:
    """One peek-locked message as sent to its receiver, its lock token (Lock.key) in the
    delivery-annotations: locked_deliveries' bytes for a run of one."""
    data = locked_deliveries(((rec, _Held(lock_key, locked_until_ms)),), partition_id)[0][1]
    return data if type(data) is bytes else bytes(data)
