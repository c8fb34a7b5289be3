"""/metrics: the families assembled from the brokers' counters, the shared snapshot's gauges and
the connections' counters (admin/metrics.py formats them)."""

from __future__ import annotations

from ...partitions import totals
from .. import metrics
from .data import DashboardData


def metric_families(data: DashboardData) -> list[metrics.Family]:
    """Counters straight from the brokers, gauges from the shared snapshot."""
    router = data.server.router
    assert router is not None
    families = []
    for field, name, help_text in metrics.COUNTERS:
        fam = metrics.Family(name, "counter", help_text)
        for entity in router.entities.values():
            for broker in entity.partitions:
                value = totals([broker.stats])[field]
                fam.add(
                    value,
                    namespace=entity.spec.namespace,
                    entity=entity.name,
                    partition=str(broker.partition_id),
                )
        families.append(fam)
    rows = [r for r in data.snapshot()["entities"] if r["kind"] != "topic"]
    for field, name, help_text in metrics.GAUGES:
        fam = metrics.Family(name, "gauge", help_text)
        for row in rows:
            for part in row["partitions"]:
                fam.add(
                    part[field],
                    namespace=row["namespace"],
                    entity=row["name"],
                    partition=str(part["id"]),
                )
        families.append(fam)
    size = metrics.Family(
        "sbemu_size_bytes", "gauge", "Bytes of the messages stored per partition (Size)."
    )
    online = metrics.Family("sbemu_partition_online", "gauge", "1 while a partition is in service.")
    for row in data.snapshot()["entities"]:
        if row["kind"] == "subscription":
            continue
        for part in row["partitions"]:
            size.add(
                part["size"],
                namespace=row["namespace"],
                entity=row["entity"],
                partition=str(part["id"]),
            )
            online.add(
                1 if part["online"] else 0,
                namespace=row["namespace"],
                entity=row["entity"],
                partition=str(part["id"]),
            )
    families += [size, online]
    assert data.server.services is not None
    stats = data.server.services.stats
    namespaces = [ns.name for ns in data.server.config.namespaces]
    for attr, name, help_text in metrics.NAMESPACE_COUNTERS:
        fam = metrics.Family(name, "counter", help_text)
        table = getattr(stats, attr)
        for ns in namespaces:
            fam.add(table.get(ns.lower(), 0), namespace=ns)
        families.append(fam)
    active = metrics.Family(
        "sbemu_active_connections", "gauge", "Open AMQP connections (ActiveConnections)."
    )
    by_ns: dict[str, int] = {ns.lower(): 0 for ns in namespaces}
    for proto in list(data.server.connections):
        info = proto.describe()
        if info is not None:
            key = str(info["namespace"]).lower()
            by_ns[key] = by_ns.get(key, 0) + 1
    for ns in namespaces:
        active.add(by_ns.get(ns.lower(), 0), namespace=ns)
    up = metrics.Family("sbemu_uptime_seconds", "gauge", "Seconds since the server started.")
    up.add(round(data.server.clock() - data.server.started_at, 3))
    return families + [active, up]
