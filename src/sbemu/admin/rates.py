"""Per-entity and per-partition message rates for the dashboard, as RabbitMQ's UI shows them.

The brokers keep plain monotonic counters (partitions/stats.py, no clock there). The dashboard's
sampler calls :meth:`PartitionRates.sample` once a second with the server's clock reading and
every partition's incoming and outgoing totals; a rate is the growth of a counter over the last
RATE_WINDOW_S seconds of samples divided by the time between them (messages per second). So a
burst shows for a few seconds and an idle entity reads 0 within RATE_WINDOW_S.

Pure: `now_ms` comes in; nothing here reads a clock. Memory is bounded by the partitions that
exist: a partition missing from a sample (its entity was deleted) is forgotten.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["RATE_WINDOW_S", "PartitionRates", "Rate"]

RATE_WINDOW_S = 5  # seconds of samples a rate is taken over
Key = tuple[str, str, int]  # (namespace lower-cased, entity lower-cased, partition id)
Rate = dict[str, float]  # {"incoming": msg/s, "outgoing": msg/s}


class PartitionRates:
    """Incoming/outgoing messages per second of every partition, from sampled counters."""

    def __init__(self, window_s: int = RATE_WINDOW_S) -> None:
        self._window_ms = window_s * 1000
        # per partition: (now_ms, incoming total, outgoing total), oldest first
        self._samples: dict[Key, deque[tuple[int, int, int]]] = {}

    def sample(self, now_ms: int, counters: Iterable[tuple[Key, int, int]]) -> None:
        """Record every partition's (key, incoming total, outgoing total) at `now_ms`."""
        seen: set[Key] = set()
        for key, incoming, outgoing in counters:
            seen.add(key)
            ring = self._samples.get(key)
            if ring is None:
                ring = self._samples[key] = deque()
            if ring and now_ms <= ring[-1][0]:
                continue  # the clock did not move on: nothing to learn
            ring.append((now_ms, incoming, outgoing))
            # keep one sample at or before the window's start, so the window is covered
            while len(ring) > 2 and ring[1][0] <= now_ms - self._window_ms:
                ring.popleft()
        for gone in self._samples.keys() - seen:
            del self._samples[gone]

    def partition(self, namespace: str, entity: str, partition_id: int) -> Rate:
        """One partition's rates (0 until two samples exist)."""
        ring = self._samples.get((namespace.lower(), entity.lower(), partition_id))
        if ring is None or len(ring) < 2:
            return {"incoming": 0.0, "outgoing": 0.0}
        (t0, in0, out0), (t1, in1, out1) = ring[0], ring[-1]
        seconds = (t1 - t0) / 1000
        return {
            "incoming": round(max(0, in1 - in0) / seconds, 2),
            "outgoing": round(max(0, out1 - out0) / seconds, 2),
        }

    def entity(self, namespace: str, entity: str, partition_ids: Iterable[int]) -> Rate:
        """The sum over an entity's partitions."""
        total = {"incoming": 0.0, "outgoing": 0.0}
        for pid in partition_ids:
            rate = self.partition(namespace, entity, pid)
            total["incoming"] += rate["incoming"]
            total["outgoing"] += rate["outgoing"]
        return {k: round(v, 2) for k, v in total.items()}
