"""Message properties as the filter language sees them (sbemu.filters.MessageView).

Only topic sends whose subscriptions have real rules get here (lazily): the queue hot path never
decodes properties. AMQP types become the Python types the filters expect: symbols and strings
are str, timestamps are aware UTC datetimes, TTL a timedelta.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..filters import MessageView
from . import codec, sections

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _python(value: Any) -> Any:
    if isinstance(value, codec.Timestamp):
        return _EPOCH + dt.timedelta(milliseconds=int(value))
    if isinstance(value, codec.Symbol):
        return str(value)
    if isinstance(value, codec.Described):
        return _python(value.value)
    return value


def message_view(scanned: sections.ScannedMessage) -> MessageView:
    """System and user properties of a scanned message."""
    props = sections.read_properties(scanned.tail)
    app = sections.read_application_properties(scanned.tail)
    message_id = props.get("message-id")
    system: dict[str, object] = {
        "MessageId": str(message_id) if message_id is not None else None,
        "CorrelationId": _python(props.get("correlation-id")),
        "To": _python(props.get("to")),
        "ReplyTo": _python(props.get("reply-to")),
        "Label": _python(props.get("subject")),
        "SessionId": _python(props.get("group-id")),
        "ReplyToSessionId": _python(props.get("reply-to-group-id")),
        "ContentType": _python(props.get("content-type")),
        "Size": scanned.size,
        "PartitionKey": scanned.partition_key,
        "DeliveryCount": 0,
        "TimeToLive": dt.timedelta(milliseconds=scanned.ttl_ms) if scanned.ttl_ms else None,
        "ScheduledEnqueueTimeUtc": (
            _EPOCH + dt.timedelta(milliseconds=scanned.scheduled_enqueue_time_ms)
            if scanned.scheduled_enqueue_time_ms is not None
            else None
        ),
    }
    user = {str(k): _python(v) for k, v in app.items()}
    return MessageView(system, user)


def encode_property(value: object) -> bytes:
    """Encode a value a rule action produced, for application or system properties."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return codec.enc_timestamp(int((value - _EPOCH) / dt.timedelta(milliseconds=1)))
    if isinstance(value, dt.timedelta):
        return codec.enc_long(int(value / dt.timedelta(microseconds=1)) * 10)  # .NET ticks
    return codec.encode(value)


def encode_symbol(value: object) -> bytes:
    """Encode a system property that travels as a symbol (content-type)."""
    return codec.enc_symbol(str(value))
