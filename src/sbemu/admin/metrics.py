"""Prometheus text exposition (format 0.0.4) of sbemu's figures, named after Azure Monitor's
Service Bus metrics.

| Azure Monitor metric            | here                                   | labels                      |
|---------------------------------|----------------------------------------|-----------------------------|
| IncomingMessages                | sbemu_incoming_messages_total          | namespace, entity, partition|
| OutgoingMessages                | sbemu_outgoing_messages_total          | namespace, entity, partition|
| CompleteMessage                 | sbemu_complete_messages_total          | namespace, entity, partition|
| AbandonMessage                  | sbemu_abandon_messages_total           | namespace, entity, partition|
| (dead-lettering, as a rate)     | sbemu_deadletter_messages_total        | namespace, entity, partition|
| (Event Hubs' IncomingBytes)     | sbemu_incoming_bytes_total             | namespace, entity, partition|
| (Event Hubs' OutgoingBytes)     | sbemu_outgoing_bytes_total             | namespace, entity, partition|
| ActiveMessages                  | sbemu_active_messages                  | namespace, entity, partition|
| DeadletteredMessages            | sbemu_deadlettered_messages            | namespace, entity, partition|
| ScheduledMessages               | sbemu_scheduled_messages               | namespace, entity, partition|
| Size                            | sbemu_size_bytes                       | namespace, entity, partition|
| ConnectionsOpened / Closed      | sbemu_connections_opened/closed_total  | namespace                   |
| ActiveConnections               | sbemu_active_connections               | namespace                   |
| ServerErrors / UserErrors       | sbemu_server_errors_total, ..._user_.. | namespace                   |
| ThrottledRequests               | sbemu_throttled_requests_total         | namespace                   |

Counters are per partition of a queue or topic (a topic's deliveries are its subscriptions');
message gauges are per receivable entity path (a queue, or `<topic>/Subscriptions/<name>`).
This module only formats: the dashboard collects the samples (from its cached snapshot, so a
scrape never walks the broker twice within a second).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = Mapping[str, str]


@dataclass
class Family:
    """One metric family: name, type, help text and its samples."""

    name: str
    kind: str  # "counter" | "gauge"
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        """Append one sample."""
        self.samples.append((labels, value))


def escape_label(value: str) -> str:
    """A label value as the text format wants it: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """Integers without a decimal point; NaN and infinities as the format spells them."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer():
        return str(int(value))
    return repr(value)


def render(families: Iterable[Family]) -> str:
    """The exposition text: HELP and TYPE lines, then one line per sample."""
    lines: list[str] = []
    for fam in families:
        lines.append(f"# HELP {fam.name} {_escape_help(fam.help)}")
        lines.append(f"# TYPE {fam.name} {fam.kind}")
        for labels, value in fam.samples:
            if labels:
                body = ",".join(f'{k}="{escape_label(str(v))}"' for k, v in labels.items())
                lines.append(f"{fam.name}{{{body}}} {format_value(value)}")
            else:
                lines.append(f"{fam.name} {format_value(value)}")
    return "\n".join(lines) + "\n"


# Counter families fed from sbemu.partitions.stats totals (field name -> family).
COUNTERS = (
    (
        "incoming",
        "sbemu_incoming_messages_total",
        "Messages accepted by the entity (IncomingMessages).",
    ),
    (
        "outgoing",
        "sbemu_outgoing_messages_total",
        "Messages delivered to receivers (OutgoingMessages).",
    ),
    ("completed", "sbemu_complete_messages_total", "Messages completed (CompleteMessage)."),
    ("abandoned", "sbemu_abandon_messages_total", "Messages abandoned (AbandonMessage)."),
    ("deadlettered", "sbemu_deadletter_messages_total", "Messages moved to a dead-letter queue."),
    *(  # the sizes of the messages counted in and out (Event Hubs' IncomingBytes, OutgoingBytes)
        (f"{way}_bytes", f"sbemu_{way}_bytes_total", f"Bytes of the {way} messages.")
        for way in ("incoming", "outgoing")
    ),
)
GAUGES = (
    ("active", "sbemu_active_messages", "Active messages (ActiveMessages)."),
    (
        "deadletter",
        "sbemu_deadlettered_messages",
        "Messages in the dead-letter queue (DeadletteredMessages).",
    ),
    ("scheduled", "sbemu_scheduled_messages", "Scheduled messages (ScheduledMessages)."),
    (
        "deferred",
        "sbemu_deferred_messages",
        "Deferred messages (counted in Azure's ActiveMessages).",
    ),
)
NAMESPACE_COUNTERS = (
    (
        "connections_opened",
        "sbemu_connections_opened_total",
        "AMQP connections opened (ConnectionsOpened).",
    ),
    (
        "connections_closed",
        "sbemu_connections_closed_total",
        "AMQP connections closed (ConnectionsClosed).",
    ),
    (
        "server_errors",
        "sbemu_server_errors_total",
        "Requests failed by an internal error (ServerErrors).",
    ),
    ("user_errors", "sbemu_user_errors_total", "Requests failed by a client error (UserErrors)."),
    (
        "throttled_requests",
        "sbemu_throttled_requests_total",
        "Requests refused with server-busy (ThrottledRequests).",
    ),
)
