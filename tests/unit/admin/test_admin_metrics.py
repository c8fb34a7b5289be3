"""Prometheus text exposition and the counters and rates behind it."""

from __future__ import annotations

import math

from sbemu.admin.dashboard import RateHistory
from sbemu.admin.metrics import Family, escape_label, format_value, render
from sbemu.partitions.records import LogEvent
from sbemu.partitions.stats import PartitionStats, ServerStats, totals


def test_render_text_format() -> None:
    fam = Family(
        "sbemu_incoming_messages_total", "counter", "Messages accepted (IncomingMessages)."
    )
    fam.add(3, namespace="ns", entity="orders", partition="0")
    fam.add(0, namespace="ns", entity='we"ird\\name\nx', partition="15")
    up = Family("sbemu_uptime_seconds", "gauge", "Seconds since start.")
    up.add(12.5)
    text = render([fam, up])
    assert text == (
        "# HELP sbemu_incoming_messages_total Messages accepted (IncomingMessages).\n"
        "# TYPE sbemu_incoming_messages_total counter\n"
        'sbemu_incoming_messages_total{namespace="ns",entity="orders",partition="0"} 3\n'
        'sbemu_incoming_messages_total{namespace="ns",entity="we\\"ird\\\\name\\nx",partition="15"} 0\n'
        "# HELP sbemu_uptime_seconds Seconds since start.\n"
        "# TYPE sbemu_uptime_seconds gauge\n"
        "sbemu_uptime_seconds 12.5\n"
    )


def test_values_and_escaping() -> None:
    assert format_value(7) == "7"
    assert format_value(2.0) == "2"
    assert format_value(0.25) == "0.25"
    assert format_value(True) == "1"
    assert format_value(math.nan) == "NaN"
    assert format_value(math.inf) == "+Inf"
    assert format_value(-math.inf) == "-Inf"
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_partition_counters_sum_per_entity() -> None:
    a, b = PartitionStats(), PartitionStats()
    a.incoming += 5
    a.incoming_bytes += 500
    a.outgoing_bytes += 200
    for event in (LogEvent.DELIVERED, LogEvent.DELIVERED, LogEvent.COMPLETED, LogEvent.ABANDONED):
        a.count(event)
    b.incoming += 2
    b.incoming_bytes += 40
    b.count(LogEvent.DEADLETTERED)
    b.count(LogEvent.ENQUEUED)  # not a reported rate
    assert totals([a, b]) == {
        "incoming": 7,
        "outgoing": 2,
        "completed": 1,
        "abandoned": 1,
        "deadlettered": 1,
        "incoming_bytes": 540,
        "outgoing_bytes": 200,
    }


def test_server_stats_classify_errors() -> None:
    s = ServerStats()
    s.connection_opened("NS")
    s.connection_closed("ns")
    s.error("ns", "com.microsoft:server-busy")
    s.error("ns", "amqp:internal-error")
    s.error("ns", "com.microsoft:message-lock-lost")
    s.error("ns", "amqp:not-found")
    assert s.connections_opened == {"ns": 1} and s.connections_closed == {"ns": 1}
    assert s.throttled_requests == {"ns": 1}
    assert s.server_errors == {"ns": 1}
    assert s.user_errors == {"ns": 2}


def test_rate_history_is_per_second_and_bounded() -> None:
    h = RateHistory(capacity=3)
    assert h.sample(1_000, {"incoming": 0}) is None
    p = h.sample(3_000, {"incoming": 10, "outgoing": 4})
    assert p == {
        "t": 3_000,
        "incoming": 5.0,
        "outgoing": 2.0,
        "completed": 0.0,
        "deadlettered": 0.0,
        "abandoned": 0.0,
    }
    assert h.sample(3_000, {"incoming": 99}) is None  # no time passed: no point
    for t in (4_000, 5_000, 6_000):
        h.sample(t, {"incoming": 100})
    assert len(h.points) == 3 and h.points[-1]["t"] == 6_000
