"""The server process's memory and CPU, for the dashboard's overview (RabbitMQ's management UI
shows both on its overview).

``ProcessUsage.sample(now)`` returns the resident set size in bytes (Linux ``/proc/self/statm``;
elsewhere the peak from ``getrusage``, said so) and the CPU used since the previous sample as a
percentage of one core (user + system time; 100 = one core busy). ``now`` is monotonic seconds
from the caller; the readers are parameters so a test can give its own.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from typing import Any

__all__ = ["ProcessUsage"]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss() -> tuple[int, bool]:
    """(bytes resident now, True) from /proc; else (peak resident bytes, False)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE"), True
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        return peak * 1024, False


class ProcessUsage:
    """Memory now and CPU between two samples (see the module docstring)."""

    def __init__(
        self,
        cpu_seconds: Callable[[], float] = _cpu_seconds,
        rss: Callable[[], tuple[int, bool]] = _rss,
    ) -> None:
        self._cpu_seconds = cpu_seconds
        self._rss = rss
        self._last: tuple[float, float] | None = None  # (now, cpu seconds) at the last sample

    def sample(self, now: float) -> dict[str, Any]:
        """``rss_bytes``, ``rss_is_peak`` and ``cpu_percent`` (None on the first sample)."""
        cpu = self._cpu_seconds()
        percent = None
        if self._last is not None and now > self._last[0]:
            percent = round(100.0 * (cpu - self._last[1]) / (now - self._last[0]), 1)
        self._last = (now, cpu)
        rss, current = self._rss()
        return {"rss_bytes": rss, "rss_is_peak": not current, "cpu_percent": percent}
