"""A SparkSession set up for sbemu's jobs (local by default).

Pitfalls handled here:
- Python workers must run the interpreter that runs us (it has lmdb, msgpack, pyarrow and
  sbemu): PYSPARK_PYTHON is set to sys.executable before the JVM starts;
- the workers import ``sparkjobs`` (the data source class is pickled by reference): it is
  installed with sbemu (pip install -e '.[spark]'), so the same interpreter finds it; on a
  cluster ship it with ``--py-files`` (and install sbemu + pyarrow there);
- the UI is off and log4j is quiet (sparkjobs/log4j2.properties);
- a local driver JVM compiles with C1 only (driver_java_options) and maps the class-data-
  sharing archive of Spark's classes when ``python -m sparkjobs.cds`` built it;
- a local session's Python processes import pyspark from the installed package, not from the
  pyspark.zip Spark puts first on their path (no bytecode cache in a zip: ~1 CPU-s per
  process): sparkjobs/pythonpath/sitecustomize.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

PACKAGE_DIR = Path(__file__).resolve().parent
LOG4J = PACKAGE_DIR / "log4j2.properties"
STARTUP_HOOK_DIR = PACKAGE_DIR / "pythonpath"  # sitecustomize.py: pyspark without its zip


ENV_CDS_DUMP = "SBEMU_SPARK_CDS_DUMP"  # sparkjobs.cds sets it in its child: dump the archive to this path at exit


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def cds_archive_path() -> Path | None:
    """Where the archive for this java and this pyspark lives (None: no java found, or
    SBEMU_SPARK_CDS=0). Under $XDG_CACHE_HOME/sbemu (default ~/.cache/sbemu)."""
    if os.environ.get("SBEMU_SPARK_CDS", "1") == "0":
        return None
    java = _java()
    if java is None:
        return None
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    key = hashlib.sha256()
    st = os.stat(java)
    key.update(f"{java}\0{st.st_size}\0{st.st_mtime_ns}\0{pyspark.__version__}\0{jars}\0".encode())
    try:
        for name in sorted(os.listdir(jars)):
            key.update(name.encode() + b"\0")
    except OSError:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sbemu"
    return cache / f"spark-driver-{key.hexdigest()[:16]}.jsa"


def cds_java_options() -> list[str]:
    """The driver JVM's options for the archive: dump it (in the child of `build()`), use it
    when it exists, or nothing."""
    dump = os.environ.get(ENV_CDS_DUMP)
    if dump:
        return [f"-XX:ArchiveClassesAtExit={dump}"]
    path = cds_archive_path()
    if path is None or not path.is_file():
        return []
    # an archive this JVM cannot use (it says why on the cds log) is skipped silently
    return [
        f"-XX:SharedArchiveFile={path}",
        "-Xshare:auto",
        "-Xlog:cds=off",
        "-Xlog:cds+dynamic=off",
    ]


def prepare_environment() -> None:
    """Environment the JVM and its Python workers inherit; call before the JVM starts."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def driver_java_options(master: str) -> list[str]:
    """The driver JVM's options: our log4j config and, in local mode, C1-only JIT.

    With the LMDB source the events are decoded and written in Python (pyarrow), so the local
    JVM only schedules; its C2 compiler threads were then most of its CPU (10.8 of ~23 CPU-s
    over a 600k-event run, C1 2.7). `-XX:TieredStopAtLevel=1` cut the JVM's CPU per batch
    from ~0.9 to ~0.4 s and the first batch from ~16 s to ~7 s under the same load. A cluster's
    executors (segments: Spark's Parquet reader and writer do the per-event work) keep the
    full JIT. SBEMU_SPARK_DRIVER_JAVA_OPTIONS replaces the JIT choice. A local driver also
    maps the class-data-sharing archive of sparkjobs.cds when it was built."""
    options = [f"-Dlog4j2.configurationFile=file:{LOG4J}"]
    extra = os.environ.get("SBEMU_SPARK_DRIVER_JAVA_OPTIONS")
    if extra is not None:
        options.append(extra)
    elif master.startswith("local"):
        options.append("-XX:TieredStopAtLevel=1")
    if master.startswith("local"):
        options.extend(cds_java_options())  # Spark's classes pre-parsed (sparkjobs.cds)
    return options


def build_session(
    master: str | None = None,
    *,
    app_name: str = "sbemu-report",
    shuffle_partitions: int | None = None,
    conf: dict[str, Any] | None = None,
) -> SparkSession:
    """Create (or reuse) the session and register the ``sbemu`` data source on it."""
    prepare_environment()
    master = master or "local[*]"
    cores = os.cpu_count() or 2
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or max(2, cores)))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", " ".join(driver_java_options(master)))
        .config("spark.executor.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J}")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, str(value))
    saved = os.environ.get("PYTHONPATH")
    if master.startswith("local"):
        # the JVM hands its PYTHONPATH on to the Python processes it starts (after
        # pyspark.zip): the hook there imports pyspark from the package (pythonpath/)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(STARTUP_HOOK_DIR), saved) if p)
    try:
        spark = builder.getOrCreate()
    finally:  # only the JVM needs it
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Register the ``sbemu`` and ``sbemu_event_files`` data sources on a session (idempotent)."""
    from sparkjobs.source import SbemuDataSource, SbemuEventFilesSource

    spark.dataSource.register(SbemuDataSource)
    spark.dataSource.register(SbemuEventFilesSource)
