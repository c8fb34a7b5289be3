"""Builders for the partitions' message values, shared by the tests (import ``builders``: pytest
puts tests/ on the path for tests/conftest.py).

A test names only the fields it cares about; the rest take the plain defaults below (active,
durable, no ids, TTL, priority or annotations), so a new field of ``MessageRecord`` or
``IncomingMessage`` is added here once, not to every literal.
"""

from __future__ import annotations

from typing import Any

from sbemu.partitions import IncomingMessage, MessageRecord, MessageState

RECORD_DEFAULTS: dict[str, Any] = {
    "state": MessageState.ACTIVE,
    "delivery_count": 0,
    "message_id": None,
    "session_id": None,
    "partition_key": None,
    "ttl_ms": None,
    "expires_at_ms": None,
    "durable": True,
    "priority": None,
    "annotation_count": 0,
    "annotations": b"",
}

INCOMING_DEFAULTS: dict[str, Any] = {
    "message_id": None,
    "session_id": None,
    "partition_key": None,
    "ttl_ms": None,
    "durable": True,
    "priority": None,
    "annotation_count": 0,
    "annotations": b"",
}


def message_record(**fields: Any) -> MessageRecord:
    """A stored message record; `fields` must give sequence_number, enqueued_time_ms, tail and
    size, and may override any default or optional field."""
    return MessageRecord(**{**RECORD_DEFAULTS, **fields})


def incoming_message(**fields: Any) -> IncomingMessage:
    """A message as the protocol side hands it to an entity; `fields` must give tail and size,
    and may override any default or optional field."""
    return IncomingMessage(**{**INCOMING_DEFAULTS, **fields})
