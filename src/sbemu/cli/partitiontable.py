"""``sbemu partition status`` as a table a person reads (``--json`` prints the server's JSON).

Input is the body of the admin port's ``GET /partitions``: ``{"entities": [{"namespace",
"entity", "status", "partitions": [{"partition", "online", "accepting", "reason"}]}]}``. Pure:
text in, text out, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["entity_table", "partition_table", "render_table"]


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    lines = []
    for row in (header, *rows):
        cells = [str(c).ljust(w) for c, w in zip(row, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _trouble(part: dict[str, Any]) -> str | None:
    """'3 offline (reason)' / '3 full' / None for a partition in service."""
    pid = part.get("partition")
    if not part.get("online", True):
        reason = part.get("reason")
        return f"{pid} offline" + (f" ({reason})" if reason else "")
    if not part.get("accepting", True):
        return f"{pid} full"
    return None


def entity_table(body: dict[str, Any]) -> str:
    """One line per entity: its availability, partition count and the partitions out of service."""
    rows = []
    for e in sorted(body.get("entities", []), key=lambda e: (e["namespace"].lower(), e["entity"])):
        parts = e.get("partitions", [])
        trouble = [t for t in (_trouble(p) for p in parts) if t]
        rows.append(
            (
                f"{e['namespace']}/{e['entity']}",
                e.get("status", "?"),
                str(len(parts)),
                ", ".join(trouble) or "-",
            )
        )
    if not rows:
        return "no entities"
    return render_table(("ENTITY", "STATUS", "PARTITIONS", "OUT OF SERVICE"), rows)


def partition_table(entity: dict[str, Any]) -> str:
    """One line per partition of one entity."""
    rows = [
        (
            str(p.get("partition")),
            "online" if p.get("online") else "offline",
            "yes" if p.get("online") and p.get("accepting") else "no",
            p.get("reason") or "-",
        )
        for p in entity.get("partitions", [])
    ]
    title = f"{entity['namespace']}/{entity['entity']}: {entity.get('status', '?')}"
    return title + "\n" + render_table(("PARTITION", "HEALTH", "ACCEPTS SENDS", "REASON"), rows)
