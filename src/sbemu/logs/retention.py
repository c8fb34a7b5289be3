"""Partition-log retention: registered readers and the trim decision.

Readers of the logs (a report's Spark source on each committed batch, ``sbemu export-logs``
after each segment) register the next offset they still need, per partition, in

    <partition dir>/readers/<reader name>.json      {"offset": N, "updated_ms": T}

written atomically (temp file, fsync, rename). Reader names: ``report-<hash of the out dir>``,
``export-<hash of the segment dir>`` (see `reader_name`). A reader that is gone for good can be
unregistered by deleting its file.

The server trims each log (see `plan_trim`):
- below the minimum registered offset, when readers are registered;
- to at most `cap` records (``--log-retention-records``), even past a registered reader:
  such a reader is reported back (the server logs a WARNING naming it), and the reader itself
  fails loudly when it next reads (its offset is below the store's meta ``log_trimmed_below``);
- without readers and without a cap: never.

`trim_logs` is one such pass over a server's partitions; the server's timer starts one every
RETENTION_INTERVAL_MS on a worker thread (never two at once) unless it runs with
``--keep-logs``. No clocks here: callers pass `now_ms`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from ..atomicfile import atomic_write
from ..partitions import TRIM_LIMIT, StoreError

log = logging.getLogger(__name__)

READERS_DIR = "readers"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


def reader_name(kind: str, directory: str | os.PathLike[str]) -> str:
    """``<kind>-<12 hex digits of sha256(absolute directory)>``, e.g. ``report-…``."""
    digest = hashlib.sha256(os.path.abspath(os.fspath(directory)).encode("utf-8")).hexdigest()
    return f"{kind}-{digest[:12]}"


def register_reader(partition_dir: str, name: str, offset: int, now_ms: int) -> None:
    """Record (atomically) that reader `name` has consumed everything below `offset`."""
    if not _NAME_RE.match(name):
        raise ValueError(f"invalid reader name {name!r}")
    directory = os.path.join(partition_dir, READERS_DIR)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.json")
    atomic_write(path, json.dumps({"offset": int(offset), "updated_ms": int(now_ms)}).encode())


def registered_readers(partition_dir: str) -> dict[str, int]:
    """Every registered reader of one partition and its committed next offset.

    Unreadable or malformed files count as offset 0 (they hold the log, never release it).
    """
    directory = os.path.join(partition_dir, READERS_DIR)
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out: dict[str, int] = {}
    for fname in names:
        if fname.startswith(".") or not fname.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, fname), encoding="utf-8") as f:
                offset = int(json.load(f)["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            offset = 0
        out[fname[: -len(".json")]] = max(0, offset)
    return out


@dataclass
class TrimPlan:
    """What to delete: every record below `below`; `overrun` readers lose records."""

    below: int
    overrun: dict[str, int] = field(default_factory=dict)


def plan_trim(first: int, end: int, readers: dict[str, int], cap: int) -> TrimPlan | None:
    """The trim for a log holding [first, end); None when there is nothing to trim.

    `cap` > 0 keeps at most `cap` records; 0 means no size limit.
    """
    below = first
    if readers:
        below = max(below, min(min(readers.values()), end))
    if cap > 0 and end - cap > below:
        below = end - cap
    if below <= first:
        return None
    overrun = {name: off for name, off in readers.items() if off < below}
    return TrimPlan(below, overrun)


# ------------------------------------------------------------------ the server's pass
RETENTION_INTERVAL_MS = 10_000  # between the server's retention passes
CALLS_PER_PASS = 20  # trim_log() calls (each up to TRIM_LIMIT records) per partition and pass


class PartitionLog(Protocol):
    """What a retention pass uses of a partition (partitions.broker.PartitionBroker is one)."""

    @property
    def entity(self) -> str: ...
    @property
    def partition_id(self) -> int: ...
    @property
    def log_dir(self) -> str: ...

    def log_bounds(self) -> tuple[int, int]: ...
    def trim_log(self, below: int) -> int: ...


def trim_logs(partitions: Iterable[PartitionLog], cap: int) -> None:
    """One retention pass over the partitions' logs, keeping at most `cap` records each (0: no
    cap); runs off the event loop. A reader the cap passes is named in a WARNING, once."""
    for part in partitions:
        readers = registered_readers(part.log_dir)
        if not readers and cap <= 0:
            continue
        try:
            for _ in range(CALLS_PER_PASS):
                first, end = part.log_bounds()
                plan = plan_trim(first, end, readers, cap)
                if plan is None:
                    break
                for name, offset in sorted(plan.overrun.items()):
                    if offset < first:  # passed in an earlier pass: warned then
                        continue
                    log.warning(
                        "partition %s/%d: log retention (--log-retention-records %d) trims "
                        "below offset %d, past reader %s at offset %d: that reader will fail",
                        part.entity, part.partition_id, cap, plan.below, name, offset,
                    )  # fmt: skip
                if part.trim_log(plan.below) < TRIM_LIMIT:
                    break
        except StoreError as exc:
            log.error(
                "partition %s/%d: log retention failed: %s", part.entity, part.partition_id, exc
            )
