"""A `$management` answer that carries a large message (a peek or a receive by sequence number
of a message over LARGE_DELIVERY), encoded as its parts and sent a slice per loop pass.

Encoded by proton, such an answer was copied whole five times on the event loop (the record's
body into the answer's map, the map into proton's data, the data into the encoded message,
that into the link's buffer, then framed at once): 720-850 ms for one 99 MB message (`make
loop-hold --kinds peek,deferred`). Here the answer's amqp-value section is written around each
message's parts (messages.encode_delivery_parts: its stored body not copied), the properties
and application-properties sections in front of it are proton's as before, and the reply link
sends it as deliveries.py sends a large delivery (largedelivery.LargeSend).

The section is the map proton would write ({"messages": [{"message": binary, "lock-token":
uuid}, ...]}, string keys), in the 32-bit forms.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from .codec import enc_string, enc_uuid
from .largedelivery import LARGE_DELIVERY, Pieces

_AMQP_VALUE = b"\x00\x53\x77"
_MESSAGES = enc_string("messages")
_MESSAGE = enc_string("message")
_LOCK_TOKEN = enc_string("lock-token")

Part = bytes | memoryview
# one message of the answer: its encoded parts and, when locked, its lock token
Item = tuple[Sequence[Part], uuid.UUID | None]


def is_large(items: Sequence[Item]) -> bool:
    """Whether the answer carries a message over LARGE_DELIVERY (else proton encodes it)."""
    return any(sum(len(p) for p in parts) > LARGE_DELIVERY for parts, _token in items)


def _compound32(code: bytes, count: int, size: int) -> bytes:
    """A list32 / map32 constructor for `count` elements of `size` bytes [AMQP 1.0 1.2]."""
    return code + (size + 4).to_bytes(4, "big") + count.to_bytes(4, "big")


def messages_section(items: Sequence[Item]) -> list[Part]:
    """The answer's amqp-value section as parts, each message's parts not joined."""
    out: list[Part] = []
    entries = 0
    for parts, token in items:
        size = sum(len(p) for p in parts)
        binary = b"\xb0" + size.to_bytes(4, "big")
        tail = _LOCK_TOKEN + enc_uuid(token) if token is not None else b""
        inner = len(_MESSAGE) + len(binary) + size + len(tail)
        head = _compound32(b"\xd1", 4 if token is not None else 2, inner)
        out += (head, _MESSAGE, binary, *parts)
        if tail:
            out.append(tail)
        entries += len(head) + inner
    listed = _compound32(b"\xd0", len(items), entries)
    mapped = _compound32(b"\xd1", 2, len(_MESSAGES) + len(listed) + entries)
    return [_AMQP_VALUE + mapped + _MESSAGES + listed, *out]


def answer(head: bytes, items: Sequence[Item]) -> Pieces:
    """The whole answer: `head` (its sections before the body, encoded) then the messages."""
    return Pieces([head, *messages_section(items)])


class LargeMessages:
    """A management result that carries a large message: its messages, encoded as parts,
    in place of {"messages": [...]} (management.py answers it with `answer`)."""

    __slots__ = ("items",)

    def __init__(self, items: list[Item]) -> None:
        self.items = items


def messages_result(items: list[Item]) -> dict[str, Any] | LargeMessages:
    """A peek's or receive-by-sequence-number's result: {"messages": [{"message": binary,
    "lock-token": uuid}, ...]}, or as parts when a message is large."""
    if is_large(items):
        return LargeMessages(items)
    messages = []
    for parts, token in items:
        item: dict[str, Any] = {"message": b"".join(parts)}
        if token is not None:
            item["lock-token"] = token
        messages.append(item)
    return {"messages": messages}
