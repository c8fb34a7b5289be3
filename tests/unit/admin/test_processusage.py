"""The dashboard's memory and CPU figures (issue 33, item 5)."""

from __future__ import annotations

from sbemu.admin.processusage import ProcessUsage


def test_cpu_is_the_share_of_one_core_between_samples() -> None:
    cpu = iter([10.0, 10.5, 12.5])
    usage = ProcessUsage(cpu_seconds=lambda: next(cpu), rss=lambda: (50 << 20, True))
    first = usage.sample(100.0)
    assert first == {"rss_bytes": 50 << 20, "rss_is_peak": False, "cpu_percent": None}
    assert usage.sample(101.0)["cpu_percent"] == 50.0  # half a core for a second
    assert usage.sample(102.0)["cpu_percent"] == 200.0  # two cores busy


def test_the_real_process_reports_its_memory() -> None:
    got = ProcessUsage().sample(1.0)
    assert got["rss_bytes"] > 1 << 20 and got["cpu_percent"] is None
