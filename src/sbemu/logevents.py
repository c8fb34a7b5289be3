"""Partition-log records as report events: the event columns and the decoding they need.

Shared by the Spark data source (sparkjobs/source.py, in its executors) and the segment
exporter (sbemu.export). Decodes the message's application properties and body with the AMQP
codec (sbemu.protocol.codec), which is why this sits above both partitions/ and protocol/.
"""

from __future__ import annotations

from typing import Any

from sbemu.partitions.records import decode_log
from sbemu.protocol import codec

__all__ = [
    "EVENT_COLUMNS",
    "decode_body",
    "decode_properties",
    "log_to_event_columns",
    "render_value",
]

# The columns of the event stream, in order (the Spark schema lives in sparkjobs/source.py).
EVENT_COLUMNS = (
    "namespace", "entity", "queue", "partition", "offset", "timestamp", "event", "key",
    "sequence_number", "message_id", "session_id", "partition_key", "enqueued_time", "size",
    "delivery_count", "reason", "properties", "body",
)


def log_to_event_columns(values: list[bytes]) -> dict[str, list[Any]]:
    """Decode raw log values into the event-stream columns (EVENT_COLUMNS order).

    `timestamp` and `enqueued_time` stay Unix milliseconds here; `key` is the partitioning
    key [SB partitioning P6]: the session id, else the partition key.
    """
    cols: dict[str, list[Any]] = {name: [] for name in EVENT_COLUMNS}
    a = [cols[name].append for name in EVENT_COLUMNS]
    for raw in values:
        d = decode_log(raw)  # refuses unknown schema versions
        sid = d.get("session_id")
        pk = d.get("partition_key")
        a[0](d["ns"])
        a[1](d["entity"])
        a[2](d["queue"])
        a[3](d["partition"])
        a[4](d["offset"])
        a[5](d["event_ms"])
        a[6](d["event"])
        a[7](sid if sid is not None else pk)
        a[8](d.get("seq"))
        a[9](d.get("message_id"))
        a[10](sid)
        a[11](pk)
        a[12](d.get("enqueued_ms"))
        a[13](d.get("size"))
        a[14](d.get("delivery_count"))
        a[15](d.get("reason"))
        props = d.get("properties")
        a[16](decode_properties(props) if props is not None else None)
        body = d.get("body")
        a[17](decode_body(body) if body is not None else None)
    return cols


def render_value(value: Any) -> str | None:
    """An application property value as text: strings as is, true/false, numbers in decimal,
    timestamps as ISO-8601 UTC (milliseconds), binary as hex, UUIDs canonical."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, codec.Timestamp):
        from datetime import UTC, datetime

        return datetime.fromtimestamp(int(value) / 1000, tz=UTC).isoformat(timespec="milliseconds")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def decode_properties(raw: bytes) -> dict[str, str | None]:
    """A log record's "properties" (encoded AMQP map) as {name: value rendered as text}."""
    value, _ = codec.decode(bytes(raw))
    if not isinstance(value, dict):
        raise ValueError(f"application-properties is not a map: {type(value).__name__}")
    return {str(k): render_value(v) for k, v in value.items()}


def decode_body(raw: bytes) -> bytes:
    """A log record's "body" (encoded body sections) as bytes: the payload of the data
    sections, concatenated; an amqp-value / amqp-sequence body stays AMQP-encoded."""
    raw = bytes(raw)
    parts: list[bytes] = []
    pos = 0
    while pos < len(raw):
        section, pos = codec.decode(raw, pos)
        if not (isinstance(section, codec.Described) and section.descriptor == 0x75):
            return raw
        parts.append(bytes(section.value))
    return b"".join(parts)
