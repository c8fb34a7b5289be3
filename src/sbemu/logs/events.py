"""Partition-log records as report events: the event columns and the decoding they need.

Shared by the Spark data source (sparkjobs/source.py, in its executors) and the segment
exporter (sbemu.logs.export). Decodes the message's application properties and body with the AMQP
codec (sbemu.protocol.codec), which is why this sits above both partitions/ and protocol/.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sbemu.partitions import LOG_FIELDS, LOG_SCHEMA_VERSION, decode_log
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
    "namespace",
    "entity",
    "queue",
    "partition",
    "offset",
    "timestamp",
    "event",
    "key",
    "sequence_number",
    "message_id",
    "session_id",
    "partition_key",
    "enqueued_time",
    "size",
    "delivery_count",
    "reason",
    "properties",
    "body",
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


# The log record's keys (records.LOG_FIELDS) as an Arrow struct (msgpack decodes each record to
# a dict; pyarrow converts the whole list of dicts in C++, missing keys as nulls). "properties"
# and "body" stay encoded here: most records have neither, and those that do are decoded one by
# one. The version is read as int64, so whatever a record holds there is reported as an
# unknown version rather than failing a narrower cast.
_RECORD_STRUCT = tuple((name, "int64" if name == "v" else kind) for name, kind in LOG_FIELDS)


def _arrow_type(kind: str) -> Any:
    import pyarrow as pa

    return {
        "int32": pa.int32(),
        "int64": pa.int64(),
        "string": pa.string(),
        "binary": pa.binary(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "map": pa.map_(pa.string(), pa.string()),
    }[kind]


_EVENT_KINDS = (
    "string",
    "string",
    "string",
    "int32",
    "int64",
    "timestamp",
    "string",
    "string",
    "int64",
    "string",
    "string",
    "string",
    "timestamp",
    "int64",
    "int32",
    "string",
    "map",
    "binary",
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
    encoded), vectorised: records in the layout encode_log writes are parsed column by column
    with numpy (`_parse_canonical`: no Python per record); any other record (an older layout,
    numpy missing) makes the chunk go through msgpack, one call per record, with the columns
    built by Arrow in C++. Refuses unknown record versions (as decode_log)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = _parse_canonical(values)
    if table is None:
        import msgpack

        struct = pa.struct([pa.field(n, _arrow_type(k)) for n, k in _RECORD_STRUCT])
        unpack = msgpack.unpackb
        records = pa.array([unpack(v) for v in values], type=struct)
        table = pa.Table.from_struct_array(records)
    v = table["v"]
    if v.null_count or (len(v) and not pc.all(pc.equal(v, LOG_SCHEMA_VERSION)).as_py()):
        bad = next(x for x in v.to_pylist() if x != LOG_SCHEMA_VERSION)
        raise ValueError(f"unknown log record version {bad!r}")
    return table


# msgpack type bytes (https://github.com/msgpack/msgpack/blob/master/spec.md)
_NIL = 0xC0
_UINT = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}  # type byte -> payload bytes (big-endian)
_INT = {0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
_STR = {0xD9: 1, 0xDA: 2, 0xDB: 4}  # type byte -> bytes of the length that follows
_BIN = {0xC4: 1, 0xC5: 2, 0xC6: 4}
_MAP16_18 = (0xDE, 0x00, len(_RECORD_STRUCT))  # the map header encode_log writes


def _parse_canonical(values: list[bytes]) -> Any:
    """The records as a pyarrow Table of _RECORD_STRUCT's columns, parsed with numpy, when
    every record is a msgpack map of exactly those keys in that order (what encode_log
    writes); None otherwise (the caller decodes them one by one).

    Column by column over all records at once: each step checks the key's bytes, reads the
    value's type byte, and gathers integers (big-endian, by width) or the bytes of strings
    into Arrow buffers. About ten times faster than msgpack + dicts + Arrow conversion."""
    try:
        import numpy as np
    except ImportError:
        return None
    import pyarrow as pa

    n = len(values)
    if n == 0:
        return None
    lens = np.fromiter(map(len, values), dtype=np.int64, count=n)
    ends = np.cumsum(lens)
    starts = ends - lens
    joined = b"".join(values)
    # padded so that reads past the last record stay inside, and to whole 8-byte words
    buf = np.frombuffer(joined + bytes(16 + (-len(joined)) % 8), dtype=np.uint8)
    aligned = buf.view("<u8")
    eight, fifty_six = np.uint64(8), np.uint64(56)

    def words(at: Any) -> Any:
        """The 8 bytes at each position of `at` as little-endian integers (two gathers of
        aligned words, shifted together)."""
        k = at >> 3
        r = (at & 7).astype(np.uint64) * eight
        return (aligned[k] >> r) | ((aligned[k + 1] << eight) << (fifty_six - r))

    for i, byte in enumerate(_MAP16_18):
        if not np.array_equal(buf[starts + i], np.full(n, byte, np.uint8)):
            return None
    pos = starts + 3
    columns: dict[str, Any] = {}
    for name, kind in _RECORD_STRUCT:
        key = bytes([0xA0 | len(name)]) + name.encode()
        for part in range(0, len(key), 8):  # the key's bytes, 8 at a time
            chunk = key[part : part + 8]
            mask = (1 << (8 * len(chunk))) - 1
            got = words(pos + part) & np.uint64(mask)
            if not (got == np.uint64(int.from_bytes(chunk, "little"))).all():
                return None
        pos = pos + len(key)
        t = buf[pos].astype(np.int64)
        null = t == _NIL
        try:
            if kind in ("int32", "int64"):
                column, size = _ints(np, words, pos, t, null)
                if column is not None and kind == "int32":
                    column = column.cast(pa.int32())
            else:
                column, size = _bytes(np, pa, buf, pos, t, null, kind)
        except (IndexError, pa.ArrowInvalid):  # lengths that point past the data, bad UTF-8
            return None
        if column is None:
            return None
        columns[name] = column
        pos = pos + size
    if not np.array_equal(pos, ends):
        return None
    arrays = [columns[name] for name, _kind in _RECORD_STRUCT]
    return pa.Table.from_arrays(arrays, names=[name for name, _kind in _RECORD_STRUCT])


def _validity(np: Any, pa: Any, null: Any) -> Any:
    if not null.any():
        return None
    return pa.py_buffer(np.packbits(~null, bitorder="little"))


def _ints(np: Any, words: Callable[[Any], Any], pos: Any, t: Any, null: Any) -> tuple[Any, Any]:
    """An integer column: fixints, uint8..64, int8..64 or nil; (None, None) on other types."""
    import pyarrow as pa

    fixpos, fixneg = t < 0x80, t >= 0xE0
    size = np.ones(len(t), dtype=np.int64)
    known = null | fixpos | fixneg
    value = np.where(fixpos, t, t - 256)
    if not known.all():
        raw = words(pos + 1).byteswap()  # the 8 bytes after the type byte, big-endian
        for table, signed in ((_UINT, False), (_INT, True)):
            for code, width in table.items():
                m = t == code
                if not m.any():
                    continue
                v = raw[m] >> np.uint64(8 * (8 - width))
                if signed:
                    bits = 8 * width
                    v = (
                        v.astype(np.int64)
                        if bits == 64
                        else (
                            v.astype(np.int64)
                            - ((v >> np.uint64(bits - 1)).astype(np.int64) << bits)
                        )
                    )
                elif width == 8 and (v >> np.uint64(63)).any():
                    return None, None  # above int64: the per-record path says what to do
                value[m] = v.astype(np.int64)
                size[m] = 1 + width
                known |= m
        if not known.all():
            return None, None
    value = np.where(null, 0, value)
    return pa.Array.from_buffers(
        pa.int64(), len(t), [_validity(np, pa, null), pa.py_buffer(value.astype(np.int64))]
    ), size


def _bytes(np: Any, pa: Any, buf: Any, pos: Any, t: Any, null: Any, kind: str) -> tuple[Any, Any]:
    """A string or binary column (fixstr/str8..32 or bin8..32, or nil); (None, None) on
    other types."""
    codes = _STR if kind == "string" else _BIN
    fix = (t >= 0xA0) & (t <= 0xBF) if kind == "string" else np.zeros(len(t), dtype=bool)
    length = np.where(fix, t & 0x1F, 0)
    head = np.where(fix, 1, 0)
    known = null | fix
    if not known.all():
        for code, width in codes.items():
            m = t == code
            if not m.any():
                continue
            n = np.zeros(int(m.sum()), dtype=np.int64)
            for j in range(width):
                n = (n << 8) | buf[pos[m] + 1 + j].astype(np.int64)
            length[m] = n
            head[m] = 1 + width
            known |= m
        if not known.all():
            return None, None
    length = np.where(null, 0, length)
    size = np.where(null, 1, head + length)
    offsets = np.zeros(len(t) + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 1 << 31:
        return None, None
    first = pos + head  # where each value's bytes start
    index = np.repeat(first - offsets[:-1], length) + np.arange(total, dtype=np.int64)
    data = buf[index]
    arrow_type = pa.string() if kind == "string" else pa.binary()
    column = pa.Array.from_buffers(
        arrow_type,
        len(t),
        [_validity(np, pa, null), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
    )
    if kind == "string":
        column.validate(full=True)  # UTF-8
    return column, size


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
        t["ns"],
        t["entity"],
        t["queue"],
        t["partition"],
        t["offset"],
        micros("event_ms"),
        t["event"],
        pc.coalesce(t["session_id"], t["partition_key"]),
        t["seq"],
        t["message_id"],
        t["session_id"],
        t["partition_key"],
        micros("enqueued_ms"),
        t["size"],
        t["delivery_count"],
        t["reason"],
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
