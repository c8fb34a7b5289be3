"""Reports on the partition logs, without Spark: ``tables`` (the reporting tables on disk and
their per-batch merges, pyarrow) and ``html`` (``report.html``). The Spark job that fills the
tables is ``sparkjobs/``, reached through the ``sbemu.reports`` entry point."""
