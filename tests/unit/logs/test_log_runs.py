"""Run records (schema version 2): one stored value for an event of a run of messages, read
back everywhere as the version-1 records it stands for, to the byte (store.read_log, the log
readers of sbemu.logs, bounds and retention on a real LMDB store)."""

from __future__ import annotations

import pytest

from builders import message_record
from sbemu.logs import reader as logreader
from sbemu.partitions.records import (
    LogEvent,
    MessageRecord,
    decode_log,
    encode_log,
    encode_log_run,
    expand_log,
    log_extent,
)
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.writebatch import WriteBatch

NOW = 1_700_000_000_000
SITE = ("другой-ns", "Q", "subscriptions/s/$deadletterqueue", 3)


def record(seq: int, **kw: object) -> MessageRecord:
    tail = b"\x00Sw\xa1\x02hi\x00St\xc1\x01\x00"
    fields: dict = {
        "properties_span": (10, 13) if seq % 2 else None,
        "body_span": (0, 7),
        "message_id": f"m-ü{seq}" if seq % 3 else None,
        "session_id": "s" if seq % 4 == 1 else None,
        "partition_key": "pk" * seq if seq % 5 == 2 else None,
    }
    fields.update(kw)
    return message_record(
        sequence_number=seq,
        enqueued_time_ms=NOW - seq,
        delivery_count=seq % 3,
        message_id=fields["message_id"],
        session_id=fields["session_id"],
        partition_key=fields["partition_key"],
        ttl_ms=60_000,
        tail=tail,
        size=len(tail) + seq,
        properties_span=fields["properties_span"],
        body_span=fields["body_span"],
    )


def singles(
    recs: list[MessageRecord], offset: int, event: LogEvent, reason: str | None, body: bool
) -> list[bytes]:
    ns, entity, queue, partition = SITE
    return [
        encode_log(
            namespace=ns,
            entity=entity,
            queue=queue,
            partition=partition,
            offset=offset + i,
            event=event,
            record=r,
            event_ms=NOW + 5,
            reason=reason,
            with_body=body,
        )
        for i, r in enumerate(recs)
    ]


@pytest.mark.parametrize(
    "event,reason,body",
    [
        (LogEvent.DELIVERED, None, False),
        (LogEvent.COMPLETED, None, True),
        (LogEvent.DEADLETTERED, "TTLExpiredException", False),
    ],
)
@pytest.mark.parametrize("n", [2, 7, 300])
def test_a_run_expands_to_the_bytes_of_its_plain_records(event, reason, body, n):
    recs = [record(seq) for seq in range(1, n + 1)]
    recs.append(record((7 << 48) | 2**40, message_id="x" * 70_000))  # wide fields
    offset = 2**33
    value = encode_log_run(SITE, offset, event, recs, NOW + 5, reason, body)
    assert log_extent(value) == len(recs)
    assert expand_log(value) == singles(recs, offset, event, reason, body)
    assert len(value) < sum(map(len, singles(recs, offset, event, reason, body)))
    with pytest.raises(ValueError, match="run record"):
        decode_log(value)  # only through expand_log


@pytest.mark.parametrize("event", list(LogEvent))
def test_every_event_kind_expands_to_its_plain_records(event):
    """A run of each kind of event is read back as encode_log writes each of its records,
    every one of the 18 keys in the schema's order (with and without bodies)."""
    recs = [record(seq) for seq in range(1, 6)]
    for reason, body in ((None, False), ("MaxDeliveryCountExceeded", True)):
        value = encode_log_run(SITE, 40, event, recs, NOW + 5, reason, body)
        plain = singles(recs, 40, event, reason, body)
        assert expand_log(value) == plain
        first = decode_log(plain[1])
        assert list(first) == [
            "v", "ns", "entity", "queue", "partition", "offset", "event", "seq", "message_id",
            "session_id", "partition_key", "enqueued_ms", "event_ms", "size", "delivery_count",
            "reason", "properties", "body",
        ]  # fmt: skip
        assert (first["offset"], first["event"], first["reason"]) == (41, event.value, reason)
        assert first["body"] == (recs[1].tail[0:7] if body else None)


def test_a_plain_record_is_its_own_expansion():
    [plain] = singles([record(1)], 4, LogEvent.ENQUEUED, None, False)
    assert expand_log(plain) == [plain] and log_extent(plain) == 1


# A log of plain records and runs on a real store: offsets 0-2 plain, 3-7 a run, 8 plain,
# 9-11 a run (the last record).
LAYOUT = [(0, 1), (1, 1), (2, 1), (3, 5), (8, 1), (9, 3)]


def expected_log() -> list[bytes]:
    out = []
    for offset, n in LAYOUT:
        recs = [record(offset + i + 1) for i in range(n)]
        out += singles(recs, offset, LogEvent.DELIVERED, None, False)
    return out


@pytest.fixture
def log_path(tmp_path):
    path = str(tmp_path / "partition-00")
    store = PartitionStore(path, map_size=64 << 20, durable=False)
    batch = WriteBatch()
    for offset, n in LAYOUT:
        recs = [record(offset + i + 1) for i in range(n)]
        if n == 1:
            value = singles(recs, offset, LogEvent.DELIVERED, None, False)[0]
        else:
            value = encode_log_run(SITE, offset, LogEvent.DELIVERED, recs, NOW + 5, None, False)
        batch.log.append((offset, value))
    batch.meta["next_log_offset"] = 12
    store.commit(batch)
    store.close()
    yield path
    logreader.close_all()


def opened(path: str) -> PartitionStore:
    logreader.close_all()  # one handle per path and process (py-lmdb)
    return PartitionStore(path, map_size=64 << 20, durable=False)


def test_read_log_expands_runs_from_any_offset(log_path):
    store = opened(log_path)
    want = expected_log()
    for start in range(14):
        for limit in (1, 2, 4, 100):
            got = store.read_log(start, limit)
            assert got == [(off, want[off]) for off in range(start, min(12, start + limit))]
    assert store.log_bounds() == (0, 12)
    store.close()


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 1000])
def test_iter_log_expands_runs_in_any_range_and_chunk(log_path, chunk):
    want = expected_log()
    assert logreader.log_end(log_path) == 12
    for start in range(12):
        for end in range(start + 1, 14):
            chunks = list(logreader.iter_log(log_path, start, end, chunk=chunk))
            assert [v for c in chunks for v in c] == want[start:end]
            assert all(0 < len(c) <= chunk for c in chunks)


def test_trimming_keeps_a_run_that_reaches_the_cut_whole(log_path):
    want = expected_log()
    store = opened(log_path)
    assert store.trim_log(5) == 3  # 0-2 go; the run 3-7 reaches 5: kept whole
    assert store.log_bounds() == (3, 12)
    assert store.read_log(0, 100) == [(off, want[off]) for off in range(3, 12)]
    store.close()
    assert logreader.log_start(log_path) == 3  # readers are told where the log starts
    assert [v for c in logreader.iter_log(log_path, 4, 12) for v in c] == want[4:12]
    with pytest.raises(logreader.LogTrimmed):
        list(logreader.iter_log(log_path, 2, 12))
    store = opened(log_path)
    assert store.trim_log(5) == 0  # nothing more below 5 can go
    assert store.trim_log(9) == 6  # the run 3-7 and 8
    assert store.log_bounds() == (9, 12)
    assert store.trim_log(12) == 3  # the last run: the log is empty, its end kept
    assert store.log_bounds() == (12, 12)
    store.close()
    assert logreader.log_end(log_path) == 12
