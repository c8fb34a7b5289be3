"""The dashboard's session list: the sessions of a session-enabled queue or subscription over
all its partitions, with their stored messages, lock and state size (Azure's portal
has none, RabbitMQ's UI lists a queue's consumers and channels)."""

from __future__ import annotations

from typing import Any

from ..partitions import Entity
from .explorer import sub_queue

__all__ = ["session_list"]

MAX_SESSIONS = 1000  # rows answered; the count says how many there are


def session_list(entity: Entity, subscription: str | None, now_ms: int) -> dict[str, Any]:
    """``sessions``: one row per session id (messages, locked_until_ms, state_bytes), sorted by
    id; ``total``: how many; ``offline_partitions``: partitions out of service (not read)."""
    queue = sub_queue(entity, subscription, "active").queue
    rows: dict[str, dict[str, Any]] = {}
    for broker in entity.partitions:
        if not broker.health.serving:
            continue
        for sid, messages, locked_until, state_bytes in broker.session_summaries(queue, now_ms):
            row = rows.setdefault(
                sid, {"session_id": sid, "messages": 0, "locked_until_ms": None, "state_bytes": 0}
            )
            row["messages"] += messages
            row["state_bytes"] += state_bytes
            if locked_until is not None:
                row["locked_until_ms"] = max(row["locked_until_ms"] or 0, locked_until)
    ordered = [rows[k] for k in sorted(rows)]
    return {
        "sessions": ordered[:MAX_SESSIONS],
        "total": len(ordered),
        "offline_partitions": [b.partition_id for b in entity.partitions if not b.health.serving],
    }
