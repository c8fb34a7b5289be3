"""Partition-log records as report events: the event columns and the decoding they need.

Shared by the Spark data source (sparkjobs/source.py, in its executors) and the segment
exporter (sbemu.export). Decodes the message's application properties and body with the AMQP
codec (sbemu.protocol.codec), which is why this sits above both partitions/ and protocol/.
"""

from __future__ import annotations

from typing import Any

from sbemu.partitions.records import LOG_SCHEMA_VERSION, decode_log
from sbemu.protocol import codec

__all__ = [
    "EVENT_COLUMNS",
    "decode_body",
    "event_arrow_schema",
    "log_to_event_table",
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


# The log record's keys as an Arrow struct (msgpack decodes each record to a dict; pyarrow
# converts the whole list of dicts in C++, missing keys as nulls). "properties" and "body" stay
# encoded here: most records have neither, and those that do are decoded one by one.
_RECORD_STRUCT = (
    ("v", "int64"), ("ns", "string"), ("entity", "string"), ("queue", "string"),
    ("partition", "int32"), ("offset", "int64"), ("event", "string"), ("seq", "int64"),
    ("message_id", "string"), ("session_id", "string"), ("partition_key", "string"),
    ("enqueued_ms", "int64"), ("event_ms", "int64"), ("size", "int64"),
    ("delivery_count", "int32"), ("reason", "string"), ("properties", "binary"),
    ("body", "binary"),
)


def _arrow_type(kind: str) -> Any:
    import pyarrow as pa

    return {
        "int32": pa.int32(), "int64": pa.int64(), "string": pa.string(), "binary": pa.binary(),
        "timestamp": pa.timestamp("us", tz="UTC"), "map": pa.map_(pa.string(), pa.string()),
    }[kind]


_EVENT_KINDS = (
    "string", "string", "string", "int32", "int64", "timestamp", "string", "string", "int64",
    "string", "string", "string", "timestamp", "int64", "int32", "string", "map", "binary",
)


def event_arrow_schema() -> Any:
    """The event columns as a pyarrow schema (what Spark's EVENTS_SCHEMA maps to: timestamps
    in UTC microseconds)."""
    import pyarrow as pa

    return pa.schema(
        [pa.field(n, _arrow_type(k)) for n, k in zip(EVENT_COLUMNS, _EVENT_KINDS, strict=True)]
    )


def decode_log_table(values: list[bytes]) -> Any:
    """Raw log values as a pyarrow Table of the record's keys (`properties`/`body` still
    encoded), vectorised: one msgpack call per record, the columns built by Arrow in C++.
    Refuses unknown record versions (as decode_log)."""
    import msgpack
    import pyarrow as pa
    import pyarrow.compute as pc

    struct = pa.struct([pa.field(n, _arrow_type(k)) for n, k in _RECORD_STRUCT])
    unpack = msgpack.unpackb
    records = pa.array([unpack(v) for v in values], type=struct)
    table = pa.Table.from_struct_array(records)
    v = table["v"]
    if v.null_count or (len(v) and not pc.all(pc.equal(v, LOG_SCHEMA_VERSION)).as_py()):
        bad = next(x for x in v.to_pylist() if x != LOG_SCHEMA_VERSION)
        raise ValueError(f"unknown log record version {bad!r}")
    return table


def decode_sparse(column: Any, fn: Any, arrow_type: Any) -> Any:
    """Apply `fn` to the non-null values of a binary column (None stays None)."""
    import pyarrow as pa

    if column.null_count == len(column):
        return pa.nulls(len(column), type=arrow_type)
    return pa.array([None if x is None else fn(x) for x in column.to_pylist()], type=arrow_type)


def _map_items(raw: bytes) -> list[tuple[str, str | None]]:
    return list(decode_properties(raw).items())


def log_to_event_table(values: list[bytes]) -> Any:
    """Raw log values as a pyarrow Table of the event columns (EVENT_COLUMNS, typed as
    `event_arrow_schema()`): the vectorised form of `log_to_event_columns`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = decode_log_table(values)
    schema = event_arrow_schema()

    def micros(name: str) -> Any:
        return pc.multiply(t[name], 1000).cast(pa.timestamp("us", tz="UTC"))

    columns = [
        t["ns"], t["entity"], t["queue"], t["partition"], t["offset"], micros("event_ms"),
        t["event"], pc.coalesce(t["session_id"], t["partition_key"]), t["seq"],
        t["message_id"], t["session_id"], t["partition_key"], micros("enqueued_ms"),
        t["size"], t["delivery_count"], t["reason"],
        decode_sparse(t["properties"], _map_items, schema.field("properties").type),
        decode_sparse(t["body"], decode_body, pa.binary()),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


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
