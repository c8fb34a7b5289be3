"""Segment export (`sbemu export-logs`) and the file-source path of the same job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from spark_traffic import (
    NS,
    Entity,
    all_records,
    bulk_logs,
    message,
    spark_tables,
    traffic_run1,
    traffic_run2,
)

from sbemu.cli import main as sbemu_main
from sbemu.logs import reader as logreader
from sbemu.logs.export import export_logs
from sbemu.logs.segments import SEGMENT_VERSION
from sbemu.partitions.records import decode_log


def segment_files(root):
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".parquet"):
                out.setdefault(os.path.relpath(dirpath, root), []).append(name)
    return {k: sorted(v) for k, v in out.items()}


def read_segment(path):
    """A segment's rows as log records (decode_log form, properties as a dict, no version)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    assert table.schema.metadata[b"sbemu.segment_version"] == str(SEGMENT_VERSION).encode()
    rows = table.to_pylist()
    for r in rows:
        assert r.pop("segment_version") == SEGMENT_VERSION
        if r["properties"] is not None:
            r["properties"] = dict(r["properties"])
    return rows


def as_segment_row(record):
    """A decoded log record as the exporter writes it (no properties/body in this traffic)."""
    return {**{"properties": None, "body": None}, **record}


def test_export_writes_contiguous_immutable_segments(tmp_path):
    data, seg = str(tmp_path / "data"), str(tmp_path / "segments")
    bulk_logs(data, NS, "bulk", partitions=2, per_partition=250)
    stats = export_logs(data, seg, segment_records=100)
    assert (stats.segments, stats.records) == (6, 500)
    files = segment_files(seg)
    names = [
        "00000000000000000000-00000000000000000099.parquet",
        "00000000000000000100-00000000000000000199.parquet",
        "00000000000000000200-00000000000000000249.parquet",
    ]
    assert files == {
        "sbemulatorns/bulk/partition-00": names,
        "sbemulatorns/bulk/partition-01": names,
    }
    part = os.path.join(seg, "sbemulatorns/bulk/partition-01")
    records = [r for r in all_records(data) if r["partition"] == 1][200:]
    assert read_segment(os.path.join(part, names[2])) == [as_segment_row(r) for r in records]
    assert json.load(open(os.path.join(seg, "sbemulatorns/bulk/entity.json"))) == {
        "partition_count": 2,
        "partitioned": True,
    }
    assert logreader.read_layout(seg) == logreader.read_layout(data)

    # Nothing new: nothing written; a crash's leftover temp file is cleaned up.
    open(os.path.join(part, ".junk.parquet.tmp"), "w").write("partial")
    assert export_logs(data, seg, segment_records=100).segments == 0
    assert not [n for n in os.listdir(part) if n.endswith(".tmp")]

    # New records continue after the last exported offset.
    q = Entity(data, NS, "q")
    q.send(0, [message(f"m{i}") for i in range(3)], 1000)
    q.close()
    assert export_logs(data, seg, segment_records=100).records == 3
    assert segment_files(seg)["sbemulatorns/q/partition-00"] == [
        "00000000000000000000-00000000000000000002.parquet"
    ]
    q = Entity(data, NS, "q")
    q.send(0, [message("m3")], 2000)
    q.close()
    export_logs(data, seg, segment_records=100)
    assert segment_files(seg)["sbemulatorns/q/partition-00"][-1] == (
        "00000000000000000003-00000000000000000003.parquet"
    )
    exported = []
    for name in segment_files(seg)["sbemulatorns/q/partition-00"]:
        exported += read_segment(os.path.join(seg, "sbemulatorns/q/partition-00", name))
    assert exported == [as_segment_row(r) for r in all_records(data) if r["entity"] == "q"]


def test_export_cli_and_single_exporter(tmp_path, capsys):
    import fcntl

    data, seg = str(tmp_path / "data"), str(tmp_path / "segments")
    bulk_logs(data, NS, "bulk", partitions=1, per_partition=30)
    assert (
        sbemu_main(["export-logs", "--data-dir", data, "--to", seg, "--segment-records", "10"]) == 0
    )
    assert "exported 30 record(s) in 3 segment(s)" in capsys.readouterr().out
    with open(os.path.join(seg, ".export.lock"), "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="another export-logs"):
            export_logs(data, seg)
    assert sbemu_main(["export-logs", "--data-dir", str(tmp_path / "nope"), "--to", seg]) == 2


WRITER = """
import sys
from spark_traffic import NS, Entity, message
q = Entity(sys.argv[1], NS, "q")
print("ready", flush=True)
for i, line in enumerate(sys.stdin):
    if line.strip() == "grow":  # outgrow the readers' map: they get MapResizedError
        from sbemu.partitions.writebatch import WriteBatch
        store = q.brokers[0].store
        store._env.set_mapsize(256 << 20)
        batch = WriteBatch()
        for n in range(80):
            batch.put("junk", n, bytes(1 << 20))
        store.commit(batch)
    q.send(0, [message(f"m{i}-a"), message(f"m{i}-b")], 1000 + i)
    print("sent", flush=True)
q.close()
"""


def start_writer(data: str) -> subprocess.Popen[str]:
    """WRITER in a process of its own on the data folder ``data``."""
    here = os.path.dirname(__file__)  # spark_traffic, and beside it tests/ for its builders
    paths = [here, os.path.dirname(here), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, data],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_reading_a_log_while_another_process_writes(tmp_path, monkeypatch):
    """One cached read-only handle per path sees every new commit of a live writer, and is
    re-opened when the writer grows the map beyond it (MapResizedError)."""
    reopened = []
    real_close = logreader._close
    monkeypatch.setattr(logreader, "_close", lambda p: (reopened.append(p), real_close(p))[1])

    data = str(tmp_path / "data")
    writer = start_writer(data)
    try:
        assert writer.stdout.readline().strip() == "ready"
        path = logreader.discover_partitions(data)[0].path
        assert logreader.log_end(path) == 0
        for step, command in enumerate(["send", "send", "grow"]):
            writer.stdin.write(command + "\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "sent"
            assert logreader.log_end(path) == 2 * (step + 1)
        offsets = [
            decode_log(v)["offset"] for c in logreader.iter_log(path, 0, 6, chunk=4) for v in c
        ]
        assert offsets == list(range(6))
        assert reopened == [path]  # once, after "grow"
    finally:
        writer.stdin.close()
        writer.wait(timeout=30)
        logreader.close_all()


def run_job(spark, source, path, out):
    from sparkjobs import report

    return report.run(spark, source=source, path=path, out=out, max_files_per_batch=3)


def test_segment_path_gives_the_same_tables(spark, tmp_path):
    data, seg = str(tmp_path / "data"), str(tmp_path / "segments")
    out_lmdb, out_seg = str(tmp_path / "r-lmdb"), str(tmp_path / "r-seg")
    traffic_run1(data)
    export_logs(data, seg, segment_records=8)
    a = run_job(spark, "lmdb", data, out_lmdb)
    b = run_job(spark, "segments", seg, out_seg)
    assert a.total_events == b.total_events == 51
    assert b.batches == 3  # maxFilesPerTrigger=3 over 7 segment files
    assert spark_tables(spark, out_seg) == spark_tables(spark, out_lmdb)
    assert a.summary == b.summary

    traffic_run2(data)
    export_logs(data, seg, segment_records=8)
    a = run_job(spark, "lmdb", data, out_lmdb)
    b = run_job(spark, "segments", seg, out_seg)
    assert (a.new_events, b.new_events) == (8, 8)
    assert a.total_events == b.total_events == 59
    assert spark_tables(spark, out_seg) == spark_tables(spark, out_lmdb)

    from pyspark.sql import functions as F
    from sparkjobs.report import read_events

    def comparable(df):  # set operations refuse map columns
        return df.withColumn("properties", F.to_json(F.array_sort(F.map_entries("properties"))))

    ev_lmdb = comparable(read_events(spark, out_lmdb))
    ev_seg = comparable(read_events(spark, out_seg))
    assert ev_seg.count() == ev_lmdb.count() == 59
    assert ev_seg.exceptAll(ev_lmdb).count() == 0 and ev_lmdb.exceptAll(ev_seg).count() == 0


def test_export_follow_flushes_tails_and_never_overlaps(tmp_path):
    """--follow: partial tails are written after flush_interval; ranges stay contiguous."""
    import threading

    data, seg = str(tmp_path / "data"), str(tmp_path / "segments")
    writer = start_writer(data)
    stop = threading.Event()
    part = os.path.join(seg, "sbemulatorns", "q", "partition-00")

    def exported() -> list[int]:
        offsets = []
        for name in segment_files(seg).get("sbemulatorns/q/partition-00", []):
            offsets += [r["offset"] for r in read_segment(os.path.join(part, name))]
        return offsets

    try:
        assert writer.stdout.readline().strip() == "ready"
        job = threading.Thread(
            target=export_logs,
            args=(data, seg),
            kwargs=dict(
                segment_records=3,
                follow=True,
                poll_interval=0.05,
                flush_interval=0.3,
                should_stop=stop.is_set,
            ),
        )
        job.start()
        for expected in (2, 4, 6):
            writer.stdin.write("send\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "sent"
            deadline = time.monotonic() + 10
            while len(exported()) < expected:
                assert time.monotonic() < deadline, exported()
                time.sleep(0.05)
        assert exported() == list(range(6))  # each offset once, in order
        for name in segment_files(seg)["sbemulatorns/q/partition-00"]:
            first, last = (int(x) for x in name.removesuffix(".parquet").split("-"))
            assert last - first < 3
    finally:
        stop.set()
        writer.stdin.close()
        writer.wait(timeout=30)
    job.join(10)
    assert not job.is_alive()
