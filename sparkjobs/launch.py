"""Launch the reporting job from ``sbemu report`` (local Spark, or --master URL).

``sbemu.cli`` loads this module by name (importlib) when the command runs, so sbemu has no
static import of sparkjobs and nothing imports pyspark until the job starts.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["run_report", "spark_missing_reason"]


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
    html: bool = False,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the reporting job and print a summary per entity; with `html`, also write
    OUT/report.html (sbemu.reports.html; after every batch with events under --follow).
    Returns an exit code."""
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
    from sbemu.reports.html import write_html
    from sparkjobs import report as job  # pyspark is imported from here on
    from sparkjobs.session import build_session

    with _Progress(stderr, f"starting Spark ({master or 'local[*]'})"):
        spark = build_session(master=master)
    stop = threading.Event()
    restore = _stop_on_signals(stop, stderr)  # after Spark: replaces pyspark's SIGINT handler
    out_dir = str(Path(out).resolve())

    def on_tables(total: int, rows: list) -> None:
        print(job.format_summary(rows) + "\n", file=stdout, flush=True)
        if html:
            write_html(out_dir)

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
            on_tables=on_tables,
            should_stop=stop.is_set,
        )
        print(job.format_summary(result.summary), file=stdout, flush=True)
        if html:
            print(f"report: {write_html(out_dir)}", file=stdout, flush=True)
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
