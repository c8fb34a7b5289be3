"""A class-data-sharing archive for the local driver JVM: Spark's classes, pre-parsed.

A local report run loads some 20,000 classes after the JVM has started (streaming, the
Python data source runners, Hadoop's file system, codegen), each parsed and verified on first
use. JDK 13+ can dump the classes a run loaded into an archive (``-XX:ArchiveClassesAtExit``)
that later JVMs map instead (``-XX:SharedArchiveFile``): on a 1M-event report run the driver
JVM then used 4.2-4.3 CPU-s instead of 6.4-6.9.

    .venv/bin/python -m sparkjobs.cds          # make install-spark runs it; idempotent

runs a small report job in a child process whose JVM dumps the archive when it exits, and
renames it into place once complete. `sparkjobs.session.cds_archive_path()` names the archive after what it depends
on (the java binary, the pyspark version and its jars), so another JDK or pyspark simply has
no archive yet; `sparkjobs.session.driver_java_options` uses it only when it exists. Without
it everything works the same, only slower to warm up. ``SBEMU_SPARK_CDS=0`` turns it off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sparkjobs.session import ENV_CDS_DUMP, build_session, cds_archive_path


def _workload() -> None:
    """A small report run (the classes a real one loads), in the child whose JVM dumps."""
    from sparkjobs import bench, report

    work = tempfile.mkdtemp(prefix="sbemu-cds-")
    try:
        spark = build_session("local[2]", app_name="sbemu-cds")
        data, out = os.path.join(work, "data"), os.path.join(work, "out")
        bench.generate(data, 3000, 2)
        report.run(spark, source="lmdb", path=data, out=out, max_records_per_batch=1000)
        report.read_table(spark, out, "traffic_by_minute").count()
        proc = getattr(spark.sparkContext._gateway, "proc", None)  # the JVM pyspark started
        print(proc.pid if proc is not None else "", flush=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build(force: bool = False) -> Path | None:
    """Create the archive unless it exists; returns its path (None: not possible here)."""
    path = cds_archive_path()
    if path is None or (path.is_file() and not force):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    env = {**os.environ, ENV_CDS_DUMP: str(tmp)}
    try:
        child = subprocess.run(
            [sys.executable, "-c", "from sparkjobs.cds import _workload; _workload()"],
            env=env,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        # the JVM outlives its Python driver for the dump: wait until it has exited
        jvm = child.stdout.strip().splitlines()[-1:] or [""]
        deadline = time.monotonic() + 900
        while (
            jvm[0].isdigit() and os.path.exists(f"/proc/{jvm[0]}") and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        if not tmp.is_file() or tmp.stat().st_size == 0:
            return None
        os.replace(tmp, path)  # complete: the JVM that wrote it has exited
        return path
    finally:
        tmp.unlink(missing_ok=True)


if __name__ == "__main__":
    built = build(force="--force" in sys.argv)
    print(f"sparkjobs.cds: {built or 'no archive (no java, or SBEMU_SPARK_CDS=0)'}")
