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

No clocks here: callers pass `now_ms`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field

from ..atomicfile import atomic_write

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
