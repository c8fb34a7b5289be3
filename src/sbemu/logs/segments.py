"""The segment file format: partition-log records as immutable Parquet files (no Spark).

Written by ``sbemu export-logs`` (sbemu.logs.export) for clusters that cannot read the LMDB files,
read by Spark's file source (sparkjobs/source.py)::

    <to>/<ns dir>/<entity dir>/entity.json                           copy of the layout manifest
    <to>/<ns dir>/<entity dir>/partition-NN/<first>-<last>.parquet    offsets, 20 digits, inclusive

One row per log record, with the log record's keys as columns (`SEGMENT_FIELDS`, built from
sbemu.partitions.LOG_FIELDS: same names, same order) plus ``segment_version``; "properties" is already decoded into a
``{name: text}`` map (sbemu.logs.events.decode_properties) and "body" holds the payload bytes
(sbemu.logs.events.decode_body). Columnar (Parquet, zstd) so a cluster reads only the columns a
table needs; the format's version is `SEGMENT_VERSION`, in the ``segment_version`` column of
every row (readers refuse other versions; Spark sees no file metadata) and in the file's
key-value metadata ``sbemu.segment_version``. Version 1 was JSON lines (``.jsonl``).

Segments are contiguous and never rewritten: a file appears under its final name only once
complete (written as a hidden ``.<name>.tmp``, fsynced, renamed), so Spark's file source,
which ignores hidden files, reads each exactly once.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..atomicfile import atomic_write
from ..partitions import LOG_FIELDS

__all__ = [
    "OFFSET_DIGITS",
    "SEGMENT_FIELDS",
    "SEGMENT_RE",
    "SEGMENT_SUFFIX",
    "SEGMENT_VERSION",
    "arrow_schema",
    "exported_end",
    "segment_name",
    "write_segment",
]

SEGMENT_VERSION = 2
OFFSET_DIGITS = 20
SEGMENT_SUFFIX = ".parquet"
SEGMENT_RE = re.compile(r"^(\d{20})-(\d{20})\.parquet$")

# (name, kind) in file order: the log record's keys (sbemu.partitions.LOG_FIELDS), with
# "properties" decoded to a map, then the format version.
SEGMENT_FIELDS: tuple[tuple[str, str], ...] = (
    *((name, "map<string,string>" if name == "properties" else kind) for name, kind in LOG_FIELDS),
    ("segment_version", "int32"),
)


def arrow_schema() -> Any:
    """The segment files' pyarrow schema (pyarrow is imported here, not at module load)."""
    import pyarrow as pa

    kinds = {
        "int32": pa.int32(),
        "int64": pa.int64(),
        "string": pa.string(),
        "binary": pa.binary(),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
    }
    return pa.schema(
        [pa.field(name, kinds[kind]) for name, kind in SEGMENT_FIELDS],
        metadata={b"sbemu.segment_version": str(SEGMENT_VERSION).encode()},
    )


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


def write_segment(target_dir: str, columns: dict[str, Any], first: int) -> tuple[str, int]:
    """Write one segment from columns, Python lists or pyarrow arrays (SEGMENT_FIELDS but
    ``segment_version``, which is added); returns (path, last offset). Offsets must start at
    or above `first`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    offsets = columns["offset"]
    n = len(offsets)
    if not n:
        raise ValueError(f"{target_dir}: empty segment")
    lo, last = (offsets[0], offsets[-1])
    lo, last = (int(getattr(x, "as_py", lambda x=x: x)()) for x in (lo, last))
    if lo < first:
        raise ValueError(f"{target_dir}: log offset {lo} below {first}")
    schema = arrow_schema()
    arrays = []
    for fld in schema:
        data = columns.get(fld.name)
        if fld.name == "segment_version":
            arrays.append(pa.array([SEGMENT_VERSION] * n, type=fld.type))
        elif isinstance(data, pa.Array | pa.ChunkedArray):  # already columnar (export.py)
            arrays.append(data.cast(fld.type))
        else:
            arrays.append(pa.array(data if data is not None else [None] * n, type=fld.type))
    table = pa.Table.from_arrays(arrays, schema=schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    path = os.path.join(target_dir, segment_name(first, last))
    atomic_write(path, [sink.getvalue().to_pybytes()])
    return path, last
