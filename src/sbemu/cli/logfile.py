"""The log file under the data dir (Logging.Type "File"), written so that the disk it is on can
fail or stall without touching the server.

* Off the event loop: records go through a bounded queue to one writer thread (the standard
  library's QueueHandler/QueueListener), so a disk whose writes stall (an fsync storm, a frozen
  filesystem) never blocks the loop; when the queue is full, records are dropped and counted.
* A write that fails (read-only filesystem, disk full, I/O error) does not print a traceback
  for every record, as `logging.Handler.handleError` would: the file is closed, one line on
  stderr says so, records are dropped and counted, and the file is opened again by its path
  every RETRY_S seconds. Once it can be written, one record says how many were dropped. So a
  disk that an operator remounts after an error gets the log again without a restart.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import logging.handlers
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["RETRY_S", "ResilientFileHandler", "attach_file_log"]

RETRY_S = 2.0  # seconds between two attempts to open a log file that could not be written
QUEUE_RECORDS = 10_000  # records waiting for the writer thread before new ones are dropped
FLUSH_WAIT_S = 2.0  # longest flush(): a stalled disk must not hold up whoever flushes


class ResilientFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file that survives its disk failing (see the module comment)."""

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int,
        backup_count: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(path, maxBytes=max_bytes, backupCount=backup_count, encoding="utf-8")
        self._clock = clock
        self.failed_at: float | None = None  # when a write last failed (None: writing)
        self.dropped = 0  # records lost since the file could last be written
        self._failed_now = False

    def _open(self):  # (typeshed: a TextIOWrapper, generic over its buffer)
        os.makedirs(os.path.dirname(self.baseFilename), exist_ok=True)
        return super()._open()

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed_at is not None and self._clock() - self.failed_at < RETRY_S:
            self.dropped += 1
            return
        self._failed_now = False
        super().emit(record)  # a failure comes back through handleError()
        if self._failed_now or self.failed_at is None:
            return
        dropped, self.dropped, self.failed_at = self.dropped, 0, None
        note = logging.LogRecord(
            "sbemu.cli.logfile",
            logging.WARNING,
            __file__,
            0,
            "the log file could not be written for a while: %d record(s) were dropped",
            (dropped,),
            None,
        )
        super().emit(note)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            super().handleError(record)  # a bug in a log call: the standard report
            return
        self._failed_now = True
        self.dropped += 1
        if self.failed_at is None:
            with contextlib.suppress(OSError, ValueError):
                print(
                    f"sbemu: cannot write the log file {self.baseFilename}: {error}; log "
                    f"records are dropped and the file is tried again every {RETRY_S:g} s",
                    file=sys.stderr,
                    flush=True,
                )
        self.failed_at = self._clock()
        stream, self.stream = self.stream, None
        if stream is not None:  # its unwritten buffer is lost with it (counted above)
            with contextlib.suppress(OSError, ValueError):
                stream.close()


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """A QueueHandler that drops (and counts) records when the writer is behind, rather
    than reporting queue.Full as a logging error."""

    dropped = 0
    stop_writer: Callable[[], None] = staticmethod(lambda: None)

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    def flush(self) -> None:
        """Wait (up to FLUSH_WAIT_S: the disk may be stalled) until the writer thread has
        written every queued record."""
        records = self.queue
        if isinstance(records, queue.Queue):
            with records.all_tasks_done:
                records.all_tasks_done.wait_for(lambda: records.unfinished_tasks == 0, FLUSH_WAIT_S)


def attach_file_log(path: Path, formatter: logging.Formatter) -> logging.Handler:
    """Add the log file at `path` to the root logger, written by its own thread; returns the
    handler added to the root logger. Its `stop_writer()` (also run at exit) writes what is
    queued and stops the thread."""
    file_handler = ResilientFileHandler(path, max_bytes=10 * 1024 * 1024, backup_count=5)
    file_handler.setFormatter(formatter)
    records: queue.Queue[logging.LogRecord] = queue.Queue(QUEUE_RECORDS)
    front = _DroppingQueueHandler(records)
    listener = logging.handlers.QueueListener(records, file_handler, respect_handler_level=True)
    listener.start()
    stopped = threading.Event()

    def stop_writer() -> None:
        if not stopped.is_set():
            stopped.set()
            listener.stop()
            file_handler.close()

    front.stop_writer = stop_writer
    atexit.register(stop_writer)
    logging.getLogger().addHandler(front)
    return front
