"""Real partition logs for the Spark tests, and a pure-Python reference of the tables.

`Entity` drives sbemu.partitions.broker.PartitionBroker + PartitionStore directly (one per
partition, the router's on-disk layout), with a fake clock, so every log record is the real
thing. `reference_tables()` computes each reporting table from the raw logs without Spark.
"""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from sparkjobs.synthetic_logs import Traffic, lay_out_entity, write_logs

from builders import incoming_message
from sbemu.partitions import COMPLETE, Outcome, layout
from sbemu.partitions.broker import DLQ_SUFFIX, PartitionBroker, Route, SubQueueSettings
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.store import PartitionStore

MAIN = "main"
DLQ = MAIN + DLQ_SUFFIX
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000


def queue_settings(
    *,
    lock_ms: int = 30_000,
    max_delivery: int = 10,
    ttl_ms: int = 600_000,
    dlq_on_expiry: bool = False,
) -> dict[str, SubQueueSettings]:
    return {
        MAIN: SubQueueSettings(lock_ms, max_delivery, ttl_ms, dlq_on_expiry, DLQ),
        DLQ: SubQueueSettings(lock_ms, None, None, False, None),
    }


def topic_settings(subscriptions: list[str]) -> dict[str, SubQueueSettings]:
    out = {}
    for s in subscriptions:
        name = f"subscriptions/{s}"
        out[name] = SubQueueSettings(30_000, 10, 600_000, False, name + DLQ_SUFFIX)
        out[name + DLQ_SUFFIX] = SubQueueSettings(30_000, None, None, False, None)
    return out


def message(
    mid: str,
    *,
    session: str | None = None,
    key: str | None = None,
    ttl: int | None = None,
    scheduled: int | None = None,
) -> IncomingMessage:
    return incoming_message(
        message_id=mid,
        session_id=session,
        partition_key=key,
        ttl_ms=ttl,
        tail=b"\x00Sw\xa1\x02hi",
        size=40,
        scheduled_enqueue_time_ms=scheduled,
    )


def entity_dir(data_dir: str, namespace: str, name: str) -> str:
    return str(layout.entity_dir(Path(data_dir), namespace, name))


class Entity:
    """A queue or topic on disk: one broker + store per partition, committed synchronously."""

    def __init__(
        self,
        data_dir: str,
        namespace: str,
        name: str,
        *,
        partitions: int = 1,
        partitioned: bool = False,
        queues: dict[str, SubQueueSettings] | None = None,
    ):
        self.data_dir = data_dir
        self.namespace = namespace
        self.name = name
        self.partitions = partitions
        self.partitioned = partitioned
        self.queues = queues or queue_settings()
        self.base = lay_out_entity(data_dir, namespace, name, partitions, partitioned)
        self.brokers: list[PartitionBroker] = []
        self.open()

    def open(self) -> None:
        self.brokers = []
        for pid in range(self.partitions):
            store = PartitionStore(
                os.path.join(self.base, f"partition-{pid:02d}"), map_size=64 << 20
            )
            broker = PartitionBroker(
                store,
                namespace=self.namespace,
                entity=self.name,
                partition_id=pid,
                partitioned=self.partitioned,
                queues=self.queues,
                mark_dirty=lambda b: None,
            )
            broker.load()
            self.brokers.append(broker)

    def close(self) -> None:
        for b in self.brokers:
            b.store.close()
        self.brokers = []

    def commit(self, pid: int) -> None:
        b = self.brokers[pid]
        taken = b.take_commit()
        if taken:
            batch, callbacks = taken
            if batch:
                b.store.commit(batch)
            b.commit_done(callbacks, None)

    def send(
        self, pid: int, messages: list[IncomingMessage], now: int, targets: list[str] | None = None
    ) -> list[int]:
        routes = [[Route(t) for t in (targets or [MAIN])] for _ in messages]
        seqs = self.brokers[pid].enqueue(messages, routes, now, lambda e: None)
        self.commit(pid)
        return seqs

    def receive(self, pid: int, now: int, n: int = 1, queue: str = MAIN):
        out = []
        for _ in range(n):
            got = self.brokers[pid].take_next(queue, now, True)
            if got is None:
                break
            out.append(got)
        self.commit(pid)
        return out

    def complete(self, pid: int, lock, now: int) -> None:
        self.brokers[pid].settle(lock.key, COMPLETE, now, lambda e: None)
        self.commit(pid)

    def abandon(self, pid: int, lock, now: int) -> None:
        self.brokers[pid].settle(lock.key, Outcome.abandon(None), now, lambda e: None)
        self.commit(pid)

    def dead_letter(self, pid: int, lock, now: int, reason: str | None) -> None:
        self.brokers[pid].settle(
            lock.key, Outcome.dead_letter(reason, "test", None), now, lambda e: None
        )
        self.commit(pid)

    def tick(self, pid: int, now: int) -> None:
        self.brokers[pid].on_timer(now)
        self.commit(pid)


def bulk_logs(
    data_dir: str,
    namespace: str,
    name: str,
    *,
    partitions: int,
    per_partition: int,
    sessions: int = 7,
) -> int:
    """Write synthetic but well-formed logs straight through PartitionStore (fast, for volume).

    Each message: enqueued, delivered, then completed (or abandoned / dead-lettered for every
    7th / 11th). Returns the number of log records written.
    """

    traffic = Traffic(
        start_ms=T0,
        spacing_ms=250,
        delivered_after_ms=5,
        settled_after_ms=10,
        settle_spread_ms=90,
        dead_letter_every=11,
        abandon_every=7,
        reason="poison",
        message_id="m{pid}-{seq}",
        session_id="s{n}",
        sessions=sessions,
        session_every=1,
        size=100,
        size_spread=50,
    )
    return write_logs(
        data_dir,
        namespace,
        name,
        [per_partition] * partitions,
        traffic,
        commit_every=5000,
        map_size=1 << 30,
    )


# ================================================================================================
# The scripted scenario (exact expected values in test_spark_report.py)
# ================================================================================================

NS = "SbEmulatorNS"  # mixed case: directories are lower-case, events keep the original
A, B, T = "queue.1", "queue.partitioned", "topic.1"


def ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)


def traffic_run1(data_dir: str) -> None:
    """51 log records over three entities (expected values: test_spark_report.py)."""
    a = Entity(data_dir, NS, A, queues=queue_settings(max_delivery=2))
    a.send(
        0,
        [
            message("a0", session="s-1"),
            message("a1", session="s-1"),
            message("a2", session="s-1"),
            message("a3", session="s-2"),
            message("a4"),
            message("a5"),
        ],
        T0,
    )
    got = a.receive(0, T0 + 1000, 6)
    assert [r.message_id for r, _ in got] == ["a0", "a1", "a2", "a3", "a4", "a5"]
    locks = [lock for _, lock in got]
    for i, at in enumerate((1500, 2000, 3000, 5000)):
        a.complete(0, locks[i], T0 + at)
    a.abandon(0, locks[4], T0 + 6000)
    a.dead_letter(0, locks[5], T0 + 7000, "poison")
    ((rec, lock),) = a.receive(0, T0 + 61_000)
    assert rec.message_id == "a4"
    a.abandon(0, lock, T0 + 62_000)  # second delivery of 2: dead-lettered
    assert [r.message_id for r, _ in a.receive(0, T0 + 63_000, 2, queue=DLQ)] == ["a4", "a5"]
    a.close()  # (the DLQ receive above logged 2 more deliveries: 23 records for A)

    b = Entity(
        data_dir, NS, B, partitions=4, partitioned=True, queues=queue_settings(ttl_ms=60_000)
    )
    b.send(1, [message(f"b{i}", key="k1") for i in range(5)], T0 + 10_000)
    b.send(2, [message("c0"), message("c1")], T0 + 10_000)
    for i, (_rec, lock) in enumerate(b.receive(1, T0 + 20_000, 5)):
        b.complete(1, lock, T0 + 20_000 + i * 1000)
    ((_rec, lock),) = b.receive(2, T0 + 20_000)
    b.complete(2, lock, T0 + 25_000)
    b.tick(2, T0 + 70_000)  # c1 expires (no dead-lettering on expiry here)
    b.close()

    t = Entity(data_dir, NS, T, queues=topic_settings(["s1", "s2"]))
    t.send(
        0,
        [message("t0"), message("t1")],
        T0 + 30_000,
        targets=["subscriptions/s1", "subscriptions/s2"],
    )
    for _rec, lock in t.receive(0, T0 + 30_500, 2, queue="subscriptions/s1"):
        t.complete(0, lock, T0 + 31_000)
    t.close()


def traffic_run2(data_dir: str) -> None:
    """8 more records on A: 2 sent + received + completed, 1 scheduled then activated."""
    a = Entity(data_dir, NS, A, queues=queue_settings(max_delivery=2))
    a.send(0, [message("a6", session="s-1"), message("a7")], T0 + 2 * MINUTE)
    a.send(0, [message("a8", scheduled=T0 + 3 * MINUTE)], T0 + 2 * MINUTE)
    got = a.receive(0, T0 + 2 * MINUTE, 2)
    assert [r.message_id for r, _ in got] == ["a6", "a7"]
    a.complete(0, got[0][1], T0 + 2 * MINUTE + 1000)
    a.complete(0, got[1][1], T0 + 2 * MINUTE + 2000)
    a.tick(0, T0 + 3 * MINUTE)  # a8 activated
    a.close()


# ================================================================================================
# Reference tables (pure Python) from raw log records
# ================================================================================================


def all_records(data_dir: str) -> list[dict]:
    """Every log record under a data directory (read through sbemu.logs.reader)."""
    from sbemu.logs import reader as reporting
    from sbemu.partitions.records import decode_log

    out = []
    for part in reporting.discover_partitions(data_dir):
        for chunk in reporting.iter_log(part.path, 0, reporting.log_end(part.path)):
            out.extend(decode_log(v) for v in chunk)
    reporting.close_all()
    return out


def _percentile(values: list[int], p: float) -> float:
    xs = sorted(values)
    pos = p * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)


def reference_tables(records: list[dict], layout: list[dict] | None = None) -> dict[str, set]:
    """Each table as a set of tuples, column order as in sparkjobs.tables (floats rounded)."""
    traffic_events = ("enqueued", "delivered", "completed", "abandoned", "deadlettered", "expired")
    # sent, scheduled, then the events (sbemu.reports.tables.TRAFFIC_COUNTS)
    traffic: dict = defaultdict(lambda: [0] * 8)
    seen_seq: set = set()  # (ns, entity, partition, seq) counted as sent
    copy_after: tuple | None = (
        None  # the record after a topic's activation carries its copies' number
    )
    copy_seq: set = set()
    reasons: dict = defaultdict(int)
    lat: dict = defaultdict(list)
    sent: dict = defaultdict(set)
    parts_seen: dict = defaultdict(set)
    sess: dict = {}
    for r in records:
        ns, ent, part, ev = r["ns"], r["entity"], r["partition"], r["event"]
        parts_seen[(ns, ent)].add(part)
        minute = _ts(r["event_ms"] - r["event_ms"] % 60_000)
        if copy_after == (ns, ent, part) and ev == "enqueued":
            copy_seq.add((ns, ent, part, r["seq"]))
        copy_after = (ns, ent, part) if ev == "activated" and r["queue"] == "$scheduled" else None
        if ev in traffic_events or ev == "scheduled":
            row = traffic[(ns, ent, part, minute)]
            key = (ns, ent, part, r["seq"])
            if ev in ("enqueued", "scheduled") and key not in seen_seq and key not in copy_seq:
                seen_seq.add(key)
                row[0] += 1
            if ev == "scheduled":
                row[1] += 1
            else:
                row[2 + traffic_events.index(ev)] += 1
        if ev == "deadlettered":
            reasons[(ns, ent, r["reason"])] += 1
        if ev == "completed" and not r["queue"].endswith(DLQ_SUFFIX):
            lat[(ns, ent, part)].append(r["event_ms"] - r["enqueued_ms"])
        if ev in ("enqueued", "scheduled"):
            sent[(ns, ent, part)].add(r["seq"])
        if r["session_id"] is not None:
            k = (ns, ent, r["session_id"])
            s = sess.setdefault(k, [set(), r["event_ms"], r["event_ms"]])
            if ev in ("enqueued", "scheduled"):
                s[0].add(r["seq"])
            s[1] = min(s[1], r["event_ms"])
            s[2] = max(s[2], r["event_ms"])
    skew = set()
    counts = {(x["ns_key"], x["entity_key"]): x["partition_count"] for x in (layout or [])}
    for (ns, ent), seen in parts_seen.items():
        n = counts.get((ns.lower(), ent.lower()))
        parts = seen | set(range(n)) if n else seen
        per = [len(sent.get((ns, ent, p), ())) for p in sorted(parts)]
        mean = sum(per) / len(per)
        skew.add(
            (
                ns,
                ent,
                len(per),
                sum(per),
                min(per),
                max(per),
                round(mean, 6),
                round(max(per) / mean, 6) if mean > 0 else None,
                tuple(per),
            )
        )
    return {
        "traffic_by_minute": {(*k, *v) for k, v in traffic.items()},
        "deadletter_reasons": {(*k, v) for k, v in reasons.items()},
        "latency": {
            (
                *k,
                len(v),
                round(_percentile(v, 0.5), 3),
                round(_percentile(v, 0.95), 3),
                round(_percentile(v, 0.99), 3),
                max(v),
            )
            for k, v in lat.items()
        },
        "partition_skew": skew,
        "sessions": {(*k, len(v[0]), _ts(v[1]), _ts(v[2])) for k, v in sess.items()},
    }


def spark_tables(spark, out: str) -> dict[str, set]:
    """The Parquet tables of a report directory, in reference_tables() form."""
    from sparkjobs.report import read_table

    from sbemu.reports.tables import TABLES

    result = {}
    for name in TABLES:
        rows = read_table(spark, out, name).collect()
        tuples = set()
        for row in rows:
            vals = []
            for v in row:
                if isinstance(v, float):
                    v = round(v, 6)
                elif isinstance(v, list):
                    v = tuple(v)
                vals.append(v)
            tuples.add(tuple(vals))
        result[name] = tuples
    return result
