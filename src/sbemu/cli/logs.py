"""``sbemu report`` (the Spark job, found through the ``sbemu.reports`` entry point) and
``sbemu export-logs`` (Parquet segments, no Spark)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from sbemu.cli.common import _fail


def _add_report(subcommands: Any) -> None:
    p = subcommands.add_parser(
        "report",
        help="build the Spark reporting tables from the partition logs",
        description="Stream the partition logs into Parquet reporting tables (exactly once, "
        "through a checkpoint in OUT/_checkpoints; each micro-batch merges only its own events "
        "into the tables), then print a summary per entity. Runs until caught up "
        "(availableNow) unless --follow. See sparkjobs/README.md.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data-dir", metavar="D", help="emulator data directory (default: .sbemu)")
    src.add_argument("--segments", metavar="DIR", help="segment files written by export-logs")
    p.add_argument("--out", metavar="DIR", default="reports", help="tables directory [reports]")
    p.add_argument("--follow", action="store_true", help="keep running (processing-time trigger)")
    p.add_argument(
        "--interval",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between micro-batches with --follow [5]",
    )
    p.add_argument(
        "--max-records-per-batch",
        type=int,
        metavar="N",
        help="cap on log records per micro-batch (LMDB source)",
    )
    p.add_argument(
        "--max-files-per-batch",
        type=int,
        metavar="N",
        help="cap on segment files per micro-batch (--segments)",
    )
    p.add_argument("--master", metavar="URL", help="Spark master [local[*]]")
    p.add_argument(
        "--html",
        action="store_true",
        help="also write OUT/report.html: charts, self-contained, works offline",
    )
    p.set_defaults(handler=_run_report)


REPORT_ENTRY_POINTS = "sbemu.reports"  # the entry-point group of report jobs (pyproject.toml)
REPORT_JOB = "spark"


def _report_job(name: str) -> Any:
    """The report job declared as ``name`` in the ``sbemu.reports`` entry-point group."""
    from importlib.metadata import entry_points

    found = entry_points(group=REPORT_ENTRY_POINTS, name=name)
    if not found:
        raise ImportError(
            f"no {name!r} entry point in group {REPORT_ENTRY_POINTS!r} (is sbemu installed?)"
        )
    return next(iter(found)).load()


def _run_report(args: argparse.Namespace) -> int:
    """``sbemu report``: runs the job declared in the ``sbemu.reports`` entry-point group
    (sparkjobs.launch:run_report, see pyproject.toml), so sbemu never imports sparkjobs."""
    data_dir = args.data_dir
    if data_dir is None and args.segments is None:
        data_dir = os.environ.get("SBEMU_DATA_DIR") or ".sbemu"
    try:
        run_report = _report_job(REPORT_JOB)
    except ImportError as exc:
        return _fail(f"cannot load the Spark jobs (sparkjobs): {exc}; pip install -e '.[spark]'")
    return int(
        run_report(
            args.out,
            data_dir=data_dir,
            segments=args.segments,
            follow=args.follow,
            interval=args.interval,
            max_records_per_batch=args.max_records_per_batch,
            max_files_per_batch=args.max_files_per_batch,
            master=args.master,
            html=args.html,
        )
    )


def _add_export_logs(subcommands: Any) -> None:
    from sbemu.logs.export import DEFAULT_SEGMENT_RECORDS

    p = subcommands.add_parser(
        "export-logs",
        help="copy the partition logs into immutable segment files (Parquet)",
        description="Tail the partition logs into <TO>/<ns>/<entity>/partition-NN/"
        "<first>-<last>.parquet (offsets inclusive, 20 digits); resumes where it stopped.",
    )
    p.add_argument("--data-dir", metavar="D", help="emulator data directory (default: .sbemu)")
    p.add_argument("--to", metavar="DIR", required=True, help="segment directory")
    p.add_argument(
        "--segment-records",
        type=int,
        default=DEFAULT_SEGMENT_RECORDS,
        metavar="N",
        help=f"records per full segment [{DEFAULT_SEGMENT_RECORDS}]",
    )
    p.add_argument("--follow", action="store_true", help="keep tailing until Ctrl-C")
    p.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between polls with --follow [1]",
    )
    p.add_argument(
        "--flush-interval",
        type=float,
        default=5.0,
        metavar="S",
        help="with --follow, write a partial tail segment after S seconds [5]",
    )
    p.set_defaults(handler=_run_export_logs)


def _run_export_logs(args: argparse.Namespace) -> int:
    """``sbemu export-logs``."""
    data_dir = args.data_dir or os.environ.get("SBEMU_DATA_DIR") or ".sbemu"
    if not os.path.isdir(data_dir):
        return _fail(f"no such data directory: {data_dir}")
    if args.segment_records < 1:
        return _fail("--segment-records must be at least 1")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return _fail("export-logs writes Parquet: pip install pyarrow (or the spark extra)")
    from sbemu.logs.export import export_logs

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
        return _fail(str(exc))
    print(f"exported {stats.records} record(s) in {stats.segments} segment(s) to {args.to}")
    return 0
