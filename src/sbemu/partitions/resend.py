"""Messages that move between entities inside the broker: a topic's scheduled message fanned
out when it fires, and (see forwarding.py) auto-forwarded messages.

A stored record is turned back into what a send hands the router (an IncomingMessage), so the
destination applies its own rules (filters, sessions, TTL) exactly as to a client's send.
Filters need the message's properties: `view_of` (injected by the server, which owns the
codec) builds them lazily, only when a subscription has a real rule.
"""

from __future__ import annotations

from collections.abc import Callable

from .records import IncomingMessage, MessageRecord

ViewOf = Callable[[MessageRecord], object]


def incoming_from_record(rec: MessageRecord, view_of: ViewOf | None) -> IncomingMessage:
    """The message a stored record carries, as a new send of it (no schedule: it is due)."""
    return IncomingMessage(
        message_id=rec.message_id,
        session_id=rec.session_id,
        partition_key=rec.partition_key,
        ttl_ms=rec.ttl_ms,
        durable=rec.durable,
        first_acquirer=rec.first_acquirer,
        priority=rec.priority,
        annotation_count=rec.annotation_count,
        annotations=rec.annotations,
        tail=rec.tail,
        size=rec.size,
        properties_span=rec.properties_span,
        body_span=rec.body_span,
        view=(lambda: view_of(rec)) if view_of is not None else None,
    )
