"""The job behind ``sbemu report``: partition logs -> Parquet reporting tables.

Layout of OUT:
    events/                  raw events (Parquet), written by a streaming file sink
    traffic_by_minute/, deadletter_reasons/, latency/, partition_skew/, sessions/
                             aggregate tables (Parquet), rebuilt in batch from events/
    _checkpoints/events/     the streaming checkpoint (offsets, commits, file-sink log)
    _checkpoints/source.json which source this OUT was built from (never mixed)

Exactly once: the stream writes `events` through Spark's file sink with a checkpoint. A
batch's files count only once the sink's log (events/_spark_metadata) lists them, and a
restarted query re-runs an unfinished batch with the same offsets, so a killed and restarted
job never double counts; readers must read `events` through Spark (which honours that log),
not by globbing the Parquet files. The aggregate tables are then recomputed from all of
`events` after each run (and after each batch with --follow) and swapped in by rename.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from sbemu import reporting
from sbemu.partitions import retention
from sparkjobs.source import EVENTS_SCHEMA, segments_stream
from sparkjobs.tables import build_tables, layout_frame, summary

SOURCES = ("lmdb", "segments")


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
    tables_seconds: float = 0.0  # the final rebuild of the aggregate tables


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


def events_stream(
    spark: SparkSession,
    source: str,
    path: str,
    *,
    max_records_per_batch: int | None = None,
    max_files_per_batch: int | None = None,
    reader_name: str | None = None,
) -> DataFrame:
    """The event stream of a data directory (LMDB logs) or of an export directory (segments).

    `reader_name` (LMDB): register committed offsets under it, so retention keeps what this
    stream has not read yet (sbemu.partitions.retention).
    """
    if source == "lmdb":
        reader = spark.readStream.format("sbemu").option("path", path)
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
    want = {"source": source, "path": os.path.abspath(path)}
    try:
        with open(paths.marker) as f:
            have = json.load(f)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(paths.marker), exist_ok=True)
        tmp = paths.marker + ".tmp"
        with open(tmp, "w") as f:
            json.dump(want, f)
        os.replace(tmp, paths.marker)
        return
    if have != want:
        raise ReportError(
            f"{paths.root} holds tables built from {have.get('source')}:{have.get('path')}, "
            f"not {source}:{want['path']}; use another --out (or delete it to start over)"
        )


def read_events(spark: SparkSession, out: str) -> DataFrame:
    """The committed rows of OUT/events (through the file-sink log: no partial batches)."""
    paths = OutPaths(out)
    if not os.path.isdir(os.path.join(paths.events, "_spark_metadata")):
        return spark.createDataFrame([], EVENTS_SCHEMA)
    return spark.read.schema(EVENTS_SCHEMA).parquet(paths.events)


def _replace_dir(staged: str, target: str) -> None:
    """Swap a freshly written table directory in place of the old one."""
    trash = None
    if os.path.exists(target):
        trash = f"{os.path.dirname(target)}/_staging/.old-{os.path.basename(target)}-{uuid.uuid4().hex}"
        os.replace(target, trash)
    os.replace(staged, target)
    if trash:
        shutil.rmtree(trash, ignore_errors=True)


def rebuild_tables(
    spark: SparkSession, out: str, layout_root: str | None = None
) -> tuple[int, list[dict[str, Any]]]:
    """Recompute every aggregate table from OUT/events; returns (event count, summary rows)."""
    paths = OutPaths(out)
    events = read_events(spark, out)  # Parquet: each table reads only the columns it needs
    layout = None
    if layout_root:
        items = reporting.read_layout(layout_root)
        if items:
            layout = layout_frame(spark, items)
    staging = os.path.join(out, "_staging")
    os.makedirs(staging, exist_ok=True)
    written = {}
    for name, df in build_tables(events, layout).items():
        staged = os.path.join(staging, f"{name}-{uuid.uuid4().hex}")
        df.coalesce(1).write.mode("error").parquet(staged)
        _replace_dir(staged, paths.table(name))
        written[name] = spark.read.parquet(paths.table(name))
    total = events.count()
    rows = [r.asDict() for r in summary(written).collect()]
    return total, rows


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
    """Stream new events into OUT/events (exactly once), then rebuild the tables.

    Without `follow`: Trigger.AvailableNow, i.e. everything committed when the run starts
    (in several batches with a per-batch cap), then stop. With `follow`: a processing-time
    trigger every `interval_seconds`, rebuilding the tables after batches that brought
    events, until `should_stop()` or Ctrl-C. Stopping early is safe in both modes: the
    checkpoint holds what was committed, and the next run carries on from there.
    """
    out = os.path.abspath(out)
    path = os.path.abspath(path)
    paths = OutPaths(out)
    os.makedirs(out, exist_ok=True)
    _check_marker(paths, source, path)
    stream = events_stream(
        spark,
        source,
        path,
        max_records_per_batch=max_records_per_batch,
        max_files_per_batch=max_files_per_batch,
        reader_name=retention.reader_name("report", out),
    )
    writer = (
        stream.writeStream.format("parquet")
        .outputMode("append")
        .option("path", paths.events)
        .option("checkpointLocation", paths.checkpoint)
        .queryName(f"sbemu_events_{uuid.uuid4().hex[:8]}")
    )
    if follow:
        writer = writer.trigger(processingTime=f"{max(0.1, interval_seconds)} seconds")
    else:
        writer = writer.trigger(availableNow=True)
    result = RunResult()
    seen: set[int] = set()
    dirty = False

    def drain_progress() -> bool:
        """Account for finished batches; True if any brought rows."""
        brought = False
        for p in query.recentProgress:
            batch_id = int(p.batchId)
            if batch_id in seen:
                continue
            seen.add(batch_id)
            rows = int(p.numInputRows or 0)
            if rows == 0 and follow:
                continue
            result.batches += 1
            result.new_events += rows
            brought = brought or rows > 0
            rate = p.processedRowsPerSecond or 0.0
            log(f"batch {batch_id}: {rows} event(s) ({rate:,.0f}/s)")
            on_batch(batch_id, rows)
        return brought

    log(f"streaming {source} {path} -> {paths.events}")
    t_stream = time.monotonic()
    query = writer.start()
    try:
        while query.isActive:
            query.awaitTermination(1)
            if drain_progress():
                dirty = True
            if follow and dirty:
                total, rows = rebuild_tables(spark, out, path)
                log(f"tables rebuilt: {total} event(s)")
                on_tables(total, rows)
                dirty = False
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
    result.total_events, result.summary = rebuild_tables(spark, out, path)
    result.tables_seconds = time.monotonic() - t0
    log(f"tables rebuilt in {result.tables_seconds:.1f}s")
    return result


# ================================================================================================
# Console summary
# ================================================================================================

_COLUMNS = (
    ("namespace", "namespace", "s"),
    ("entity", "entity", "s"),
    ("enqueued", "enq", "d"),
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
