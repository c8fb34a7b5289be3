"""The vectorised log decoder (logevents.log_to_event_table) equals the per-record one."""

from __future__ import annotations

from datetime import UTC, datetime

import msgpack
import pytest

from builders import message_record
from sbemu.logs import events as logevents

pa = pytest.importorskip("pyarrow")

PROPS = bytes([0xC1, 0x09, 0x02, 0xA1, 0x01]) + b"k" + bytes([0xA1, 0x03]) + b"val"
BODY = bytes([0x00, 0x53, 0x75, 0xA0, 0x02]) + b"hi"


def record(offset: int, **extra: object) -> bytes:
    base = {
        "v": 1,
        "ns": "NS",
        "entity": "q",
        "queue": "main",
        "partition": 2,
        "offset": offset,
        "event": "enqueued",
        "seq": 100 + offset,
        "message_id": f"m{offset}",
        "session_id": None,
        "partition_key": "pk",
        "enqueued_ms": 1_767_225_600_000,
        "event_ms": 1_767_225_600_000 + offset,
        "size": 10,
        "delivery_count": 0,
        "reason": None,
        "properties": None,
        "body": None,
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


def _slow_table(values: list[bytes]) -> object:
    struct = pa.struct([pa.field(n, logevents._arrow_type(k)) for n, k in logevents._RECORD_STRUCT])
    return pa.Table.from_struct_array(pa.array([msgpack.unpackb(v) for v in values], type=struct))


def test_numpy_parse_equals_msgpack_on_every_value_encoding() -> None:
    """The column-wise parse (encode_log's layout) gives msgpack's values for every width of
    integer, string and binary msgpack writes, nulls, non-ASCII text; nothing falls back."""
    pytest.importorskip("numpy")
    values = [
        record(0),
        record(
            1,
            seq=2**63 - 1,
            enqueued_ms=2**40,
            event_ms=70_000,
            size=65_535,
            delivery_count=300,
            partition=127,
        ),
        record(
            2, seq=-1, size=-129, delivery_count=-32_768, enqueued_ms=-(2**40), event_ms=-(2**63)
        ),
        record(2**32),
        record(
            3, message_id="x" * 31, session_id="s" * 32, partition_key="p" * 255, reason="r" * 256
        ),
        record(
            4, message_id="é日本" * 30, reason="y" * 70_000, properties=PROPS * 40, body=b"\0" * 300
        ),
        record(5, properties=b"", body=BODY * 20_000, session_id="", partition_key=None),
        record(6, size=0, delivery_count=0, partition=0, event="deadlettered"),
    ]
    fast = logevents._parse_canonical(values)
    assert fast is not None
    assert fast.equals(_slow_table(values))
    # one record at a time, too (every column then holds a single encoding)
    for v in values:
        one = logevents._parse_canonical([v])
        assert one is not None and one.equals(_slow_table([v]))


def test_other_layouts_go_through_msgpack() -> None:
    """Records not in encode_log's layout (keys missing, reordered, another type) are not
    parsed column-wise; decode_log_table still decodes them exactly."""
    pytest.importorskip("numpy")
    old = msgpack.unpackb(record(1))
    del old["properties"], old["body"]
    reordered = dict(reversed(list(msgpack.unpackb(record(2)).items())))
    as_float = msgpack.unpackb(record(3))
    as_float["size"] = 1.5
    as_bin = msgpack.unpackb(record(4))
    as_bin["message_id"] = b"raw"
    for odd in (old, reordered, as_float, as_bin):
        values = [record(0), msgpack.packb(odd, use_bin_type=True)]
        assert logevents._parse_canonical(values) is None
    values = [record(0), msgpack.packb(reordered, use_bin_type=True)]
    assert logevents.decode_log_table(values).equals(_slow_table(values))
    assert logevents._parse_canonical([record(0)[:-1]]) is None  # truncated
    assert logevents._parse_canonical([record(0) + b"\xc0"]) is None  # trailing byte


def test_bad_utf8_is_not_parsed_column_wise() -> None:
    pytest.importorskip("numpy")
    good = record(0, message_id="abc")
    bad = good.replace(b"\xa3abc", b"\xa3a\xffc")
    assert logevents._parse_canonical([bad]) is None


def test_encode_log_records_take_the_column_path() -> None:
    """What the broker writes (records.encode_log) is in the parsed layout."""
    pytest.importorskip("numpy")
    from sbemu.partitions.records import LogEvent, encode_log

    rec = message_record(
        sequence_number=(3 << 48) | 7,
        enqueued_time_ms=1_767_225_600_000,
        delivery_count=2,
        message_id="mid",
        session_id="s",
        tail=b"",
        size=321,
    )
    values = [
        encode_log(
            namespace="NS",
            entity="q",
            queue=q,
            partition=3,
            offset=i,
            event=e,
            record=rec,
            event_ms=1_767_225_600_000 + i,
            reason=r,
        )
        for i, (q, e, r) in enumerate(
            [
                ("main", LogEvent.ENQUEUED, None),
                ("main", LogEvent.DELIVERED, None),
                ("main/$deadletterqueue", LogEvent.DEADLETTERED, "MaxDeliveryCountExceeded"),
            ]
        )
    ]
    fast = logevents._parse_canonical(values)
    assert fast is not None and fast.equals(_slow_table(values))
