"""The job behind ``sbemu report``: partition logs -> Parquet reporting tables, incrementally.

Layout of OUT:
    events/<ns>/<entity>/partition-NN/<first>-<last>.parquet
                             raw events (Parquet), one file per log range a task read
                             (LMDB source); events/batch-<id>/ per micro-batch (segments)
    traffic_by_minute/, deadletter_reasons/, latency/, partition_skew/, sessions/
                             aggregate tables (Parquet), partitioned by namespace/entity(/date);
                             see sbemu.reports.tables
    _state/                  what the tables are derived from (latency histograms, messages
                             per partition, totals)
    _checkpoints/events/     the streaming checkpoint (offsets, commits)
    _checkpoints/source.json which source this OUT was built from (never mixed)

Each micro-batch (``foreachBatch``) has its events written (LMDB source: by the tasks that
decode them, with pyarrow, format ``sbemu_event_files``, so they never cross the JVM;
segments: by Spark), reduces only them (its own Parquet files, in the driver, with Arrow) to
small deltas, and merges those into the files they touch (sbemu.reports.tables), so a batch
costs what its events cost, whatever the history. All events count, however late they arrive
(there is no watermark: a late event's minute file is simply rewritten).

Exactly once across kill -9: Spark logs a batch's offsets before running it and re-runs an
unfinished batch with the same id and the same offsets. The batch's events files (named by
their log range) or directory appear by rename once complete (a re-run finds them and keeps
them), and every table file records the last batch merged into it, so a re-run merges each
delta at most once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sbemu.atomicfile import atomic_write
from sbemu.logs import reader as logreader
from sbemu.logs import retention
from sbemu.logs.events import event_arrow_schema
from sbemu.reports.tables import COLUMNS, DELTA_COLUMNS, TableStore, batch_deltas, summary_rows
from sparkjobs.source import EVENTS_SCHEMA, segments_stream

SOURCES = ("lmdb", "segments")
OUT_FORMAT = 3  # 1: events through the file sink, tables recomputed from all events;
# 2: traffic_by_minute without `sent` and `scheduled`


class ReportError(Exception):
    """The job cannot run or failed (one line for the console)."""


@dataclass
class RunResult:
    """What one run did."""

    batches: int = 0
    new_events: int = 0
    total_events: int = 0
    summary: list[dict[str, Any]] = field(default_factory=list)
    stream_seconds: float = 0.0  # from query start to its end (all batches)
    tables_seconds: float = 0.0  # the final summary
    batch_seconds: list[float] = field(default_factory=list)  # foreachBatch time per batch


@dataclass(frozen=True)
class OutPaths:
    root: str

    @property
    def events(self) -> str:
        return os.path.join(self.root, "events")

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.root, "_checkpoints", "events")

    @property
    def marker(self) -> str:
        return os.path.join(self.root, "_checkpoints", "source.json")

    def table(self, name: str) -> str:
        return os.path.join(self.root, name)

    def batch_events(self, batch_id: int) -> str:
        return os.path.join(self.events, f"batch-{batch_id:012d}")


def events_stream(
    spark: SparkSession,
    source: str,
    path: str,
    *,
    max_records_per_batch: int | None = None,
    max_files_per_batch: int | None = None,
    reader_name: str | None = None,
    events_dir: str | None = None,
) -> DataFrame:
    """The event stream of a data directory (LMDB logs) or of an export directory (segments).

    `reader_name` (LMDB): register committed offsets under it, so retention keeps what this
    stream has not read yet (sbemu.logs.retention). `events_dir` (LMDB): the tasks
    write the events into Parquet files there themselves and the stream's rows name those
    files (format ``sbemu_event_files``, EVENT_FILES_SCHEMA) instead of carrying the events.
    """
    if source == "lmdb":
        fmt = "sbemu_event_files" if events_dir else "sbemu"
        reader = spark.readStream.format(fmt).option("path", path)
        if events_dir:
            reader = reader.option("eventsDir", events_dir)
        if reader_name:
            reader = reader.option("readerName", reader_name)
        if max_records_per_batch:
            reader = reader.option("maxRecordsPerBatch", str(max_records_per_batch))
        return reader.load()
    if source == "segments":
        return segments_stream(spark, path, max_files_per_batch=max_files_per_batch)
    raise ReportError(f"unknown source {source!r}; use one of {', '.join(SOURCES)}")


def _check_marker(paths: OutPaths, source: str, path: str) -> None:
    """One OUT directory, one source: mixing them would double count."""
    want = {"source": source, "path": os.path.abspath(path), "format": OUT_FORMAT}
    try:
        with open(paths.marker) as f:
            have = json.load(f)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(paths.marker), exist_ok=True)
        atomic_write(paths.marker, json.dumps(want).encode())
        return
    if have.get("format", 1) != OUT_FORMAT:
        raise ReportError(
            f"{paths.root} was written by an older sbemu (its tables have other columns); "
            "use another --out (or delete it to start over)"
        )
    if have != want:
        raise ReportError(
            f"{paths.root} holds tables built from {have.get('source')}:{have.get('path')}, "
            f"not {source}:{want['path']}; use another --out (or delete it to start over)"
        )


def read_events(spark: SparkSession, out: str) -> DataFrame:
    """The committed rows of OUT/events: every file that appeared by rename (hidden temp
    files and staging directories are skipped), at any depth: ``events/<ns>/<entity>/
    partition-NN/<first>-<last>.parquet`` (LMDB source) or ``events/batch-<id>/``
    (segments)."""
    paths = OutPaths(out)
    if not any(
        f.endswith(".parquet") and not f.startswith((".", "_"))
        for d, _s, files in os.walk(paths.events)
        if "/." not in d[len(paths.events) :]
        for f in files
    ):
        return spark.createDataFrame([], EVENTS_SCHEMA)
    return (
        spark.read.schema(EVENTS_SCHEMA).option("recursiveFileLookup", "true").parquet(paths.events)
    )


_SPARK_TYPES = {
    "string": StringType(),
    "int32": IntegerType(),
    "int64": LongType(),
    "double": DoubleType(),
    "timestamp": TimestampType(),
    "list<int64>": ArrayType(LongType()),
}


def table_schema(name: str) -> StructType:
    """The Spark schema of a reporting table (sbemu.reports.tables.COLUMNS)."""
    return StructType([StructField(c, _SPARK_TYPES[k]) for c, k in COLUMNS[name]])


def read_table(spark: SparkSession, out: str, name: str) -> DataFrame:
    """One aggregate table of OUT as a DataFrame (files under OUT/<name>, any depth; empty
    until an event gave it a row)."""
    path = os.path.join(out, name)
    schema = table_schema(name)
    if not any(files for _d, _s, files in os.walk(path)):
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("recursiveFileLookup", "true").parquet(path)


def _layout(path: str) -> dict[tuple[str, str], int]:
    return {
        (d["ns_key"], d["entity_key"]): int(d["partition_count"])
        for d in logreader.read_layout(path)
    }


def process_batch(
    spark: SparkSession,
    df: DataFrame,
    batch_id: int,
    out: str,
    layout_root: str,
    phases: dict[str, float] | None = None,
) -> int:
    """One micro-batch: write its events (once), merge its deltas (once); returns its events.

    `phases` receives the seconds spent writing events, aggregating and merging."""
    phases = phases if phases is not None else {}
    t0 = time.monotonic()
    paths = OutPaths(out)
    if "file" in df.columns:  # sbemu_event_files: the tasks wrote the events themselves
        files = sorted(str(r["file"]) for r in df.collect() if r["events"])
        if files:
            events = pq.read_table(files, columns=list(DELTA_COLUMNS))
        else:
            events = event_arrow_schema().empty_table().select(list(DELTA_COLUMNS))
        t1 = time.monotonic()
    else:
        final = paths.batch_events(batch_id)
        if not os.path.isdir(final):  # a re-run of a batch whose events are in place keeps them
            staged = os.path.join(paths.events, f".staging-{batch_id}-{uuid.uuid4().hex}")
            df.write.mode("error").parquet(staged)
            os.replace(staged, final)
        t1 = time.monotonic()
        # The batch's events are small (maxRecordsPerBatch): the driver reduces them to deltas
        # with Arrow (C++, columns it needs only) faster than a Spark job could be scheduled.
        events = pq.read_table(final, columns=list(DELTA_COLUMNS))
    store = TableStore(out)
    deltas = batch_deltas(events, store.partition_state(batch_id))
    n = sum(r["events"] for r in deltas["partitions"])
    t2 = time.monotonic()
    store.apply(
        batch_id,
        events=n,
        traffic=deltas["traffic"],
        reasons=deltas["reasons"],
        latency=deltas["latency"],
        partitions=deltas["partitions"],
        sessions=deltas["sessions"],
        layout=_layout(layout_root),
    )
    phases.update(write=t1 - t0, aggregate=t2 - t1, merge=time.monotonic() - t2)
    return n


def _clean_staging(paths: OutPaths) -> None:
    """Remove what a killed run left half-written (hidden, never read): staging directories
    and the temp files of event files."""
    for dirpath, dirs, files in os.walk(paths.events):
        for name in [d for d in dirs if d.startswith(".staging-")]:
            shutil.rmtree(os.path.join(dirpath, name), ignore_errors=True)
            dirs.remove(name)
        for name in files:
            if name.startswith(".") and name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(dirpath, name))


def run(
    spark: SparkSession,
    *,
    source: str,
    path: str,
    out: str,
    follow: bool = False,
    interval_seconds: float = 5.0,
    max_records_per_batch: int | None = None,
    max_files_per_batch: int | None = None,
    log: Callable[[str], None] = lambda line: None,
    should_stop: Callable[[], bool] = lambda: False,
    on_batch: Callable[[int, int], None] = lambda batch_id, rows: None,
    on_tables: Callable[[int, list[dict[str, Any]]], None] = lambda total, rows: None,
) -> RunResult:
    """Stream new events into OUT, merging each micro-batch into the tables (exactly once).

    Without `follow`: Trigger.AvailableNow, i.e. everything committed when the run starts
    (in several batches with a per-batch cap), then stop. With `follow`: a processing-time
    trigger every `interval_seconds`, until `should_stop()` or Ctrl-C; `on_tables` runs after
    batches that brought events. Stopping early is safe in both modes: the checkpoint holds
    what was committed, and the next run carries on from there.
    """
    out = os.path.abspath(out)
    path = os.path.abspath(path)
    paths = OutPaths(out)
    os.makedirs(paths.events, exist_ok=True)
    _check_marker(paths, source, path)
    _clean_staging(paths)
    stream = events_stream(
        spark,
        source,
        path,
        max_records_per_batch=max_records_per_batch,
        max_files_per_batch=max_files_per_batch,
        reader_name=retention.reader_name("report", out),
        events_dir=paths.events if source == "lmdb" else None,
    )
    result = RunResult()
    timings: dict[int, tuple[float, dict[str, float]]] = {}
    counts: dict[int, int] = {}  # events per batch (a row of sbemu_event_files is a file)

    def each_batch(df: DataFrame, batch_id: int) -> None:
        t0 = time.monotonic()
        phases: dict[str, float] = {}
        counts[batch_id] = process_batch(spark, df, batch_id, out, path, phases)
        timings[batch_id] = (time.monotonic() - t0, phases)

    writer = (
        stream.writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", paths.checkpoint)
        .queryName(f"sbemu_report_{uuid.uuid4().hex[:8]}")
    )
    if follow:
        writer = writer.trigger(processingTime=f"{max(0.1, interval_seconds)} seconds")
    else:
        writer = writer.trigger(availableNow=True)
    seen: set[int] = set()

    def drain_progress() -> bool:
        """Account for finished batches; True if any brought rows."""
        brought = False
        for p in query.recentProgress:
            batch_id = int(p.batchId)
            if batch_id in seen:
                continue
            seen.add(batch_id)
            rows = counts.get(batch_id, int(p.numInputRows or 0))
            if rows == 0 and follow:
                continue
            result.batches += 1
            result.new_events += rows
            brought = brought or rows > 0
            secs, phases = timings.get(batch_id, (0.0, {}))
            result.batch_seconds.append(secs)
            detail = ", ".join(f"{k} {v:.2f}s" for k, v in phases.items())
            log(f"batch {batch_id}: {rows} event(s) in {secs:.2f}s ({detail})")
            on_batch(batch_id, rows)
        return brought

    log(f"streaming {source} {path} -> {out}")
    t_stream = time.monotonic()
    query = writer.start()
    try:
        while query.isActive:
            query.awaitTermination(0.2 if follow else 1)
            if drain_progress() and follow:
                on_tables(TableStore(out).totals()["events"], summary_rows(out))
            if should_stop():
                log("stopping")
                break
    except KeyboardInterrupt:
        log("stopping")
    finally:
        if query.isActive:
            query.stop()
    drain_progress()
    result.stream_seconds = time.monotonic() - t_stream
    error = query.exception()
    if error is not None:
        raise ReportError(f"the streaming query failed: {error}")
    t0 = time.monotonic()
    result.total_events = TableStore(out).totals()["events"]
    result.summary = summary_rows(out)
    result.tables_seconds = time.monotonic() - t0
    return result


# ================================================================================================
# Console summary
# ================================================================================================

_COLUMNS = (
    ("namespace", "namespace", "s"),
    ("entity", "entity", "s"),
    ("sent", "sent", "d"),  # = /metrics' incoming messages (docs/spark.md)
    ("scheduled", "sched", "d"),
    ("enqueued", "enq", "d"),  # copies placed at send: on a topic, one per subscription
    ("delivered", "dlv", "d"),
    ("completed", "cmpl", "d"),
    ("abandoned", "abnd", "d"),
    ("deadlettered", "dlq", "d"),
    ("expired", "exp", "d"),
    ("p95_ms", "p95 ms", "f0"),  # enqueue-to-complete, worst partition
    ("partitions", "parts", "d"),
    ("max_over_mean", "max/mean", "f2"),
    ("sessions", "sessions", "d"),
)


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "d":
        return str(int(value))
    if kind.startswith("f"):
        return f"{float(value):.{int(kind[1:])}f}"
    return str(value)


def format_summary(rows: list[dict[str, Any]]) -> str:
    """A fixed-width table, one line per entity."""
    if not rows:
        return "no events yet"
    table = [[title for _k, title, _t in _COLUMNS]]
    for row in rows:
        table.append([_cell(row.get(key), kind) for key, _title, kind in _COLUMNS])
    widths = [max(len(r[i]) for r in table) for i in range(len(_COLUMNS))]
    lines = []
    for r in table:
        cells = [
            c.ljust(w) if kind == "s" else c.rjust(w)
            for c, w, (_k, _t, kind) in zip(r, widths, _COLUMNS, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
