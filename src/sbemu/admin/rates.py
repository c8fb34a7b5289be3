"""Per-entity and per-partition message and byte rates for the dashboard, as RabbitMQ's UI shows
them.

The brokers keep plain monotonic counters (partitions/stats.py, no clock there). The dashboard's
sampler calls :meth:`PartitionRates.sample` once a second with the server's clock reading and
every partition's totals (RATE_FIELDS: messages in and out, their bytes in and out); a rate is
the growth of a counter over the last RATE_WINDOW_S seconds of samples divided by the time
between them (messages or bytes per second). So a burst shows for a few seconds and an idle
entity reads 0 within RATE_WINDOW_S.

Pure: `now_ms` comes in; nothing here reads a clock. Memory is bounded by the partitions that
exist: a partition missing from a sample (its entity was deleted) is forgotten.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["RATE_FIELDS", "RATE_WINDOW_S", "PartitionRates", "Rate"]

RATE_WINDOW_S = 5  # seconds of samples a rate is taken over
# the counters sampled, in this order: messages in and out (Azure's IncomingMessages and
# OutgoingMessages), and the bytes of those messages
RATE_FIELDS = ("incoming", "outgoing", "incoming_bytes", "outgoing_bytes")
Key = tuple[str, str, int]  # (namespace lower-cased, entity lower-cased, partition id)
Totals = tuple[int, ...]  # one partition's counters, in RATE_FIELDS order
Rate = dict[str, float]  # RATE_FIELDS -> per second


class PartitionRates:
    """Messages and bytes per second in and out of every partition, from sampled counters."""

    def __init__(self, window_s: int = RATE_WINDOW_S) -> None:
        self._window_ms = window_s * 1000
        # per partition: (now_ms, its totals), oldest first
        self._samples: dict[Key, deque[tuple[int, Totals]]] = {}

    def sample(self, now_ms: int, counters: Iterable[tuple[Key, Totals]]) -> None:
        """Record every partition's (key, totals in RATE_FIELDS order) at `now_ms`."""
        seen: set[Key] = set()
        for key, totals in counters:
            seen.add(key)
            ring = self._samples.get(key)
            if ring is None:
                ring = self._samples[key] = deque()
            if ring and now_ms <= ring[-1][0]:
                continue  # the clock did not move on: nothing to learn
            ring.append((now_ms, totals))
            # keep one sample at or before the window's start, so the window is covered
            while len(ring) > 2 and ring[1][0] <= now_ms - self._window_ms:
                ring.popleft()
        for gone in self._samples.keys() - seen:
            del self._samples[gone]

    def partition(self, namespace: str, entity: str, partition_id: int) -> Rate:
        """One partition's rates (0 until two samples exist)."""
        ring = self._samples.get((namespace.lower(), entity.lower(), partition_id))
        if ring is None or len(ring) < 2:
            return dict.fromkeys(RATE_FIELDS, 0.0)
        (t0, first), (t1, last) = ring[0], ring[-1]
        seconds = (t1 - t0) / 1000
        return {
            name: round(max(0, b - a) / seconds, 2)
            for name, a, b in zip(RATE_FIELDS, first, last, strict=True)
        }

    def entity(self, namespace: str, entity: str, partition_ids: Iterable[int]) -> Rate:
        """The sum over an entity's partitions."""
        total = dict.fromkeys(RATE_FIELDS, 0.0)
        for pid in partition_ids:
            for name, value in self.partition(namespace, entity, pid).items():
                total[name] += value
        return {k: round(v, 2) for k, v in total.items()}
