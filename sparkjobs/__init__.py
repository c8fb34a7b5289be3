"""Spark jobs of sbemu: the only package that imports pyspark.

- ``sparkjobs.source``: the ``sbemu`` Python data source (batch + streaming) over the LMDB
  partition logs, and the reader of the segment files written by ``sbemu export-logs``;
  both give the same event stream (``EVENTS_SCHEMA``).
- ``sparkjobs.report``: the job behind ``sbemu report`` (each micro-batch writes its events
  and merges its own deltas into the tables, exactly once through a checkpoint).
- ``sparkjobs.launch``: what ``sbemu report`` runs (loaded by name from sbemu.cli).
- ``sparkjobs.submit``: the spark-submit entry point for clusters.
- ``sparkjobs.session``: a local SparkSession set up for all of the above.
- ``sparkjobs.bench``: events/s, time per batch, lag under proton traffic.
- ``sparkjobs.synthetic_logs``: synthetic partition logs for the benchmark and the Spark
  tests (no pyspark).

See sparkjobs/README.md. Importing this package does not import pyspark; the modules do.
"""
