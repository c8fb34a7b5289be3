"""The ``sbemu`` data source: partition logs as a Kafka-like event stream.

    spark.readStream.format("sbemu").option("path", data_dir).load()   # streaming
    spark.read.format("sbemu").option("path", data_dir).load()         # batch, all committed

Each row is one partition-log record (EVENTS_SCHEMA). Offsets are per partition log, as JSON
``{"<ns dir>/<entity dir>/partition-NN": next offset}``, so a checkpointed query resumes
exactly where it stopped; partitions that appear later (new entities) start where their
log starts (offset 0 unless trimmed).

Options:
  path                    emulator data directory (required)
  maxRecordsPerBatch      cap on records per micro-batch, shared fairly between partitions
                          (Trigger.AvailableNow honours it too: several batches)
  maxRecordsPerPartition  split a partition's range into Spark tasks of at most N [100000]
  startingOffsets         "earliest" (default: where each log starts), "latest", or JSON
  readerName              register as this retention reader (sbemu.logs.retention):
                          each commit(end) records `end` per partition so the server does not
                          trim what this query has not read; `sbemu report` sets
                          report-<hash of --out>. Unset: nothing is registered.

A range whose records were trimmed away (the server's size cap passed this reader) is an
error (logreader.LogTrimmed), never skipped.

The LMDB environments are opened lazily, inside read() (executors) and in the planner
process, read-only with the lock file (see sbemu.logs.reader). Trigger.AvailableNow is supported
(SupportsTriggerAvailableNow): the target is the end of every log when the query starts.

`segments_stream()` / `segments_batch()` read the Parquet segments written by
``sbemu export-logs`` (sbemu.logs.segments) with Spark's file source and map them to the
same schema.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sbemu.atomicfile import atomic_write
from sbemu.logs import events as logevents
from sbemu.logs import reader as logreader
from sbemu.logs.retention import register_reader
from sbemu.logs.segments import SEGMENT_FIELDS, SEGMENT_SUFFIX, SEGMENT_VERSION

EVENTS_SCHEMA = StructType(
    [
        StructField("namespace", StringType()),
        StructField("entity", StringType()),
        StructField("queue", StringType()),  # sub-queue: main, main/$deadletterqueue, ...
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),  # when the event happened (event_ms)
        StructField("event", StringType()),
        StructField("key", StringType()),  # session id, else partition key [P6]
        StructField("sequence_number", LongType()),
        StructField("message_id", StringType()),
        StructField("session_id", StringType()),
        StructField("partition_key", StringType()),
        StructField("enqueued_time", TimestampType()),
        StructField("size", LongType()),
        StructField("delivery_count", IntegerType()),
        StructField("reason", StringType()),
        # application properties, values rendered as text (logevents.render_value)
        StructField("properties", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),  # only with serve --log-bodies (decode_body)
    ]
)
assert tuple(EVENTS_SCHEMA.fieldNames()) == logevents.EVENT_COLUMNS

# A segment file's columns (sbemu.logs.segments.SEGMENT_FIELDS): the log record's keys
# (sbemu.partitions.LOG_FIELDS), "properties" decoded to a map, "body" as payload bytes, and the
# segment format version.
_SPARK_TYPES = {
    "int32": IntegerType(),
    "int64": LongType(),
    "string": StringType(),
    "binary": BinaryType(),
    "map<string,string>": MapType(StringType(), StringType()),
}
SEGMENT_SCHEMA = StructType(
    [StructField(name, _SPARK_TYPES[kind]) for name, kind in SEGMENT_FIELDS]
)

DEFAULT_RECORDS_PER_PARTITION = 100_000
Offsets = dict[str, int]


class LogRange(InputPartition):
    """Offsets [start, end) of one partition log: one Spark task."""

    def __init__(self, key: str, path: str, start: int, end: int) -> None:
        super().__init__((key, start, end))
        self.key = key
        self.path = path
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"LogRange({self.key}, {self.start}, {self.end})"


def _positive_int(options: Any, name: str) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return None
    value = int(str(raw))
    if value < 1:
        raise ValueError(f"option {name} must be a positive integer, got {raw!r}")
    return value


class _Config:
    """The data source options, validated once."""

    def __init__(self, options: Any) -> None:
        path = options.get("path")
        if not path:
            raise ValueError('the sbemu data source needs option("path", <data directory>)')
        self.path = os.path.abspath(str(path))
        self.max_records_per_batch = _positive_int(options, "maxRecordsPerBatch")
        self.max_records_per_partition = (
            _positive_int(options, "maxRecordsPerPartition") or DEFAULT_RECORDS_PER_PARTITION
        )
        self.starting = str(options.get("startingOffsets") or "earliest").strip()
        self.reader_name = str(options.get("readerName") or "").strip() or None

    def earliest(self) -> Offsets:
        """Where every partition log starts now (above 0 once trimmed)."""
        return {
            p.key: logreader.log_start(p.path) for p in logreader.discover_partitions(self.path)
        }

    def partition_path(self, key: str) -> str:
        return os.path.join(self.path, *key.split("/"))

    def latest(self) -> Offsets:
        """The committed end of every partition log now."""
        return {p.key: logreader.log_end(p.path) for p in logreader.discover_partitions(self.path)}

    def ranges(self, start: Offsets, end: Offsets) -> list[LogRange]:
        """Tasks covering every partition's [start, end), split by maxRecordsPerPartition."""
        out: list[LogRange] = []
        step = self.max_records_per_partition
        for key in sorted(end):
            lo, hi = int(start.get(key, 0)), int(end[key])
            path = self.partition_path(key)
            while lo < hi:
                out.append(LogRange(key, path, lo, min(hi, lo + step)))
                lo += step
        return out


def read_range(path: str, start: int, end: int, schema: StructType) -> Iterator[Any]:
    """Arrow record batches of the events in one log range (runs in the executor).

    Vectorised: msgpack per record, then Arrow builds the columns in C++
    (logevents.log_to_event_table); no per-row Python beyond the msgpack call."""
    from pyspark.sql.pandas.types import to_arrow_schema

    pa_schema = to_arrow_schema(schema, timezone="UTC")
    for values in logreader.iter_log(path, start, end):
        table = logevents.log_to_event_table(values)
        if table.schema != pa_schema:
            table = table.cast(pa_schema)
        yield from table.to_batches()


def share(backlog: dict[str, int], budget: int) -> dict[str, int]:
    """Split `budget` records fairly between partitions with a backlog (water-filling).

    Small backlogs are served whole, the rest split evenly (the remainder one record each, in
    name order), so the whole budget is used when there is enough data and every partition
    with data makes progress whenever the budget allows.
    """
    alloc = {k: 0 for k in backlog}
    pending = sorted((n, k) for k, n in backlog.items() if n > 0)
    remaining = budget
    while pending and remaining > 0:
        fair, extra = divmod(remaining, len(pending))
        n, k = pending[0]
        if n <= fair:
            alloc[k] = n
            remaining -= n
            pending.pop(0)
            continue
        for i, (_n, k) in enumerate(sorted(pending, key=lambda p: p[1])):
            alloc[k] = fair + (1 if i < extra else 0)
        break
    return alloc


class SbemuStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the partition logs with per-partition offsets."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self.config = _Config(options)
        self.schema = schema
        self._target: Offsets | None = None  # Trigger.AvailableNow: do not read past this

    def initialOffset(self) -> dict:
        start = self.config.starting
        if start == "earliest":
            return self.config.earliest()
        if start == "latest":
            return self.config.latest()
        try:
            given = json.loads(start)
        except ValueError as exc:
            raise ValueError(
                f'startingOffsets must be "earliest", "latest" or a JSON object, got {start!r}'
            ) from exc
        return {str(k): int(v) for k, v in given.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.config.max_records_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.config.latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self.config.latest()
        if self._target is not None:  # AvailableNow: nothing that arrived after the start
            latest = {k: min(v, self._target[k]) for k, v in latest.items() if k in self._target}
        end: Offsets = {str(k): int(v) for k, v in start.items()}
        for key, pos in end.items():  # fail here, before planning, if the log passed us
            logreader.check_start(self.config.partition_path(key), pos)
        backlog = {}
        for key, last in latest.items():
            if key not in end:  # a partition that appeared later: from where it starts
                end[key] = logreader.log_start(self.config.partition_path(key))
            first = end[key]
            backlog[key] = max(0, last - first)
        if isinstance(limit, ReadMaxRows):
            backlog = share(backlog, limit.max_rows)
        for key, n in backlog.items():
            end[key] += n
        return end

    def reportLatestOffset(self) -> dict | None:
        return self.config.latest()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self.config.ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogRange)
        return read_range(partition.path, partition.start, partition.end, self.schema)

    def commit(self, end: dict) -> None:
        """Register `end` as this query's retention offset (with option readerName)."""
        name = self.config.reader_name
        if name is None:
            return
        now_ms = int(time.time() * 1000)
        for key, offset in end.items():
            path = self.config.partition_path(str(key))
            if os.path.isdir(path):
                register_reader(path, name, int(offset), now_ms)


class SbemuBatchReader(DataSourceReader):
    """Everything committed in the logs when the query is planned."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self.config = _Config(options)
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        ranges = self.config.ranges(self.config.earliest(), self.config.latest())
        return ranges or [LogRange("", "", 0, 0)]  # Spark wants at least one partition

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogRange)
        if partition.start >= partition.end:
            return iter(())
        return read_range(partition.path, partition.start, partition.end, self.schema)


class SbemuDataSource(DataSource):
    """``format("sbemu")``: the partition logs of an emulator data directory."""

    @classmethod
    def name(cls) -> str:
        return "sbemu"

    def schema(self) -> StructType:
        return EVENTS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return SbemuBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SbemuStreamReader(self.options, schema)


# ================================================================================================
# The report job's events, written where they are read
# ================================================================================================

# One row per log range a task read: where its events went and how many there were.
EVENT_FILES_SCHEMA = StructType(
    [
        StructField("key", StringType()),  # "<ns dir>/<entity dir>/partition-NN"
        StructField("start", LongType()),
        StructField("end", LongType()),  # exclusive
        StructField("file", StringType()),
        StructField("events", LongType()),
    ]
)
EVENT_FILE_SUFFIX = ".parquet"


def event_file_path(events_dir: str, key: str, start: int, end: int) -> str:
    """Where the events of log range [start, end) of partition `key` go:
    ``<events_dir>/<ns dir>/<entity dir>/partition-NN/<start:020>-<end - 1:020>.parquet``."""
    return os.path.join(
        events_dir, *key.split("/"), f"{start:020d}-{end - 1:020d}{EVENT_FILE_SUFFIX}"
    )


def write_event_file(events_dir: str, rng: LogRange) -> tuple[str, int]:
    """Write the events of one log range as one Parquet file (pyarrow, zstd), unless a run
    before this one already did; returns (path, events).

    The file is named by its range and appears atomically (hidden temp file, fsync, rename), so
    a batch that Spark re-runs after a crash (same offsets, same ranges) finds its files and
    keeps them: a range's events are written once."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    path = event_file_path(events_dir, rng.key, rng.start, rng.end)
    if os.path.exists(path):
        return path, int(pq.ParquetFile(path).metadata.num_rows)
    schema = to_arrow_schema(EVENTS_SCHEMA, timezone="UTC")
    tables = [
        logevents.log_to_event_table(values)
        for values in logreader.iter_log(rng.path, rng.start, rng.end)
    ]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    if table.schema != schema:
        table = table.cast(schema)
    sink = pa.BufferOutputStream()
    # no dictionary pages: most columns are near-constant or unique per event, and zstd alone
    # wrote 100k events in 40 ms into 0.54 MB instead of 65 ms into 1.43 MB
    pq.write_table(table, sink, compression="zstd", use_dictionary=False, row_group_size=1 << 20)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, [sink.getvalue().to_pybytes()])
    return path, table.num_rows


class SbemuEventFilesStreamReader(SbemuStreamReader):
    """The `sbemu` stream whose tasks write their events (EVENTS_SCHEMA) into Parquet files
    under option ``eventsDir`` themselves (pyarrow, in the executor that decoded them) and
    return one EVENT_FILES_SCHEMA row per range: the events never pass through the JVM."""

    def __init__(self, options: Any, schema: StructType) -> None:
        super().__init__(options, EVENTS_SCHEMA)
        events_dir = options.get("eventsDir")
        if not events_dir:
            raise ValueError('format("sbemu_event_files") needs option("eventsDir", <dir>)')
        self.events_dir = os.path.abspath(str(events_dir))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogRange)
        path, n = write_event_file(self.events_dir, partition)
        yield (partition.key, partition.start, partition.end, path, n)


class SbemuEventFilesSource(SbemuDataSource):
    """``format("sbemu_event_files")`` (streaming only): the report job's source. Options as
    ``sbemu``'s plus ``eventsDir``; each row names a file of events a task wrote."""

    @classmethod
    def name(cls) -> str:
        return "sbemu_event_files"

    def schema(self) -> StructType:
        return EVENT_FILES_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        raise ValueError('format("sbemu_event_files") is streaming only; read format("sbemu")')

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SbemuEventFilesStreamReader(self.options, schema)


# ================================================================================================
# Segment files (sbemu export-logs) through Spark's file source
# ================================================================================================


def segments_glob(segments_dir: str) -> str:
    """The glob of every segment file under an export directory."""
    return os.path.join(
        os.path.abspath(segments_dir), "*", "*", "partition-*", "*" + SEGMENT_SUFFIX
    )


def log_records_to_events(df: DataFrame) -> DataFrame:
    """Map segment rows (SEGMENT_SCHEMA) to EVENTS_SCHEMA, exactly as the data source does.

    Fails the query on a segment format or log record version this code does not know."""
    v, sv = F.col("v"), F.col("segment_version")
    known = (v == 1) & (sv == SEGMENT_VERSION)
    checked_ns: Column = F.when(known, F.col("ns")).otherwise(
        F.raise_error(
            F.concat(
                F.lit("unknown segment format/log record version "),
                F.coalesce(sv.cast("string"), F.lit("null")),
                F.lit("/"),
                F.coalesce(v.cast("string"), F.lit("null")),
                F.lit(f" (this reader knows {SEGMENT_VERSION}/1)"),
            )
        )
    )
    return df.select(
        checked_ns.alias("namespace"),
        F.col("entity"),
        F.col("queue"),
        F.col("partition"),
        F.col("offset"),
        F.timestamp_millis("event_ms").alias("timestamp"),
        F.col("event"),
        F.coalesce("session_id", "partition_key").alias("key"),
        F.col("seq").alias("sequence_number"),
        F.col("message_id"),
        F.col("session_id"),
        F.col("partition_key"),
        F.timestamp_millis("enqueued_ms").alias("enqueued_time"),
        F.col("size"),
        F.col("delivery_count"),
        F.col("reason"),
        F.col("properties"),
        F.col("body"),
    )


def segments_stream(
    spark: SparkSession, segments_dir: str, *, max_files_per_batch: int | None = None
) -> DataFrame:
    """The event stream of an export directory (each segment file read exactly once)."""
    reader = spark.readStream.schema(SEGMENT_SCHEMA).option(
        "maxFileAge",
        "3650d",  # segments are never too old to count
    )
    if max_files_per_batch:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_batch))
    return log_records_to_events(reader.parquet(segments_glob(segments_dir)))


def segments_batch(spark: SparkSession, segments_dir: str) -> DataFrame:
    """All events of an export directory, as a batch DataFrame."""
    df = spark.read.schema(SEGMENT_SCHEMA).parquet(segments_glob(segments_dir))
    return log_records_to_events(df)
