"""End-to-end: real partition logs (broker + store, fake clock) -> the Spark job -> exact tables."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from spark_traffic import (
    MINUTE,
    NS,
    T0,
    A,
    B,
    T,
    all_records,
    bulk_logs,
    reference_tables,
    spark_tables,
    traffic_run1,
    traffic_run2,
    ts,
)

from sbemu.logs import reader as logreader
from sbemu.logs.events import EVENT_COLUMNS


def table(spark, out, name):
    from sparkjobs.report import read_table

    return read_table(spark, out, name)


def run_job(spark, data_dir, out, **kw):
    from sparkjobs import report

    return report.run(spark, source="lmdb", path=data_dir, out=out, **kw)


def events_of(spark, out):
    from sparkjobs.report import read_events

    return read_events(spark, out)


def assert_exactly_once(spark, out, data_dir):
    """`events` holds every log record exactly once, and the tables match the reference."""
    records = all_records(data_dir)
    ev = events_of(spark, out)
    keys = [
        (r.namespace, r.entity, r.partition, r.offset)
        for r in ev.select("namespace", "entity", "partition", "offset").collect()
    ]
    assert len(keys) == len(set(keys)) == len(records)
    assert set(keys) == {(r["ns"], r["entity"], r["partition"], r["offset"]) for r in records}
    assert spark_tables(spark, out) == reference_tables(records, logreader.read_layout(data_dir))


def test_report_exact_counts_then_only_new_events(spark, tmp_path):
    data, out = str(tmp_path / "data"), str(tmp_path / "reports")
    traffic_run1(data)
    first = run_job(spark, data, out)
    assert first.new_events == first.total_events == 51

    counts = {
        (r.entity, r.partition, r.minute): tuple(r)[4:]
        for r in table(spark, out, "traffic_by_minute").collect()
    }
    assert counts == {
        # sent (as /metrics counts them), scheduled, then the sub-queue events
        (A, 0, ts(T0)): (6, 0, 6, 6, 4, 1, 1, 0),
        (A, 0, ts(T0 + MINUTE)): (0, 0, 0, 3, 0, 1, 1, 0),  # a4 again, then a4+a5 from the DLQ
        (B, 1, ts(T0)): (5, 0, 5, 5, 5, 0, 0, 0),
        (B, 2, ts(T0)): (2, 0, 2, 1, 1, 0, 0, 0),
        (B, 2, ts(T0 + MINUTE)): (0, 0, 0, 0, 0, 0, 0, 1),
        (T, 0, ts(T0)): (2, 0, 4, 2, 2, 0, 0, 0),  # 2 sent, enqueued once per subscription
    }
    assert {r.namespace for r in table(spark, out, "traffic_by_minute").collect()} == {NS}
    assert {tuple(r) for r in table(spark, out, "deadletter_reasons").collect()} == {
        (NS, A, "poison", 1),
        (NS, A, "MaxDeliveryCountExceeded", 1),
    }
    assert {tuple(r)[1:] for r in table(spark, out, "latency").collect()} == {
        (A, 0, 4, 2500.0, 4700.0, 4940.0, 5000),
        (B, 1, 5, 12000.0, 13800.0, 13960.0, 14000),
        (B, 2, 1, 15000.0, 15000.0, 15000.0, 15000),
        (T, 0, 2, 1000.0, 1000.0, 1000.0, 1000),
    }
    skew = {r.entity: r for r in table(spark, out, "partition_skew").collect()}
    assert skew[B].partitions == 4 and skew[B].messages_per_partition == [0, 5, 2, 0]
    assert (skew[B].messages, skew[B].min_per_partition, skew[B].max_per_partition) == (7, 0, 5)
    assert skew[B].mean_per_partition == 1.75
    assert skew[B].max_over_mean == pytest.approx(5 / 1.75)
    assert skew[A].messages_per_partition == [6] and skew[A].max_over_mean == 1.0
    assert skew[T].messages_per_partition == [2]  # 2 messages, 4 subscription copies
    assert {tuple(r)[1:] for r in table(spark, out, "sessions").collect()} == {
        (A, "s-1", 3, ts(T0), ts(T0 + 3000)),
        (A, "s-2", 1, ts(T0), ts(T0 + 5000)),
    }
    assert_exactly_once(spark, out, data)
    assert {r["entity"]: r["completed"] for r in first.summary} == {A: 4, B: 6, T: 2}

    # Nothing new: nothing counted twice.
    again = run_job(spark, data, out)
    assert (again.new_events, again.total_events) == (0, 51)

    traffic_run2(data)
    second = run_job(spark, data, out)
    assert (second.new_events, second.total_events) == (8, 59)
    counts = {
        (r.entity, r.partition, r.minute): tuple(r)[4:]
        for r in table(spark, out, "traffic_by_minute").collect()
    }
    assert counts[(A, 0, ts(T0))] == (6, 0, 6, 6, 4, 1, 1, 0)  # unchanged
    # a6, a7 and the scheduled a8 sent; a6 and a7 enqueued, delivered and completed
    assert counts[(A, 0, ts(T0 + 2 * MINUTE))] == (3, 1, 2, 2, 2, 0, 0, 0)
    assert (A, 0, ts(T0 + 3 * MINUTE)) not in counts  # `activated` is not a traffic column
    lat = {(r.entity, r.partition): tuple(r)[3:] for r in table(spark, out, "latency").collect()}
    assert lat[(A, 0)] == (6, 2000.0, 4500.0, 4900.0, 5000)
    skew = {r.entity: r for r in table(spark, out, "partition_skew").collect()}
    assert skew[A].messages_per_partition == [9]  # 6 + 2 + 1 scheduled
    sessions = {r.session_id: tuple(r)[3:] for r in table(spark, out, "sessions").collect()}
    assert sessions["s-1"] == (4, ts(T0), ts(T0 + 2 * MINUTE + 1000))
    assert_exactly_once(spark, out, data)


def test_batch_reader_and_rate_limited_stream(spark, tmp_path):
    """format("sbemu") as a batch source; maxRecordsPerBatch caps every micro-batch."""
    data, out = str(tmp_path / "data"), str(tmp_path / "reports")
    total = bulk_logs(data, NS, "bulk", partitions=3, per_partition=400)
    batch = spark.read.format("sbemu").option("path", data).load()
    assert batch.count() == total == 1200
    assert [f.name for f in batch.schema.fields] == list(EVENT_COLUMNS)
    row = batch.where("partition = 1 AND offset = 0").collect()[0]
    assert (row.namespace, row.entity, row.event, row.sequence_number) == (
        NS,
        "bulk",
        "enqueued",
        (1 << 48) | 1,
    )
    assert row.key == row.session_id == "s1" and row.timestamp == ts(T0 + 250)

    sizes = []
    result = run_job(
        spark,
        data,
        out,
        max_records_per_batch=250,
        on_batch=lambda batch_id, rows: sizes.append(rows),
    )
    assert result.batches == 5 and sizes == [250, 250, 250, 250, 200]
    assert_exactly_once(spark, out, data)


def test_killed_run_restarts_without_double_counting(spark, tmp_path):
    """SIGKILL `sbemu report` mid-stream (JVM and all), restart: every event counted once."""
    data, out = str(tmp_path / "data"), str(tmp_path / "reports")
    total = bulk_logs(data, NS, "bulk", partitions=3, per_partition=1000)
    cmd = [
        sys.executable,
        "-m",
        "sbemu",
        "report",
        "--data-dir",
        data,
        "--out",
        out,
        "--max-records-per-batch",
        "200",
        "--master",
        "local[2]",
    ]
    log = open(tmp_path / "report.log", "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    commits = os.path.join(out, "_checkpoints", "events", "commits")
    deadline = time.monotonic() + 120
    try:
        while not os.path.exists(os.path.join(commits, "2")):
            assert proc.poll() is None, (tmp_path / "report.log").read_text()
            assert time.monotonic() < deadline, "the job never committed batch 2"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # our own process group: the JVM dies too
        proc.wait()
        log.close()
    done_before = len([n for n in os.listdir(commits) if n.isdigit()])
    assert 0 < done_before < total // 200

    sizes = []
    result = run_job(
        spark,
        data,
        out,
        max_records_per_batch=200,
        on_batch=lambda batch_id, rows: sizes.append(rows),
    )
    assert result.total_events == total
    assert max(sizes) <= 200 and sum(sizes) == result.new_events
    assert_exactly_once(spark, out, data)


def test_out_directory_keeps_one_source(spark, tmp_path):
    from sparkjobs import report

    data, out = str(tmp_path / "data"), str(tmp_path / "reports")
    bulk_logs(data, NS, "bulk", partitions=1, per_partition=10)
    run_job(spark, data, out)
    with pytest.raises(report.ReportError, match="another --out"):
        report.run(spark, source="segments", path=str(tmp_path), out=out)
