"""How many partition-log events per second the reporting job processes.

    .venv/bin/python -m sparkjobs.bench [--events 1000000] [--partitions 4] [--master local[*]]
                                        [--max-records-per-batch N] [--keep DIR]

Writes `--events` well-formed log records (enqueued / delivered / completed|abandoned|
deadlettered per message) straight into fresh partition stores with PartitionStore (as the
broker would, in batched transactions), then runs the job twice from scratch:

  read    spark.read.format("sbemu") -> count                 (the data source alone)
  stream  the streaming run into OUT/events (Parquet, checkpointed), Trigger.AvailableNow
  tables  rebuilding the aggregate tables from OUT/events

and prints events/s for each phase. The JVM start is excluded (reported separately).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from sbemu.partitions.records import LogEvent, MessageRecord, MessageState, encode_log
from sbemu.partitions.store import PartitionStore, WriteBatch

T0 = 1_767_225_600_000


def generate(data_dir: str, events: int, partitions: int, *, namespace: str = "benchns",
             entity: str = "bench.queue") -> int:
    """Write `events` log records spread evenly over `partitions`; returns how many."""
    base = os.path.join(data_dir, namespace, entity)
    os.makedirs(base, exist_ok=True)
    with open(os.path.join(base, "entity.json"), "w") as f:
        json.dump({"partition_count": partitions, "partitioned": partitions > 1}, f)
    written = 0
    for pid in range(partitions):
        target = events // partitions + (1 if pid < events % partitions else 0)
        store = PartitionStore(
            os.path.join(base, f"partition-{pid:02d}"), map_size=max(64 << 20, target * 600),
            durable=False,
        )
        batch, offset, seq = WriteBatch(), 0, 0
        while offset < target:
            seq += 1
            now = T0 + seq * 3
            rec = MessageRecord(
                sequence_number=(pid << 48) | seq, enqueued_time_ms=now,
                state=MessageState.ACTIVE, delivery_count=0, message_id=f"msg-{pid}-{seq}",
                session_id=f"session-{seq % 100}" if seq % 3 == 0 else None,
                partition_key=None, ttl_ms=None, expires_at_ms=None, durable=True, priority=None,
                annotation_count=0, annotations=b"", tail=b"", size=200 + seq % 300,
            )
            last = (LogEvent.DEADLETTERED if seq % 50 == 0 else
                    LogEvent.ABANDONED if seq % 20 == 0 else LogEvent.COMPLETED)
            for event, at in ((LogEvent.ENQUEUED, now), (LogEvent.DELIVERED, now + 2),
                              (last, now + 5 + seq % 200)):
                if offset >= target:
                    break
                batch.log.append((offset, encode_log(
                    namespace=namespace, entity=entity, queue="main", partition=pid,
                    offset=offset, event=event, record=rec, event_ms=at,
                    reason="bench" if event == LogEvent.DEADLETTERED else None)))
                offset += 1
            if len(batch.log) >= 20_000:
                batch.meta["next_log_offset"] = offset
                store.commit(batch)
                batch = WriteBatch()
        if batch:
            batch.meta["next_log_offset"] = offset
            store.commit(batch)
        store.close()
        written += offset
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparkjobs.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--max-records-per-batch", type=int, default=None)
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: temp dir)")
    args = p.parse_args(argv)

    work = args.keep or tempfile.mkdtemp(prefix="sbemu-bench-")
    data, out = os.path.join(work, "data"), os.path.join(work, "reports")
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    t = time.monotonic()
    n = generate(data, args.events, args.partitions)
    print(f"generated {n:,} log records in {args.partitions} partition(s) "
          f"in {time.monotonic() - t:.1f}s ({work})")

    from sparkjobs import report
    from sparkjobs.session import build_session

    t = time.monotonic()
    spark = build_session(args.master, app_name="sbemu-bench")
    print(f"spark started in {time.monotonic() - t:.1f}s "
          f"({spark.sparkContext.master}, {spark.sparkContext.defaultParallelism} cores)")
    try:
        t = time.monotonic()
        counted = spark.read.format("sbemu").option("path", data).load().count()
        read_s = time.monotonic() - t
        assert counted == n, (counted, n)
        result = report.run(spark, source="lmdb", path=data, out=out,
                            max_records_per_batch=args.max_records_per_batch)
        assert result.total_events == n, (result.total_events, n)
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"read    {n:>10,} events in {read_s:6.1f}s = {n / read_s:>10,.0f} events/s")
    print(f"stream  {n:>10,} events in {result.stream_seconds:6.1f}s = "
          f"{n / result.stream_seconds:>10,.0f} events/s ({result.batches} batch(es))")
    print(f"tables  {n:>10,} events in {result.tables_seconds:6.1f}s = "
          f"{n / result.tables_seconds:>10,.0f} events/s")
    total = result.stream_seconds + result.tables_seconds
    print(f"report  {n:>10,} events in {total:6.1f}s = {n / total:>10,.0f} events/s end to end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
