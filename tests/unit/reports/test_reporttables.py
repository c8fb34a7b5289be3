"""The reporting tables' per-batch merges (sbemu.reports.tables) and the HTML report, no Spark."""

from __future__ import annotations

import ast
import os
import random
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from sbemu.reports import html as reporthtml  # noqa: E402
from sbemu.reports.tables import (  # noqa: E402
    TRAFFIC_COUNTS,
    TableStore,
    percentiles,
    read_rows,
    summary_rows,
)

NS, Q = "ns1", "orders"
M0 = datetime(2026, 1, 1, 23, 59, tzinfo=UTC)
M1 = datetime(2026, 1, 2, 0, 0, tzinfo=UTC)  # the next day: another traffic file


def spark_percentile(values: list[int], p: float) -> float:
    xs = sorted(values)
    pos = p * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def test_percentiles_from_a_histogram_are_exact():
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 101, 5000):
        values = [rng.choice([0, 1, 5, 17, 250, 1000, rng.randint(0, 3000)]) for _ in range(n)]
        hist: dict[int, int] = {}
        for v in values:
            hist[v] = hist.get(v, 0) + 1
        ps = (0.0, 0.5, 0.95, 0.99, 1.0)
        assert percentiles(hist, ps) == pytest.approx([spark_percentile(values, p) for p in ps])


def traffic(minute, partition, **counts):
    row = {"namespace": NS, "entity": Q, "partition": partition, "minute": minute}
    for name in TRAFFIC_COUNTS:
        row[name] = counts.get(name, 0)
    return row


def batch(store: TableStore, batch_id: int, *, seq_from: int, seq_to: int, minute) -> None:
    """Messages seq_from..seq_to sent to partition 1 (a session) and completed at 100 ms."""
    prev = store.partition_state(batch_id)
    new = [s for s in range(seq_from, seq_to + 1) if s > prev.get((NS, Q, 1), -1)]
    store.apply(
        batch_id,
        events=2 * (seq_to - seq_from + 1),
        traffic=[
            traffic(minute, 1, enqueued=seq_to - seq_from + 1, completed=seq_to - seq_from + 1)
        ],
        reasons=[{"namespace": NS, "entity": Q, "reason": "poison", "count": 1}],
        latency=[
            {
                "namespace": NS,
                "entity": Q,
                "partition": 1,
                "latency_ms": 100,
                "count": seq_to - seq_from + 1,
            }
        ],
        partitions=[
            {
                "namespace": NS,
                "entity": Q,
                "partition": 1,
                "new_messages": len(new),
                "max_seq": seq_to,
                "events": 0,
            }
        ],
        sessions=[
            {
                "namespace": NS,
                "entity": Q,
                "session_id": "s-1",
                "messages": len(new),
                "first_time": minute,
                "last_time": minute,
            }
        ],
        layout={(NS, Q): 4},
    )


def test_batches_merge_once_even_when_a_batch_is_replayed_after_a_crash(tmp_path):
    out = str(tmp_path / "out")
    store = TableStore(out)
    batch(store, 0, seq_from=1, seq_to=10, minute=M0)
    # A crash in batch 1 after some files were replaced: keep a copy of the session and
    # traffic files as they were before it, then "crash" by restoring them after the batch.
    sessions = Path(store.path("sessions", NS, Q, "bucket-00")).parent
    saved = tmp_path / "saved"
    shutil.copytree(sessions, saved)
    batch(store, 1, seq_from=10, seq_to=15, minute=M1)  # seq 10 again: a copy, not a message
    shutil.rmtree(sessions)
    shutil.copytree(saved, sessions)
    batch(store, 1, seq_from=10, seq_to=15, minute=M1)  # Spark re-runs batch 1
    batch(store, 1, seq_from=10, seq_to=15, minute=M1)  # and once more: no change

    days = sorted(os.listdir(Path(store.path("traffic_by_minute", NS, Q, "x")).parent))
    assert days == ["2026-01-01.parquet", "2026-01-02.parquet"]
    by_minute = {r["minute"]: r["enqueued"] for r in read_rows(out, "traffic_by_minute")}
    assert by_minute == {M0: 10, M1: 6}
    assert [r["count"] for r in read_rows(out, "deadletter_reasons")] == [2]
    (skew,) = read_rows(out, "partition_skew")
    assert skew["messages_per_partition"] == [0, 15, 0, 0] and skew["partitions"] == 4
    assert skew["max_over_mean"] == pytest.approx(15 / 3.75)
    (sess,) = read_rows(out, "sessions")
    assert (sess["messages"], sess["first_time"], sess["last_time"]) == (15, M0, M1)
    (lat,) = read_rows(out, "latency")
    assert (lat["completed"], lat["p50_ms"], lat["max_ms"]) == (16, 100.0, 100)
    assert store.totals() == {"batch": 1, "events": 32}
    (row,) = summary_rows(out)
    assert (row["enqueued"], row["completed"], row["partitions"], row["sessions"]) == (16, 16, 4, 1)


def test_html_report_is_self_contained_with_charts(tmp_path):
    out = str(tmp_path / "out")
    store = TableStore(out)
    batch(store, 0, seq_from=1, seq_to=10, minute=M0)
    batch(store, 1, seq_from=11, seq_to=12, minute=M1)
    path = reporthtml.write_html(out, now=M1)
    page = Path(path).read_text()
    assert path == os.path.join(out, "report.html")
    assert page.startswith("<!doctype html>") and page.count("<svg") == 4
    assert "<polyline" in page  # traffic over two minutes
    assert "partition 1: 12 message(s)" in page  # the heatmap cell of the busy partition
    assert "poison" in page and "p95" in page
    for external in ("http://", "https://", "<script", "<link", "src="):
        assert external not in page
    assert reporthtml.latest_report(str(tmp_path)) == path
    assert reporthtml.latest_report(out) == path
    assert reporthtml.latest_report(str(tmp_path / "none")) is None


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_sbemu_never_imports_sparkjobs_or_pyspark():
    """Dependencies point one way: sparkjobs -> sbemu (issue 16 step 1)."""
    src = Path(__file__).resolve().parents[3] / "src" / "sbemu"
    offenders = {
        str(p.relative_to(src)): sorted(
            n for n in _imports(p) if n.split(".")[0] in ("sparkjobs", "pyspark")
        )
        for p in src.rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    lmdb_users = {str(p.relative_to(src)) for p in src.rglob("*.py") if "lmdb" in _imports(p)}
    # issue 25: lmdb only in the store and the log reader (also an import-linter contract)
    assert lmdb_users <= {"partitions/store.py", "logs/reader.py"}, lmdb_users


def test_report_command_parses_without_loading_spark():
    code = (
        "import sys; from sbemu.cli import build_parser; "
        "a = build_parser().parse_args(['report', '--html', '--out', 'x']); "
        "assert a.html and a.out == 'x'; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'sparkjobs')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_batch_deltas_from_events():
    import pyarrow as pa

    from sbemu.reports.tables import batch_deltas

    ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z

    offsets = iter(range(1000))

    def ev(part, offset_ms, event, seq, *, queue="main", session=None, enq=None, reason=None):
        return {
            "offset": next(offsets),
            "namespace": NS,
            "entity": Q,
            "partition": part,
            "event": event,
            "timestamp": ms + offset_ms,
            "queue": queue,
            "sequence_number": seq,
            "session_id": session,
            "enqueued_time": enq,
            "reason": reason,
        }

    rows = [
        ev(0, 0, "enqueued", 5, queue="subscriptions/a"),  # 5 is a copy counted last batch
        ev(0, 0, "enqueued", 6, queue="subscriptions/a", session="s"),
        ev(0, 0, "enqueued", 6, queue="subscriptions/b", session="s"),  # copy of 6
        ev(0, 61_000, "completed", 6, queue="subscriptions/a", session="s", enq=ms),
        ev(0, 62_000, "completed", 7, queue="main/$deadletterqueue", enq=ms),  # not latency
        ev(1, 500, "deadlettered", 9),  # no reason
        ev(1, 700, "scheduled", 10, queue="$scheduled"),
        # 10 comes due: its copies get the new number 11 (not a new send: 10 counted it)
        ev(1, 800, "activated", 10, queue="$scheduled"),
        ev(1, 800, "enqueued", 11, queue="subscriptions/a"),
        ev(1, 800, "enqueued", 11, queue="subscriptions/b"),
    ]
    ts = pa.timestamp("ms")  # Spark may write INT96 or micros: any unit, no zone
    table = pa.table(
        {
            "namespace": pa.array([r["namespace"] for r in rows]),
            "entity": pa.array([r["entity"] for r in rows]),
            "partition": pa.array([r["partition"] for r in rows], pa.int32()),
            "timestamp": pa.array([r["timestamp"] for r in rows], ts),
            "event": pa.array([r["event"] for r in rows]),
            "queue": pa.array([r["queue"] for r in rows]),
            "sequence_number": pa.array([r["sequence_number"] for r in rows], pa.int64()),
            "session_id": pa.array([r["session_id"] for r in rows], pa.string()),
            "enqueued_time": pa.array([r["enqueued_time"] for r in rows], ts),
            "reason": pa.array([r["reason"] for r in rows], pa.string()),
            "offset": pa.array([r["offset"] for r in rows], pa.int64()),
        }
    )
    d = batch_deltas(table, {(NS, Q, 0): 5})
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    t1 = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    traffic = {
        (r["partition"], r["minute"]): (
            r["sent"],
            r["scheduled"],
            r["enqueued"],
            r["completed"],
            r["deadlettered"],
        )
        for r in d["traffic"]
    }
    # sent as /metrics counts it: once per message (6, not its two subscription copies, nor 5
    # counted last batch), scheduled ones included (10); enqueued: the copies (fan-out)
    assert traffic == {
        (0, t0): (1, 0, 3, 0, 0),
        (0, t1): (0, 0, 0, 2, 0),
        (1, t0): (1, 1, 2, 0, 1),
    }
    assert d["reasons"] == [{"namespace": NS, "entity": Q, "reason": None, "count": 1}]
    assert d["latency"] == [
        {"namespace": NS, "entity": Q, "partition": 0, "latency_ms": 61_000, "count": 1}
    ]
    parts = {
        r["partition"]: (r["events"], r["new_messages"], r["max_seq"]) for r in d["partitions"]
    }
    assert parts == {0: (5, 1, 6), 1: (5, 2, 11)}
    (sess,) = d["sessions"]
    assert (sess["messages"], sess["first_time"], sess["last_time"]) == (
        1,
        t0,
        datetime(2026, 1, 1, 0, 1, 1, tzinfo=UTC),
    )
