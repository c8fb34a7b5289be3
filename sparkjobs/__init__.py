"""Spark jobs of sbemu: the only package that imports pyspark.

- ``sparkjobs.source``: the ``sbemu`` Python data source (batch + streaming) over the LMDB
  partition logs, and the reader of the segment files written by ``sbemu export-logs``;
  both give the same event stream (``EVENTS_SCHEMA``).
- ``sparkjobs.tables``: ``build_tables(events_df)``, the reporting tables of issue 3.
- ``sparkjobs.report``: the job behind ``sbemu report`` (stream into ``events``, exactly once
  through a checkpoint, then rebuild the aggregate tables in batch).
- ``sparkjobs.session``: a local SparkSession set up for all of the above.
- ``sparkjobs.bench``: events/s the job processes.

See sparkjobs/README.md. Importing this package does not import pyspark; the modules do.
"""
