"""Log retention: registered readers, trim_log on a real LMDB store, the server's pass."""

from __future__ import annotations

import json
import logging
import os

import pytest

from builders import message_record
from sbemu.logs.retention import (
    plan_trim,
    reader_name,
    register_reader,
    registered_readers,
    trim_logs,
)
from sbemu.partitions.broker import PartitionBroker
from sbemu.partitions.records import LogEvent, encode_log
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.writebatch import WriteBatch

NOW = 1_700_000_000_000


def fill(store: PartitionStore, n: int, start: int = 0) -> None:
    rec = message_record(sequence_number=1, enqueued_time_ms=NOW, message_id="m", tail=b"", size=1)
    batch = WriteBatch()
    for off in range(start, start + n):
        batch.log.append(
            (
                off,
                encode_log(
                    namespace="ns",
                    entity="q",
                    queue="main",
                    partition=0,
                    offset=off,
                    event=LogEvent.ENQUEUED,
                    record=rec,
                    event_ms=NOW,
                ),
            )
        )
    batch.meta["next_log_offset"] = start + n
    store.commit(batch)


def offsets(store: PartitionStore) -> list[int]:
    return [off for off, _ in store.read_log(0, 10**9)]


@pytest.fixture
def store(tmp_path):
    s = PartitionStore(str(tmp_path / "partition-00"), map_size=64 << 20)
    yield s
    s.close()


def test_reader_files_are_atomic_json(tmp_path):
    part = str(tmp_path / "p")
    os.makedirs(part)
    assert registered_readers(part) == {}
    register_reader(part, "report-abc", 12, NOW)
    register_reader(part, "report-abc", 15, NOW + 1)
    register_reader(part, "export-def", 7, NOW)
    with open(os.path.join(part, "readers", "report-abc.json")) as f:
        assert json.load(f) == {"offset": 15, "updated_ms": NOW + 1}
    assert registered_readers(part) == {"report-abc": 15, "export-def": 7}
    assert not [n for n in os.listdir(os.path.join(part, "readers")) if n.startswith(".")]
    with open(os.path.join(part, "readers", "broken.json"), "w") as f:
        f.write("{not json")
    assert registered_readers(part)["broken"] == 0  # holds the log rather than freeing it
    with pytest.raises(ValueError):
        register_reader(part, "../escape", 1, NOW)
    assert reader_name("report", "/a/b") == reader_name("report", "/a/b/")
    assert reader_name("report", "/a/b").startswith("report-")
    assert reader_name("report", "/a/b") != reader_name("report", "/a/c")


def test_plan_trim():
    assert plan_trim(0, 100, {}, 0) is None  # no readers, no cap: keep everything
    assert plan_trim(0, 100, {"r": 40, "s": 60}, 0).below == 40  # the slowest reader
    assert plan_trim(40, 100, {"r": 40}, 0) is None
    assert plan_trim(0, 100, {"r": 500}, 0).below == 100  # never past the end
    p = plan_trim(0, 100, {}, 30)
    assert (p.below, p.overrun) == (70, {})
    p = plan_trim(0, 100, {"r": 80, "s": 50}, 30)
    assert p.below == 70 and p.overrun == {"s": 50}
    assert plan_trim(70, 100, {"s": 50}, 30) is None


def test_trim_log_below_and_bounded(store):
    fill(store, 120)
    assert store.log_bounds() == (0, 120)
    assert store.trim_log(50) == 50
    assert offsets(store) == list(range(50, 120))
    assert store.log_bounds() == (50, 120)
    assert store.trim_log(90, limit=15) == 15  # bounded per call: one transaction each
    assert store.log_bounds() == (65, 120)
    assert store.trim_log(90, limit=15) == 15
    assert store.trim_log(90, limit=15) == 10
    assert store.log_bounds() == (90, 120)
    assert store.trim_log(10) == 0
    assert store.trim_log(500) == 30  # everything
    assert store.log_bounds() == (120, 120)
    fill(store, 5, start=120)  # appends carry on at the dense offset
    assert offsets(store) == list(range(120, 125))
    assert store.load().meta["log_trimmed_below"] == 120


def _server_pass(tmp_path, store, cap, caplog=None):
    broker = PartitionBroker(
        store, namespace="ns", entity="q", partition_id=0, partitioned=False, queues={},
        mark_dirty=lambda b: None,
    )  # fmt: skip
    trim_logs([broker], cap)


def test_server_pass_trims_below_the_slowest_reader(tmp_path, store):
    fill(store, 100)
    _server_pass(tmp_path, store, 0)
    assert store.log_bounds() == (0, 100)  # nobody registered, no cap: nothing trimmed
    register_reader(store.path, "report-a", 60, NOW)
    register_reader(store.path, "export-b", 35, NOW)
    _server_pass(tmp_path, store, 0)
    assert store.log_bounds() == (35, 100)
    register_reader(store.path, "export-b", 80, NOW)
    _server_pass(tmp_path, store, 0)
    assert store.log_bounds() == (60, 100)


def test_size_cap_without_readers(tmp_path, store):
    fill(store, 100)
    _server_pass(tmp_path, store, 25)
    assert store.log_bounds() == (75, 100)
    assert store.read_log(0, 1)[0][0] == 75
    assert store._env.begin().get((74).to_bytes(8, "big"), db=store._log) is None


def test_size_cap_passing_a_reader_warns(tmp_path, store, caplog):
    fill(store, 100)
    register_reader(store.path, "report-slow", 10, NOW)
    register_reader(store.path, "report-fast", 95, NOW)
    with caplog.at_level(logging.WARNING, logger="sbemu.server"):
        _server_pass(tmp_path, store, 20)
    assert store.log_bounds() == (80, 100)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "report-slow" in warnings[0] and "report-fast" not in warnings[0]
    caplog.clear()
    fill(store, 10, start=100)
    with caplog.at_level(logging.WARNING, logger="sbemu.server"):
        _server_pass(tmp_path, store, 20)
    assert store.log_bounds() == (90, 110)
    assert not caplog.records  # warned once, when it was passed
