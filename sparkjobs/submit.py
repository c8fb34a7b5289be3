"""spark-submit entry point: the `sbemu report` job on a cluster.

    cd sbemu && python -m zipfile -c sparkjobs.zip sparkjobs/
    .venv/bin/spark-submit --master spark://<host>:7077 --py-files sparkjobs.zip \
        sparkjobs/submit.py --segments /shared/sbemu-segments --out /shared/sbemu-reports

On a cluster the executors cannot read LMDB on the broker host, so the usual source is the
segment files that `sbemu export-logs --to /shared/sbemu-segments --follow` writes beside the
broker; `--data-dir` (the LMDB source) works where every executor sees the data directory
(then sbemu, lmdb, msgpack and pyarrow must be installed on the executors, and they write the
`events` files into --out themselves, so --out must be shared with them). The master comes from
spark-submit. The driver (this process) merges the tables with local renames, so `--out` must
be a path it can write (shared storage, the same path everywhere).
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession

from sparkjobs.report import ReportError, run
from sparkjobs.session import register


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the job once (availableNow) or with --follow; exit status."""
    parser = argparse.ArgumentParser(prog="sparkjobs/submit.py", description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--segments", metavar="DIR", help="segment files from export-logs")
    source.add_argument("--data-dir", metavar="DIR", help="an sbemu data directory (LMDB)")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the tables go")
    parser.add_argument("--follow", action="store_true", help="keep running")
    parser.add_argument("--max-files-per-batch", type=int, default=None)
    parser.add_argument("--max-records-per-batch", type=int, default=None)
    parser.add_argument("--html", action="store_true", help="also write OUT/report.html")
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName("sbemu-report").getOrCreate()
    register(spark)
    kind, path = ("segments", args.segments) if args.segments else ("lmdb", args.data_dir)
    try:
        result = run(
            spark,
            source=kind,
            path=path,
            out=args.out,
            follow=args.follow,
            max_records_per_batch=args.max_records_per_batch,
            max_files_per_batch=args.max_files_per_batch,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except ReportError as exc:
        print(f"sbemu report: {exc}", file=sys.stderr)
        return 2
    print(result)
    if args.html:
        from sbemu.reports.html import write_html

        print(f"report: {write_html(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
