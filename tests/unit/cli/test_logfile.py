"""The log file survives its disk failing: no traceback per record, one line on stderr, the
file opened again by its path once it can be written (tests/faults/test_disk_faults.py does the
same with a real read-only filesystem)."""

from __future__ import annotations

import logging
import logging.handlers
import os

from sbemu.cli.logfile import RETRY_S, ResilientFileHandler, attach_file_log


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("t", logging.INFO, __file__, 1, msg, None, None)


def test_a_failing_log_file_drops_records_quietly_and_comes_back(tmp_path, capsys):
    now = [100.0]
    path = tmp_path / "logs" / "sbemu.log"
    path.parent.mkdir()
    handler = ResilientFileHandler(path, max_bytes=1 << 20, backup_count=1, clock=lambda: now[0])
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.handle(_record("before"))
    # the disk goes away under the open file: every write now fails
    os.close(handler.stream.fileno())
    os.rename(path, tmp_path / "old.log")
    for i in range(5):
        handler.handle(_record(f"during{i}"))
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Logging error" not in err, err
    assert err.count("cannot write the log file") == 1, err
    assert handler.dropped == 5 and handler.failed_at == 100.0
    now[0] += RETRY_S / 2
    handler.handle(_record("still waiting"))  # not tried again yet
    assert not path.exists() and handler.dropped == 6
    now[0] += RETRY_S
    handler.handle(_record("after"))  # opened again by its path, with a note of the gap
    handler.close()
    lines = path.read_text().splitlines()
    assert lines == [
        "after",
        "the log file could not be written for a while: 6 record(s) were dropped",
    ], lines
    assert handler.failed_at is None and handler.dropped == 0
    assert capsys.readouterr().err == ""


def test_the_file_log_is_written_off_the_calling_thread(tmp_path):
    path = tmp_path / "logs" / "sbemu.log"
    path.parent.mkdir()
    logger = logging.getLogger("sbemu.test-logfile")
    front = attach_file_log(path, logging.Formatter("%(levelname)s %(message)s"))
    try:
        assert isinstance(front, logging.handlers.QueueHandler)  # the caller only enqueues
        logger.warning("hello %s", "there")
    finally:
        logging.getLogger().removeHandler(front)
        front.stop_writer()  # type: ignore[attr-defined]  # writes what is queued
    front.stop_writer()  # type: ignore[attr-defined]  # (and once more at exit: harmless)
    assert path.read_text().splitlines() == ["WARNING hello there"]
