"""Reporting side of the partition logs: tailing, segment export, and the CLI entry points.

Pure Python (lmdb, msgpack). pyspark is imported only inside `run_report()`, through the
``sparkjobs`` package at the repository root, the only code that imports pyspark.

Where the logs live (see partitions/store.py and partitions/router.py)::

    <data_dir>/<quoted lower-case namespace>/<quoted lower-case entity>/entity.json
    <data_dir>/<ns>/<entity>/partition-NN/{data,lock}.mdb    LMDB, named database "log"
                                                            key: 8-byte big-endian offset
                                                            value: records.encode_log() (msgpack)

A log partition is named by its path relative to the data directory,
``<ns dir>/<entity dir>/partition-NN``; Spark offsets are ``{that name: next offset}``.

Reading a live store safely (the server keeps writing while we read):
- environments are opened read-only *with* the lock file (``lock=True``): a reader without
  it can see pages the writer is recycling;
- py-lmdb refuses to open one path twice in a process, so each process keeps one handle per
  path (`_ENVS`), opened lazily on first use; a handle opened before a fork() is never used in
  the child (LMDB forbids it): open only inside Spark's ``read()``, never at planning time in a
  process that forks later;
- ``MapResizedError`` (the writer grew the map) is handled by re-opening;
- read transactions are kept short (one per chunk) so the writer can reuse pages;
- stale reader slots of killed processes are cleared with ``reader_check()`` on open.

Segment export (``sbemu export-logs``) copies the logs into immutable JSON-lines files for
clusters that cannot read the LMDB files::

    <to>/<ns dir>/<entity dir>/entity.json                       copy of the layout manifest
    <to>/<ns dir>/<entity dir>/partition-NN/<first>-<last>.jsonl  offsets, 20 digits, inclusive

Each line is one log record as records.decode_log() returns it (same keys, "v": 1), except
that "properties" is already decoded into a {name: text} map and "body" is base64.
Segments are contiguous and never rewritten: a file appears under its final name only once
complete (written as a hidden ``.<name>.tmp``, fsynced, renamed), so Spark's file source,
which ignores hidden files, reads each exactly once. The exporter resumes after the highest
offset already exported; there is no other state. Full segments hold ``segment_records``
records; the tail of a log is written as a shorter segment (one-shot runs: at the end; with
``--follow``: once it has waited ``flush_interval`` seconds), so ranges are contiguous but
not necessarily aligned to multiples of ``segment_records``.

Retention (see sbemu.partitions.retention): readers register the next offset they need per
partition (``<partition dir>/readers/<name>.json``): the report's Spark source on each
committed batch (``report-<hash of --out>``), the exporter after each segment
(``export-<hash of --to>``). The server trims below the slowest registered reader, and to
``--log-retention-records`` if set, even past a reader; then the store's meta
``log_trimmed_below`` is above that reader's offset and reading raises `LogTrimmed` (never a
silent skip). A new reader (empty checkpoint, empty segment directory) starts at `log_start`.
Segments are never deleted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import unquote

from sbemu.partitions.records import decode_log
from sbemu.partitions.retention import reader_name, register_reader

__all__ = [
    "EVENT_COLUMNS",
    "LogPartition",
    "add_export_logs_parser",
    "add_report_parser",
    "cmd_export_logs",
    "cmd_report",
    "discover_partitions",
    "export_logs",
    "LogTrimmed",
    "check_start",
    "iter_log",
    "log_end",
    "log_start",
    "log_to_event_columns",
    "main",
    "read_layout",
    "run_report",
]

_U64 = struct.Struct(">Q")
LOG_DB = b"log"
META_DB = b"meta"
NEXT_OFFSET_META = b"next_log_offset"
TRIMMED_BELOW_META = b"log_trimmed_below"
MAX_READERS = 512  # the broker opens with 512; the first opener sizes the reader table
READ_CHUNK = 8192  # records per read transaction
OFFSET_DIGITS = 20
SEGMENT_SUFFIX = ".jsonl"
SEGMENT_RE = re.compile(r"^(\d{20})-(\d{20})\.jsonl$")
PARTITION_RE = re.compile(r"^partition-(\d+)$")
DEFAULT_SEGMENT_RECORDS = 10_000

# The columns of the event stream, in order (the Spark schema lives in sparkjobs/source.py).
EVENT_COLUMNS = (
    "namespace", "entity", "queue", "partition", "offset", "timestamp", "event", "key",
    "sequence_number", "message_id", "session_id", "partition_key", "enqueued_time", "size",
    "delivery_count", "reason", "properties", "body",
)


# ================================================================================================
# Discovery
# ================================================================================================


@dataclass(frozen=True, order=True)
class LogPartition:
    """One partition log: its stable name (relative path) and where its LMDB environment is."""

    key: str  # "<ns dir>/<entity dir>/partition-NN", as on disk (quoted, lower-case)
    path: str  # absolute path of the environment directory
    partition: int


def _subdirs(path: Path) -> list[os.DirEntry[str]]:
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return []
    return sorted(
        (e for e in entries if e.is_dir() and not e.name.startswith((".", "_"))),
        key=lambda e: e.name,
    )


def discover_partitions(data_dir: str | os.PathLike[str]) -> list[LogPartition]:
    """Every partition log under a data directory, sorted by name."""
    root = Path(data_dir).resolve()
    found: list[LogPartition] = []
    for ns in _subdirs(root):
        for ent in _subdirs(Path(ns.path)):
            for part in _subdirs(Path(ent.path)):
                m = PARTITION_RE.match(part.name)
                if m and os.path.exists(os.path.join(part.path, "data.mdb")):
                    found.append(
                        LogPartition(f"{ns.name}/{ent.name}/{part.name}", part.path, int(m.group(1)))
                    )
    return found


def read_layout(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The entity manifests (entity.json) under a data or segment directory.

    Each item: ``ns_key``, ``entity_key`` (lower-case, unquoted names), ``partition_count``,
    ``partitioned``. Lets partition_skew count partitions that never saw a message.
    """
    out: list[dict[str, Any]] = []
    for ns in _subdirs(Path(root)):
        for ent in _subdirs(Path(ns.path)):
            manifest = Path(ent.path) / "entity.json"
            try:
                have = json.loads(manifest.read_text())
            except (OSError, ValueError):
                continue
            out.append(
                {
                    "ns_key": unquote(ns.name),
                    "entity_key": unquote(ent.name),
                    "partition_count": int(have["partition_count"]),
                    "partitioned": bool(have.get("partitioned", False)),
                }
            )
    return out


# ================================================================================================
# Reading one partition log (read-only, next to a live writer)
# ================================================================================================

# path -> (pid that opened it, environment, log database handle, meta database handle)
_ENVS: dict[str, tuple[int, Any, Any, Any]] = {}
_ENVS_LOCK = threading.Lock()


class LogTrimmed(RuntimeError):
    """A reader's next offset was trimmed away (the retention size cap passed it)."""


class LogUnavailable(Exception):
    """A partition log cannot be read (yet): no store, or opened before a fork."""


def _open(path: str) -> tuple[Any, Any, Any]:
    import lmdb

    with _ENVS_LOCK:
        hit = _ENVS.get(path)
        if hit is not None:
            if hit[0] != os.getpid():
                raise LogUnavailable(
                    f"{path}: LMDB environment was opened before a fork(); open it only inside "
                    "the process that reads (Spark's read()), never before forking"
                )
            return hit[1], hit[2], hit[3]
        if not os.path.exists(os.path.join(path, "data.mdb")):
            raise LogUnavailable(f"{path}: no partition store")
        env = lmdb.open(
            path,
            readonly=True,
            lock=True,  # lock=False is unsafe while the broker writes
            create=False,
            subdir=True,
            max_dbs=4,
            max_readers=MAX_READERS,
            readahead=False,
        )
        try:
            with contextlib.suppress(lmdb.Error):
                env.reader_check()  # free the slots of readers that were killed
            try:
                log_db = env.open_db(LOG_DB, create=False)
                meta_db = env.open_db(META_DB, create=False)
            except lmdb.NotFoundError as exc:  # store created but its first commit not yet
                raise LogUnavailable(f"{path}: partition log not initialised yet") from exc
        except BaseException:
            env.close()
            raise
        _ENVS[path] = (os.getpid(), env, log_db, meta_db)
        return env, log_db, meta_db


def _close(path: str) -> None:
    with _ENVS_LOCK:
        hit = _ENVS.pop(path, None)
    if hit is not None and hit[0] == os.getpid():
        with contextlib.suppress(Exception):
            hit[1].close()


def close_all() -> None:
    """Close every environment this process opened (tests, end of an export)."""
    for path in list(_ENVS):
        _close(path)


def _with_txn(path: str, fn: Callable[[Any, Any, Any], Any]) -> Any:
    """Run fn(txn, log_db, meta_db) in a short read transaction; re-open on MapResizedError."""
    import lmdb

    for attempt in range(3):
        env, log_db, meta_db = _open(path)
        try:
            with env.begin(buffers=False) as txn:
                return fn(txn, log_db, meta_db)
        except lmdb.MapResizedError:
            _close(path)  # the writer grew the map: a fresh handle maps the new size
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def log_end(path: str) -> int:
    """The next offset the log will use (exclusive end of what is committed); 0 if none yet."""
    try:

        def end(txn: Any, log_db: Any, meta_db: Any) -> int:
            nxt = txn.get(NEXT_OFFSET_META, db=meta_db)
            value = _U64.unpack(nxt)[0] if nxt else 0
            cur = txn.cursor(db=log_db)
            if cur.last():
                value = max(value, _U64.unpack(cur.key())[0] + 1)
            return value

        return int(_with_txn(path, end))
    except LogUnavailable:
        return 0


def _trimmed_below(txn: Any, meta_db: Any) -> int:
    raw = txn.get(TRIMMED_BELOW_META, db=meta_db)
    return int(_U64.unpack(raw)[0]) if raw else 0


def log_start(path: str) -> int:
    """The first offset still readable (0 unless the log was trimmed); 0 if no store yet."""
    try:
        return int(_with_txn(path, lambda txn, _log, meta_db: _trimmed_below(txn, meta_db)))
    except LogUnavailable:
        return 0


def _trimmed_error(path: str, pos: int, low: int) -> LogTrimmed:
    return LogTrimmed(
        f"{path}: log records {pos}..{low - 1} were trimmed before this reader read them "
        f"(the log now starts at offset {low}; the server's --log-retention-records cap passed "
        "this reader). Events are missing: restart the reader from a fresh checkpoint / "
        "directory, or raise the cap."
    )


def check_start(path: str, start: int) -> None:
    """Raise LogTrimmed if offset `start` of a log is gone."""
    low = log_start(path)
    if start < low:
        raise _trimmed_error(path, start, low)


def iter_log(path: str, start: int, end: int, chunk: int = READ_CHUNK) -> Iterator[list[bytes]]:
    """Raw log values with offsets in [start, end), in chunks, one read transaction per chunk.

    Raises LogTrimmed when part of the range was trimmed (checked in each chunk's transaction).
    """
    pos = start
    while pos < end:

        def take(txn: Any, log_db: Any, meta_db: Any, pos: int = pos) -> tuple[list[bytes], int]:
            low = _trimmed_below(txn, meta_db)
            if pos < low:
                raise _trimmed_error(path, pos, low)
            out: list[bytes] = []
            cur = txn.cursor(db=log_db)
            nxt = end
            if cur.set_range(_U64.pack(pos)):
                for k, v in cur:
                    off = _U64.unpack(k)[0]
                    if off >= end:
                        break
                    out.append(v)
                    nxt = off + 1
                    if len(out) >= chunk:
                        break
                else:
                    nxt = end
            return out, nxt

        values, nxt = _with_txn(path, take)
        if values:
            yield values
        if nxt <= pos:  # defensive: never loop in place
            break
        pos = nxt if values else end


def log_to_event_columns(values: list[bytes]) -> dict[str, list[Any]]:
    """Decode raw log values into the event-stream columns (EVENT_COLUMNS order).

    `timestamp` and `enqueued_time` stay Unix milliseconds here; `key` is the partitioning
    key [SB partitioning P6]: the session id, else the partition key.
    """
    cols: dict[str, list[Any]] = {name: [] for name in EVENT_COLUMNS}
    a = [cols[name].append for name in EVENT_COLUMNS]
    for raw in values:
        d = decode_log(raw)  # refuses unknown schema versions
        sid = d.get("session_id")
        pk = d.get("partition_key")
        a[0](d["ns"])
        a[1](d["entity"])
        a[2](d["queue"])
        a[3](d["partition"])
        a[4](d["offset"])
        a[5](d["event_ms"])
        a[6](d["event"])
        a[7](sid if sid is not None else pk)
        a[8](d.get("seq"))
        a[9](d.get("message_id"))
        a[10](sid)
        a[11](pk)
        a[12](d.get("enqueued_ms"))
        a[13](d.get("size"))
        a[14](d.get("delivery_count"))
        a[15](d.get("reason"))
        props = d.get("properties")
        a[16](decode_properties(props) if props is not None else None)
        body = d.get("body")
        a[17](decode_body(body) if body is not None else None)
    return cols


def render_value(value: Any) -> str | None:
    """An application property value as text: strings as is, true/false, numbers in decimal,
    timestamps as ISO-8601 UTC (milliseconds), binary as hex, UUIDs canonical."""
    from sbemu.protocol import codec

    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, codec.Timestamp):
        from datetime import UTC, datetime

        return datetime.fromtimestamp(int(value) / 1000, tz=UTC).isoformat(timespec="milliseconds")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def decode_properties(raw: bytes) -> dict[str, str | None]:
    """A log record's "properties" (encoded AMQP map) as {name: value rendered as text}."""
    from sbemu.protocol import codec

    value, _ = codec.decode(bytes(raw))
    if not isinstance(value, dict):
        raise ValueError(f"application-properties is not a map: {type(value).__name__}")
    return {str(k): render_value(v) for k, v in value.items()}


def decode_body(raw: bytes) -> bytes:
    """A log record's "body" (encoded body sections) as bytes: the payload of the data
    sections, concatenated; an amqp-value / amqp-sequence body stays AMQP-encoded."""
    from sbemu.protocol import codec

    raw = bytes(raw)
    parts: list[bytes] = []
    pos = 0
    while pos < len(raw):
        section, pos = codec.decode(raw, pos)
        if not (isinstance(section, codec.Described) and section.descriptor == 0x75):
            return raw
        parts.append(bytes(section.value))
    return b"".join(parts)


def segment_record(d: dict[str, Any]) -> dict[str, Any]:
    """A decoded log record as one segment line: "properties" decoded to a {name: text} map,
    "body" (data payload, see decode_body) in base64; everything else as is."""
    props, body = d.get("properties"), d.get("body")
    if props is not None or body is not None:
        import base64

        d = dict(d)
        d["properties"] = decode_properties(props) if props is not None else None
        d["body"] = base64.b64encode(decode_body(body)).decode("ascii") if body is not None else None
    return d


# ================================================================================================
# Segment export
# ================================================================================================


def segment_name(first: int, last: int) -> str:
    """The file name of the segment holding offsets first..last (inclusive)."""
    return f"{first:0{OFFSET_DIGITS}d}-{last:0{OFFSET_DIGITS}d}{SEGMENT_SUFFIX}"


def exported_end(directory: str | os.PathLike[str]) -> int:
    """The offset after the last one already exported into a partition's segment directory."""
    end = 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in names:
        m = SEGMENT_RE.match(name)
        if m:
            end = max(end, int(m.group(2)) + 1)
    return end


@dataclass
class ExportStats:
    """What one export pass wrote."""

    segments: int = 0
    records: int = 0
    written: list[str] = field(default_factory=list)


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _atomic_write(path: str, lines: Iterator[str] | list[str]) -> None:
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(directory)


def _copy_manifest(src_entity_dir: str, dst_entity_dir: str) -> None:
    src = os.path.join(src_entity_dir, "entity.json")
    dst = os.path.join(dst_entity_dir, "entity.json")
    try:
        data = Path(src).read_text()
    except OSError:
        return
    try:
        if Path(dst).read_text() == data:
            return
    except OSError:
        pass
    _atomic_write(dst, [data])


def _write_segment(target_dir: str, values: list[bytes], first: int) -> tuple[str, int]:
    """Write decoded records as one segment; returns (path, last offset)."""
    records = [segment_record(decode_log(v)) for v in values]
    last = int(records[-1]["offset"])
    if int(records[0]["offset"]) < first:
        raise ValueError(f"{target_dir}: log offset {records[0]['offset']} below {first}")
    path = os.path.join(target_dir, segment_name(first, last))
    _atomic_write(path, (json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return path, last


def export_pass(
    data_dir: str | os.PathLike[str],
    to_dir: str | os.PathLike[str],
    *,
    segment_records: int = DEFAULT_SEGMENT_RECORDS,
    flush_tail: Callable[[str, int, int], bool] = lambda key, start, end: True,
) -> ExportStats:
    """Export every complete segment, and each tail `flush_tail(key, start, end)` allows."""
    if segment_records < 1:
        raise ValueError("segment_records must be at least 1")
    stats = ExportStats()
    to_root = Path(to_dir).resolve()
    reader = reader_name("export", to_root)
    data_root = Path(data_dir).resolve()
    for part in discover_partitions(data_root):
        target = to_root / part.key
        entity_src = str(data_root / part.key.rsplit("/", 1)[0])
        os.makedirs(target, exist_ok=True)
        _copy_manifest(entity_src, str(target.parent))
        for stale in target.glob(".*.tmp"):  # a crash mid-write left this behind
            stale.unlink(missing_ok=True)
        start = exported_end(target)
        if start == 0 and not any(SEGMENT_RE.match(n) for n in os.listdir(target)):
            start = log_start(part.path)  # a new export begins where the log begins
        end = log_end(part.path)
        while start < end:
            full = end - start >= segment_records
            if not full and not flush_tail(part.key, start, end):
                break
            stop = min(end, start + segment_records)
            values = [v for chunk in iter_log(part.path, start, stop) for v in chunk]
            if not values:  # defensive: no records in this range
                start = stop
                continue
            path, last = _write_segment(str(target), values, start)
            register_reader(part.path, reader, last + 1, int(time.time() * 1000))
            stats.segments += 1
            stats.records += len(values)
            stats.written.append(path)
            start = last + 1
    return stats


def export_logs(
    data_dir: str | os.PathLike[str],
    to_dir: str | os.PathLike[str],
    *,
    segment_records: int = DEFAULT_SEGMENT_RECORDS,
    follow: bool = False,
    poll_interval: float = 1.0,
    flush_interval: float = 5.0,
    should_stop: Callable[[], bool] = lambda: False,
    log: Callable[[str], None] = lambda line: None,
) -> ExportStats:
    """Export the logs of `data_dir` into segment files under `to_dir` (see module docstring).

    One-shot by default (everything committed now, tails included); with `follow`, keeps
    tailing until `should_stop()` or Ctrl-C. Only one exporter may run per target directory.
    """
    import fcntl

    os.makedirs(to_dir, exist_ok=True)
    lock_path = os.path.join(to_dir, ".export.lock")
    with open(lock_path, "a+") as lock_file:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise RuntimeError(f"another export-logs is writing into {to_dir}") from exc
        total = ExportStats()
        try:
            if not follow:
                total = export_pass(data_dir, to_dir, segment_records=segment_records)
                return total
            waiting: dict[str, tuple[int, float]] = {}  # key -> (tail start, first seen)

            def flush_tail(key: str, start: int, end: int) -> bool:
                now = time.monotonic()
                seen = waiting.get(key)
                if seen is None or seen[0] != start:
                    waiting[key] = (start, now)
                    return flush_interval <= 0
                return now - seen[1] >= flush_interval

            while not should_stop():
                stats = export_pass(
                    data_dir, to_dir, segment_records=segment_records, flush_tail=flush_tail
                )
                total.segments += stats.segments
                total.records += stats.records
                if stats.segments:
                    log(f"exported {stats.records} records in {stats.segments} segment(s)")
                time.sleep(poll_interval)
            return total
        except KeyboardInterrupt:
            return total
        finally:
            close_all()
            fcntl.flock(lock_file, fcntl.LOCK_UN)


# ================================================================================================
# sbemu report
# ================================================================================================


def spark_missing_reason() -> str | None:
    """Why the Spark job cannot run here (None: it can)."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return (
            f"{exc.name or 'pyspark'} is not installed: pip install -e '.[spark]' "
            "(pyspark and pyarrow)"
        )
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return None
    if shutil.which("java") is None:
        return "java is not installed (Spark needs Java 17+ on PATH or in JAVA_HOME)"
    return None


def ensure_sparkjobs_importable() -> None:
    """Make the repository's ``sparkjobs`` package importable (it is not installed)."""
    try:
        import sparkjobs  # noqa: F401

        return
    except ImportError:
        pass
    candidates = [os.environ.get("SBEMU_SPARKJOBS_ROOT"), str(Path(__file__).resolve().parents[2])]
    for root in candidates:
        if root and os.path.exists(os.path.join(root, "sparkjobs", "__init__.py")):
            sys.path.insert(0, root)
            return
    raise ImportError(
        "cannot find the sparkjobs package; run from the sbemu repository or set "
        "SBEMU_SPARKJOBS_ROOT to the directory that contains sparkjobs/"
    )


class _Progress:
    """A one-line 'starting Spark... Ns' ticker on stderr while the JVM starts."""

    def __init__(self, stream: TextIO, message: str) -> None:
        self.stream = stream
        self.message = message
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._t0 = time.monotonic()

    def __enter__(self) -> _Progress:
        if self._tty:
            self._thread.start()
        else:
            print(f"{self.message}...", file=self.stream, flush=True)
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            secs = time.monotonic() - self._t0
            print(f"\r{self.message}... {secs:4.1f}s", end="", file=self.stream, flush=True)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._tty:
            self._thread.join()
            secs = time.monotonic() - self._t0
            print(f"\r{self.message}... done in {secs:.1f}s", file=self.stream, flush=True)


def run_report(
    out: str | os.PathLike[str],
    *,
    data_dir: str | os.PathLike[str] | None = None,
    segments: str | os.PathLike[str] | None = None,
    follow: bool = False,
    interval: float = 5.0,
    max_records_per_batch: int | None = None,
    max_files_per_batch: int | None = None,
    master: str | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the reporting job locally and print a summary per entity; returns an exit code."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if (data_dir is None) == (segments is None):
        print("sbemu: report needs exactly one of --data-dir or --segments", file=stderr)
        return 2
    source_dir = Path(data_dir if data_dir is not None else segments).resolve()  # type: ignore[arg-type]
    if not source_dir.is_dir():
        print(f"sbemu: no such directory: {source_dir}", file=stderr)
        return 2
    reason = spark_missing_reason()
    if reason:
        print(f"sbemu: cannot run the Spark job: {reason}", file=stderr)
        return 2
    ensure_sparkjobs_importable()
    from sparkjobs import report as job  # pyspark is imported from here on
    from sparkjobs.session import build_session

    with _Progress(stderr, f"starting Spark ({master or 'local[*]'})"):
        spark = build_session(master=master)
    stop = threading.Event()
    restore = _stop_on_signals(stop, stderr)  # after Spark: replaces pyspark's SIGINT handler
    try:
        kind = "lmdb" if data_dir is not None else "segments"
        result = job.run(
            spark,
            source=kind,
            path=str(source_dir),
            out=str(Path(out).resolve()),
            follow=follow,
            interval_seconds=interval,
            max_records_per_batch=max_records_per_batch,
            max_files_per_batch=max_files_per_batch,
            log=lambda line: print(line, file=stderr, flush=True),
            on_tables=lambda total, rows: print(
                job.format_summary(rows) + "\n", file=stdout, flush=True
            ),
            should_stop=stop.is_set,
        )
        print(job.format_summary(result.summary), file=stdout, flush=True)
        print(
            f"{result.new_events} new event(s) in {result.batches} batch(es), "
            f"{result.total_events} in total; tables in {Path(out).resolve()}",
            file=stdout,
            flush=True,
        )
    except job.ReportError as exc:
        print(f"sbemu: {exc}", file=stderr)
        return 2
    finally:
        restore()
        spark.stop()
    return 0


def _stop_on_signals(stop: threading.Event, stderr: TextIO) -> Callable[[], None]:
    """First SIGINT/SIGTERM: finish gracefully (stop the query, rebuild the tables); a second
    SIGINT interrupts at once. Returns a function restoring the previous handlers."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: object) -> None:
        stop.set()
        print("stopping after the current batch (Ctrl-C again to abort)", file=stderr, flush=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


# ================================================================================================
# Command line (plugged into sbemu.cli; also `python -m sbemu.reporting`)
# ================================================================================================


def add_report_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Register ``report`` on an argparse subparsers object."""
    p = subcommands.add_parser(
        "report",
        help="build the Spark reporting tables from the partition logs",
        description="Stream the partition logs into Parquet reporting tables (exactly once, "
        "through a checkpoint in OUT/_checkpoints), then print a summary per entity. "
        "Runs until caught up (availableNow) unless --follow.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data-dir", metavar="D", help="emulator data directory (default: .sbemu)")
    src.add_argument("--segments", metavar="DIR", help="segment files written by export-logs")
    p.add_argument("--out", metavar="DIR", default="reports", help="tables directory [reports]")
    p.add_argument("--follow", action="store_true", help="keep running (processing-time trigger)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S",
                   help="seconds between micro-batches with --follow [5]")
    p.add_argument("--max-records-per-batch", type=int, metavar="N",
                   help="cap on log records per micro-batch (LMDB source)")
    p.add_argument("--max-files-per-batch", type=int, metavar="N",
                   help="cap on segment files per micro-batch (--segments)")
    p.add_argument("--master", metavar="URL", help="Spark master [local[*]]")
    p.set_defaults(handler=cmd_report)
    return p


def cmd_report(args: argparse.Namespace) -> int:
    """Handler of ``sbemu report``."""
    data_dir = args.data_dir
    if data_dir is None and args.segments is None:
        data_dir = os.environ.get("SBEMU_DATA_DIR") or ".sbemu"
    return run_report(
        args.out,
        data_dir=data_dir,
        segments=args.segments,
        follow=args.follow,
        interval=args.interval,
        max_records_per_batch=args.max_records_per_batch,
        max_files_per_batch=args.max_files_per_batch,
        master=args.master,
    )


def add_export_logs_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Register ``export-logs`` on an argparse subparsers object."""
    p = subcommands.add_parser(
        "export-logs",
        help="copy the partition logs into immutable segment files (JSON lines)",
        description="Tail the partition logs into <TO>/<ns>/<entity>/partition-NN/"
        "<first>-<last>.jsonl (offsets inclusive, 20 digits); resumes where it stopped.",
    )
    p.add_argument("--data-dir", metavar="D", help="emulator data directory (default: .sbemu)")
    p.add_argument("--to", metavar="DIR", required=True, help="segment directory")
    p.add_argument("--segment-records", type=int, default=DEFAULT_SEGMENT_RECORDS, metavar="N",
                   help=f"records per full segment [{DEFAULT_SEGMENT_RECORDS}]")
    p.add_argument("--follow", action="store_true", help="keep tailing until Ctrl-C")
    p.add_argument("--poll-interval", type=float, default=1.0, metavar="S",
                   help="seconds between polls with --follow [1]")
    p.add_argument("--flush-interval", type=float, default=5.0, metavar="S",
                   help="with --follow, write a partial tail segment after S seconds [5]")
    p.set_defaults(handler=cmd_export_logs)
    return p


def cmd_export_logs(args: argparse.Namespace) -> int:
    """Handler of ``sbemu export-logs``."""
    data_dir = args.data_dir or os.environ.get("SBEMU_DATA_DIR") or ".sbemu"
    if not os.path.isdir(data_dir):
        print(f"sbemu: no such data directory: {data_dir}", file=sys.stderr)
        return 2
    if args.segment_records < 1:
        print("sbemu: --segment-records must be at least 1", file=sys.stderr)
        return 2
    try:
        stats = export_logs(
            data_dir,
            args.to,
            segment_records=args.segment_records,
            follow=args.follow,
            poll_interval=args.poll_interval,
            flush_interval=args.flush_interval,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except RuntimeError as exc:
        print(f"sbemu: {exc}", file=sys.stderr)
        return 2
    print(f"exported {stats.records} record(s) in {stats.segments} segment(s) to {args.to}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m sbemu.reporting report|export-logs ...`` (the same as the sbemu commands)."""
    parser = argparse.ArgumentParser(prog="python -m sbemu.reporting")
    sub = parser.add_subparsers(dest="command", required=True)
    add_report_parser(sub)
    add_export_logs_parser(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
