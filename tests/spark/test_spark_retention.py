"""Retention seen from the readers: registration, logs not starting at 0, loud failures."""

from __future__ import annotations

import os

import pytest
from spark_traffic import NS, bulk_logs, entity_dir

from builders import message_record
from sbemu.logs import reader as logreader
from sbemu.logs.export import export_logs
from sbemu.logs.retention import reader_name, registered_readers, trim_logs
from sbemu.logs.segments import SEGMENT_RE
from sbemu.partitions.broker import PartitionBroker
from sbemu.partitions.store import PartitionStore


def partition_dir(data: str, pid: int = 0) -> str:
    return os.path.join(entity_dir(data, NS, "q"), f"partition-{pid:02d}")


def trim(data: str, cap: int, partitions: int = 1) -> None:
    """One server retention pass over the entity's partitions (what _on_timer runs)."""
    logreader.close_all()
    stores = [PartitionStore(partition_dir(data, p), map_size=1 << 30) for p in range(partitions)]
    try:
        brokers = [
            PartitionBroker(
                s,
                namespace=NS,
                entity="q",
                partition_id=i,
                partitioned=partitions > 1,
                queues={},
                mark_dirty=lambda b: None,
            )  # fmt: skip
            for i, s in enumerate(stores)
        ]
        trim_logs(brokers, cap)
    finally:
        for s in stores:
            s.close()


def exported_offsets(to: str) -> list[int]:
    out = []
    for _dirpath, _dirs, files in os.walk(to):
        for name in files:
            m = SEGMENT_RE.match(name)
            if m:
                out.extend(range(int(m.group(1)), int(m.group(2)) + 1))
    return sorted(out)


def test_exporter_registers_and_fails_loudly_when_passed(tmp_path):
    data, to = str(tmp_path / "data"), str(tmp_path / "seg")
    bulk_logs(data, NS, "q", partitions=1, per_partition=100)
    export_logs(data, to, segment_records=40)
    name = reader_name("export", to)
    assert registered_readers(partition_dir(data)) == {name: 100}
    trim(data, 0)  # below the exporter: everything it has
    path = partition_dir(data)
    assert logreader.log_start(path) == 100 and logreader.log_end(path) == 100
    bulk_more(data, 100, 150)
    # a new export directory starts where the log starts now; the old one carries on
    to2 = str(tmp_path / "seg2")
    export_logs(data, to2, segment_records=40)
    assert exported_offsets(to2) == list(range(100, 150))
    assert registered_readers(path) == {name: 100, reader_name("export", to2): 150}
    trim(data, 10)  # the cap passes the first exporter (at 100)
    assert logreader.log_start(path) == 140
    with pytest.raises(logreader.LogTrimmed, match="trimmed"):
        export_logs(data, to, segment_records=40)
    assert exported_offsets(to) == list(range(100))  # nothing skipped silently
    logreader.close_all()


def bulk_more(data: str, start: int, end: int) -> None:
    """Append log records start..end-1 to partition 0 (same shape as bulk_logs)."""
    from sbemu.partitions.records import LogEvent, encode_log
    from sbemu.partitions.writebatch import WriteBatch

    logreader.close_all()
    store = PartitionStore(partition_dir(data), map_size=1 << 30)
    rec = message_record(
        sequence_number=10**6, enqueued_time_ms=1_700_000_000_000, message_id="x", tail=b"", size=5
    )
    batch = WriteBatch()
    for off in range(start, end):
        batch.log.append(
            (
                off,
                encode_log(
                    namespace=NS,
                    entity="q",
                    queue="main",
                    partition=0,
                    offset=off,
                    event=LogEvent.ENQUEUED,
                    record=rec,
                    event_ms=1_700_000_000_000,
                ),
            )
        )
    batch.meta["next_log_offset"] = end
    store.commit(batch)
    store.close()


def test_iter_log_refuses_a_trimmed_range(tmp_path):
    data = str(tmp_path / "data")
    bulk_logs(data, NS, "q", partitions=1, per_partition=50)
    trim(data, 20)
    path = partition_dir(data)
    assert logreader.log_start(path) == 30
    assert sum(len(c) for c in logreader.iter_log(path, 30, 50)) == 20
    with pytest.raises(logreader.LogTrimmed):
        list(logreader.iter_log(path, 29, 50))
    logreader.close_all()


def run_job(spark, data, out):
    from sparkjobs import report

    return report.run(spark, source="lmdb", path=data, out=out)


def test_spark_source_registers_and_reads_a_trimmed_log(spark, tmp_path):
    data, out = str(tmp_path / "data"), str(tmp_path / "reports")
    bulk_logs(data, NS, "q", partitions=2, per_partition=60)
    trim(data, 25, partitions=2)  # nobody registered: the cap alone; logs start at 35
    run_job(spark, data, out)
    from sparkjobs.report import read_events

    got = sorted((r.partition, r.offset) for r in read_events(spark, out).collect())
    assert got == [(p, o) for p in (0, 1) for o in range(35, 60)]
    # the batch source reads from where each log starts, too
    batch = spark.read.format("sbemu").option("path", data).load()
    assert batch.count() == 50
    name = reader_name("report", out)
    bulk_more(data, 60, 80)
    run_job(spark, data, out)  # its commit() registers what the previous batch consumed
    readers = registered_readers(partition_dir(data, 0))
    assert name in readers and readers[name] >= 60
    assert registered_readers(partition_dir(data, 1))[name] == 60
    trim(data, 0, partitions=2)  # below the report: never past what it committed
    assert logreader.log_start(partition_dir(data, 0)) == readers[name]
    run_job(spark, data, out)
    got = sorted((r.partition, r.offset) for r in read_events(spark, out).collect())
    assert got == [(0, o) for o in range(35, 80)] + [(1, o) for o in range(35, 60)]


def test_spark_source_fails_when_the_cap_passed_it(spark, tmp_path):
    data, out = str(tmp_path / "data"), str(tmp_path / "reports")
    bulk_logs(data, NS, "q", partitions=1, per_partition=40)
    run_job(spark, data, out)
    bulk_more(data, 40, 100)
    trim(data, 10)  # the report still needs 40..: the cap passes it
    with pytest.raises(Exception, match="trimmed"):
        run_job(spark, data, out)
    logreader.close_all()
