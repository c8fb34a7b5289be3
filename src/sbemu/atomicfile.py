"""Crash-safe whole-file writes: the one place that writes a temp file, fsyncs, renames.

A reader (or a restart) sees either the old file or the new one, never a torn one: the bytes
go to a hidden ``.<name>.tmp`` beside the target (hidden, so Spark's file source and the
exporter's stale-temp sweep skip it), are fsynced, renamed over the target, and the rename is
made durable by fsyncing the directory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

__all__ = ["atomic_write", "fsync_dir"]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename in directory `path` durable (best effort where directories cannot be
    opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(
    path: str | os.PathLike[str], chunks: bytes | Iterable[bytes], mode: int = 0o666
) -> None:
    """Replace the file at `path` with `chunks` atomically and durably; a new file gets
    permission bits `mode` (less the umask, as for open())."""
    directory, name = os.path.split(os.fspath(path))
    tmp = os.path.join(directory, f".{name}.tmp")
    if isinstance(chunks, bytes):
        chunks = (chunks,)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(directory or ".")
