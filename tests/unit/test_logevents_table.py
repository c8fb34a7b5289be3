"""The vectorised log decoder (logevents.log_to_event_table) equals the per-record one."""

from __future__ import annotations

from datetime import UTC, datetime

import msgpack
import pytest

from sbemu import logevents

pa = pytest.importorskip("pyarrow")

PROPS = bytes([0xC1, 0x09, 0x02, 0xA1, 0x01]) + b"k" + bytes([0xA1, 0x03]) + b"val"
BODY = bytes([0x00, 0x53, 0x75, 0xA0, 0x02]) + b"hi"


def record(offset: int, **extra: object) -> bytes:
    base = {
        "v": 1, "ns": "NS", "entity": "q", "queue": "main", "partition": 2, "offset": offset,
        "event": "enqueued", "seq": 100 + offset, "message_id": f"m{offset}",
        "session_id": None, "partition_key": "pk", "enqueued_ms": 1_767_225_600_000,
        "event_ms": 1_767_225_600_000 + offset, "size": 10, "delivery_count": 0,
        "reason": None, "properties": None, "body": None,
    }
    base.update(extra)
    return msgpack.packb(base, use_bin_type=True)


def test_table_equals_per_record_columns() -> None:
    values = [
        record(0),
        record(1, session_id="s1", properties=PROPS, body=BODY, reason="r"),
        record(2, partition_key=None, delivery_count=3),
    ]
    # a record written before "properties"/"body" existed lacks the keys
    old = msgpack.unpackb(record(3))
    del old["properties"], old["body"]
    values.append(msgpack.packb(old, use_bin_type=True))
    table = logevents.log_to_event_table(values)
    assert table.schema == logevents.event_arrow_schema()
    cols = logevents.log_to_event_columns(values)
    for name in logevents.EVENT_COLUMNS:
        got = table[name].to_pylist()
        want = cols[name]
        if name in ("timestamp", "enqueued_time"):
            want = [datetime.fromtimestamp(ms / 1000, tz=UTC) for ms in want]
        elif name == "properties":
            want = [None if v is None else list(v.items()) for v in want]
        assert got == want, name
    assert table["key"].to_pylist() == ["pk", "s1", None, "pk"]
    assert table["properties"].to_pylist()[1] == [("k", "val")]
    assert table["body"].to_pylist()[1] == b"hi"


def test_unknown_record_version_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log record version 7"):
        logevents.log_to_event_table([record(0), record(1, v=7)])


def test_empty() -> None:
    assert logevents.log_to_event_table([]).num_rows == 0
