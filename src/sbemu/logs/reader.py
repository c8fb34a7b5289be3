"""Read-only access to the partition logs, next to a live writer (no Spark, no proton).

The log's schema is `records.py` (`decode_log`); the store (`store.py`) writes it. This module
finds the logs of a data directory and reads ranges of them, for the exporter and for Spark's
data source (sparkjobs/source.py), which call it inside their own processes.

Where the logs live (see partitions/store.py and partitions/router.py)::

    <data_dir>/<quoted lower-case namespace>/<quoted lower-case entity>/entity.json
    <data_dir>/<ns>/<entity>/partition-NN/{data,lock}.mdb    LMDB, named database "log"
                                                            key: 8-byte big-endian offset
                                                            value: records.encode_log() (msgpack),
                                                            or a run record taking several
                                                            offsets (records.encode_log_run),
                                                            expanded as it is read

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

Retention (see sbemu.logs.retention): when the server trimmed a log past a reader, the
store's meta ``log_trimmed_below`` is above that reader's offset and reading raises
`LogTrimmed` (never a silent skip).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sbemu.partitions import (
    LOG_DB,
    META_DB,
    NEXT_OFFSET_META,
    TRIMMED_BELOW_META,
    log_extent,
    read_log_events,
)

__all__ = [
    "LogPartition",
    "LogTrimmed",
    "LogUnavailable",
    "check_start",
    "close_all",
    "discover_partitions",
    "iter_log",
    "log_end",
    "log_start",
    "read_layout",
]

_U64 = struct.Struct(">Q")
MAX_READERS = 512  # the broker opens with 512; the first opener sizes the reader table
READ_CHUNK = 8192  # records per read transaction
PARTITION_RE = re.compile(r"^partition-(\d+)$")


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
                        LogPartition(
                            f"{ns.name}/{ent.name}/{part.name}", part.path, int(m.group(1))
                        )
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
                value = max(value, _U64.unpack(cur.key())[0] + log_extent(cur.value()))
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
    """The log records with offsets in [start, end) (version 1: run records expanded), in
    chunks of at most `chunk`, one read transaction per chunk.

    Raises LogTrimmed when part of the range was trimmed (checked in each chunk's transaction).
    """
    pos = start
    while pos < end:

        def take(txn: Any, log_db: Any, meta_db: Any, pos: int = pos) -> tuple[list[bytes], int]:
            low = _trimmed_below(txn, meta_db)
            if pos < low:
                raise _trimmed_error(path, pos, low)
            cur = txn.cursor(db=log_db)
            if cur.set_range(_U64.pack(pos)) and _U64.unpack(cur.key())[0] == pos:
                # Offsets are contiguous (the log only grows at the end and is trimmed at the
                # start): take the values without looking at each key, then check the last
                # one is where contiguity puts it and is no run record (an earlier run would
                # have put it further); anything else reads record by record below.
                want = min(chunk, end - pos)
                out = list(islice(cur.iternext(keys=False, values=True), want))
                if (
                    len(out) == want
                    and _U64.unpack(cur.key())[0] == pos + want - 1
                    and log_extent(out[-1]) == 1
                ):
                    return out, pos + want
            events, nxt = read_log_events(cur, pos, end, chunk)
            return [value for _off, value in events], end if nxt is None else nxt

        values, nxt = _with_txn(path, take)
        if values:
            yield values
        if nxt <= pos:  # defensive: never loop in place
            break
        pos = nxt if values else end
