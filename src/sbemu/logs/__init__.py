"""The partition logs, read beside the running server: ``reader`` (read-only LMDB access, the
only lmdb importer besides ``partitions/store.py``), ``events`` (records as event columns),
``segments`` (the exported segment format), ``export`` (``sbemu export-logs``) and ``retention``
(registered readers and how far a log may be trimmed). The writer side, the log records a
broker's transaction appends, stays in ``partitions/`` (``records.py``, ``store.py``)."""
