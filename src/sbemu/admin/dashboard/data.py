"""The dashboard's data: the router's state assembled into what the page shows (the entity
snapshot, the overview, one entity's detail) and the rate history its live charts draw.

A dashboard open on a busy broker must not slow it: the entity snapshot (counts walk the
partitions) is computed at most once per SNAPSHOT_MIN_AGE seconds and never more than ~10% of the
time (its age grows with its cost), and every client, SSE stream and /metrics scrape shares it;
the rate history is sampled once a second from plain counters.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

from ... import __version__
from ...errors import EntityNotFound
from ...partitions import DLQ_SUFFIX, SCHEDULED_QUEUE, Entity, totals
from .. import explorer
from ..access import Access
from ..entityrows import entity_rows
from ..processusage import ProcessUsage
from ..rates import PartitionRates
from ..serverstatus import ServerStatus

HISTORY_SECONDS = 15 * 60  # the overview charts' window
SNAPSHOT_MIN_AGE = 1.0  # seconds a snapshot is reused at least
SNAPSHOT_COST_FACTOR = 10  # ... and at least this many times what it cost to compute
DATA_DIR_SIZE_AGE = 10.0  # seconds between data-directory walks (in a worker thread)
RATE_FIELDS = ("incoming", "outgoing", "completed", "deadlettered", "abandoned")


class RateHistory:
    """A ring buffer of per-second rates computed from monotonic counter totals (no clock:
    the caller passes `now_ms`)."""

    def __init__(self, capacity: int = HISTORY_SECONDS) -> None:
        self.points: deque[dict[str, float]] = deque(maxlen=capacity)
        self._last: tuple[int, dict[str, int]] | None = None

    def sample(self, now_ms: int, current: dict[str, int]) -> dict[str, float] | None:
        """Add the rates since the previous sample; returns the new point (None on the first)."""
        last, self._last = self._last, (now_ms, dict(current))
        if last is None or now_ms <= last[0]:
            return None
        seconds = (now_ms - last[0]) / 1000
        point: dict[str, float] = {"t": now_ms}
        for name in RATE_FIELDS:
            point[name] = round(max(0, current.get(name, 0) - last[1].get(name, 0)) / seconds, 2)
        self.points.append(point)
        return point


class DashboardData:
    """What the dashboard shows of one running Server, assembled and cached."""

    def __init__(self, server: ServerStatus, access: Access) -> None:
        self.server = server
        self.access = access
        self.history = RateHistory()
        self.rates = PartitionRates()  # per entity and partition (admin/rates.py)
        self._snapshot: dict[str, Any] | None = None
        self._snapshot_at = 0.0
        self._snapshot_age = SNAPSHOT_MIN_AGE
        self._dir_size: int | None = None
        self._dir_size_at = 0.0
        self._dir_size_task: asyncio.Future[int] | None = None
        self.process_usage = ProcessUsage()  # memory and CPU for the overview

    def now_ms(self) -> int:
        """The server's clock (the one its brokers read; a test may move it), in ms."""
        return int(self.server.clock() * 1000)

    def sample(self) -> dict[str, float] | None:
        """Sample the rates (once a second); the new history point (None on the first)."""
        now_ms = self.now_ms()  # the server's clock (a TestClock in tests)
        self.rates.sample(now_ms, self._partition_counters())
        return self.history.sample(now_ms, self.totals())

    def totals(self) -> dict[str, int]:
        router = self.server.router
        if router is None:
            return {}
        return totals(b.stats for e in router.entities.values() for b in e.partitions)

    def _partition_counters(self) -> list[tuple[tuple[str, str, int], tuple[int, ...]]]:
        """Every partition's counters in RATE_FIELDS order (admin/rates.py)."""
        router = self.server.router
        if router is None:
            return []
        return [
            (
                (ns, name, b.partition_id),
                (s.incoming, s.outgoing, s.incoming_bytes, s.outgoing_bytes),
            )
            for (ns, name), e in router.entities.items()
            for b in e.partitions
            for s in (b.stats,)
        ]

    def tick_payload(self, point: dict[str, float]) -> dict[str, Any]:
        conns = list(self.server.connections)
        return {
            "rates": point,
            "totals": self.totals(),
            "connections": len(conns),
            "uptime_s": round(self.server.clock() - self.server.started_at, 1),
        }

    def snapshot(self) -> dict[str, Any]:
        """Every entity with counts per partition; reused while fresh (see module doc)."""
        now = time.monotonic()
        if self._snapshot is not None and now - self._snapshot_at < self._snapshot_age:
            return self._snapshot
        started = time.perf_counter()
        rows: list[dict[str, Any]] = []
        router = self.server.router
        assert router is not None
        for entity in router.entities.values():
            rows.extend(entity_rows(router, self.rates, entity))
        cost = time.perf_counter() - started
        self._snapshot_age = max(SNAPSHOT_MIN_AGE, cost * SNAPSHOT_COST_FACTOR)
        self._snapshot = {"generated_ms": self.now_ms(), "entities": rows}
        self._snapshot_at = time.monotonic()
        return self._snapshot

    def invalidate(self) -> None:
        """Forget the snapshot (an action changed what it shows)."""
        self._snapshot = None

    async def overview(self) -> dict[str, Any]:
        """Namespaces, entity and connection counts, uptime, data-dir size and rate history."""
        server = self.server
        router = server.router
        assert router is not None
        namespaces = []
        for ns in server.config.namespaces:
            ents = [e for (n, _), e in router.entities.items() if n == ns.name.lower()]
            namespaces.append(
                {
                    "name": ns.name,
                    "queues": sum(1 for e in ents if e.spec.kind == "queue"),
                    "topics": sum(1 for e in ents if e.spec.kind == "topic"),
                    "subscriptions": sum(
                        len(e.subscriptions.by_name) for e in ents if e.subscriptions is not None
                    ),
                    "partitioned": sum(1 for e in ents if e.partitioned),
                    "limited": sum(
                        1
                        for e in ents
                        if not all(b.health.serving and b.health.accepting for b in e.partitions)
                    ),
                }
            )
        described = [c.describe() for c in list(server.connections)]
        conns: list[dict[str, Any]] = [c for c in described if c is not None]
        return {
            "version": __version__,
            "uptime_s": round(server.clock() - server.started_at, 1),
            "started_ms": int(server.started_at * 1000),
            "amqp": f"amqp://{server.host}:{server.amqp_port}",
            "data_dir": str(server.data_dir),
            "data_dir_bytes": await self.data_dir_size(),
            "process": self.process_usage.sample(time.monotonic()),
            "namespaces": namespaces,
            "connections": len(conns),
            "links": sum(len(c["links"]) for c in conns),
            "totals": self.totals(),
            "history": list(self.history.points),
            "history_seconds": HISTORY_SECONDS,
            "login_required": self.access.login_required,
        }

    async def data_dir_size(self) -> int | None:
        """Bytes under the data directory, walked in a worker thread at most every 10 s."""
        now = time.monotonic()
        if self._dir_size_task is None and (
            self._dir_size is None or now - self._dir_size_at > DATA_DIR_SIZE_AGE
        ):
            loop = asyncio.get_running_loop()
            self._dir_size_task = loop.run_in_executor(None, _dir_size, self.server.data_dir)
        task = self._dir_size_task
        if task is not None and (self._dir_size is None or task.done()):
            try:
                self._dir_size = await task
            except OSError:
                pass
            self._dir_size_at = time.monotonic()
            self._dir_size_task = None
        return self._dir_size

    def entity(self, namespace: str, name: str) -> Entity:
        """An entity by namespace and name; raises EntityNotFound."""
        router = self.server.router
        assert router is not None
        found = router.entities.get((namespace.lower(), name.lower()))
        if found is None:
            raise EntityNotFound(f"The messaging entity '{namespace}/{name}' could not be found.")
        return found

    def entity_detail(self, namespace: str, name: str) -> dict[str, Any]:
        """One queue or topic: its rows of the snapshot, settings and rules."""
        entity = self.entity(namespace, name)
        rows = [
            r
            for r in self.snapshot()["entities"]
            if r["namespace"].lower() == namespace.lower() and r["entity"].lower() == name.lower()
        ]
        settings = {}
        for queue, s in entity.partitions[0].subqueue_settings().items():
            if queue.endswith(DLQ_SUFFIX) or queue == SCHEDULED_QUEUE:  # internal sub-queue
                continue
            settings[queue] = {
                "lock_duration_ms": s.lock_duration_ms,
                "max_delivery_count": s.max_delivery_count,
                "default_ttl_ms": s.default_ttl_ms,
                "dead_letter_on_expiration": s.dead_letter_on_expiration,
                "requires_session": s.requires_session,
            }
        rules: dict[str, list[dict[str, Any]]] = {}
        if entity.subscriptions is not None:
            for sub in entity.subscriptions.by_name.values():
                rules[sub.name] = [
                    {
                        "name": r.name,
                        "filter_type": r.filter_type,
                        "sql": r.sql_expression,
                        "correlation": dict(r.correlation) if r.correlation else None,
                        "action": r.action_expression,
                    }
                    for r in sub.sources
                ]
        spec = entity.spec
        return {
            "namespace": spec.namespace,
            "name": entity.name,
            "kind": spec.kind,
            "partitioned": entity.partitioned,
            "partition_count": len(entity.partitions),
            "max_size_mb": spec.max_size_mb,
            "requires_duplicate_detection": spec.requires_duplicate_detection,
            "requires_session": spec.requires_session,
            "rows": rows,
            "settings": settings,
            "rules": rules,
            "states": list(explorer.STATES),
        }

    def max_size(self, namespace: str) -> int:
        for ns in self.server.config.namespaces:
            if ns.name.lower() == namespace.lower():
                return ns.max_message_size_bytes
        return 256 * 1024


def _dir_size(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total
