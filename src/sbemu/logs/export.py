"""``sbemu export-logs``: copy the partition logs into immutable segment files (no Spark).

The format is `sbemu.logs.segments` (Parquet, versioned); the logs are read with
`sbemu.logs.reader`. The exporter resumes after the highest offset already exported
(the file names are its only state) and takes a lock (``<to>/.export.lock``) so only one runs
per directory. Full segments hold ``segment_records`` records; the tail of a log is written as a
shorter segment (one-shot runs: at the end; with ``--follow``: once it has waited
``flush_interval`` seconds), so ranges are contiguous but not necessarily aligned.

Retention (see sbemu.logs.retention): after each segment the exporter registers, per
partition, the next offset it needs under ``export-<hash of --to>``, so the server keeps what
it has not exported; a log trimmed past it (the server's size cap) raises `LogTrimmed`.
Segments are never deleted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbemu.atomicfile import atomic_write
from sbemu.logs.events import decode_body, decode_log_table, decode_properties, decode_sparse
from sbemu.logs.reader import (
    close_all,
    discover_partitions,
    iter_log,
    log_end,
    log_start,
)
from sbemu.logs.retention import reader_name, register_reader
from sbemu.logs.segments import (
    SEGMENT_RE,
    exported_end,
    write_segment,
)
from sbemu.partitions import LOG_FIELDS

__all__ = [
    "DEFAULT_SEGMENT_RECORDS",
    "ExportStats",
    "export_logs",
    "export_pass",
    "segment_columns",
]

DEFAULT_SEGMENT_RECORDS = 10_000
_RECORD_KEYS = tuple(name for name, _kind in LOG_FIELDS)


def segment_columns(values: list[bytes]) -> dict[str, Any]:
    """Raw log values as segment columns (pyarrow arrays): the record's keys, "properties"
    decoded to a {name: text} map, "body" as payload bytes (sbemu.logs.events). Vectorised:
    one msgpack call per record, the columns built by Arrow; refuses unknown record versions."""
    import pyarrow as pa

    table = decode_log_table(values)
    cols: dict[str, Any] = {name: table[name] for name in _RECORD_KEYS}
    cols["properties"] = decode_sparse(
        table["properties"], _property_items, pa.map_(pa.string(), pa.string())
    )
    cols["body"] = decode_sparse(table["body"], decode_body, pa.binary())
    return cols


def _property_items(raw: bytes) -> list[tuple[str, str | None]]:
    return list(decode_properties(raw).items())


@dataclass
class ExportStats:
    """What one export pass wrote."""

    segments: int = 0
    records: int = 0
    written: list[str] = field(default_factory=list)


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
    atomic_write(dst, [data.encode()])


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
            path, last = write_segment(str(target), segment_columns(values), start)
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
