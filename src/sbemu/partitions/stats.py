"""Message and connection counters for the dashboard and /metrics: plain integers, no clock.

Each partition broker owns one PartitionStats and bumps it where it already writes its log
(one dict increment per logged event), plus `incoming` once a send committed, and the bytes in
(of those messages) and out (of the deliveries): one add per message of the `size` it already
carries. ServerStats counts
connections and errors per namespace. Rates over time are the admin layer's business: it samples
these monotonically growing totals on its own timer.

The names follow Azure Monitor's Service Bus metrics: IncomingMessages (messages accepted by an
entity, once per message even when a topic fans it out), OutgoingMessages (deliveries),
CompleteMessage, AbandonMessage, dead-lettered messages, ConnectionsOpened/ConnectionsClosed,
ServerErrors, UserErrors and ThrottledRequests (server-busy).
"""

from __future__ import annotations

from collections.abc import Iterable

from .records import LogEvent

THROTTLED_CONDITIONS = frozenset({"com.microsoft:server-busy"})
SERVER_CONDITIONS = frozenset({"amqp:internal-error"})


class PartitionStats:
    """Monotonic counters of one partition (all its sub-queues)."""

    __slots__ = ("incoming", "incoming_bytes", "outgoing_bytes", "events")

    def __init__(self) -> None:
        self.incoming = 0  # messages accepted by a committed send (not per subscription copy)
        self.incoming_bytes = 0  # their sizes
        self.outgoing_bytes = 0  # the sizes of the messages delivered (DELIVERED events)
        self.events: dict[LogEvent, int] = dict.fromkeys(LogEvent, 0)

    def count(self, event: LogEvent) -> None:
        """One logged state change (delivered, completed, abandoned, dead-lettered, ...)."""
        self.events[event] += 1

    @property
    def outgoing(self) -> int:
        """Deliveries to receivers (peek-lock and receive-and-delete)."""
        return self.events[LogEvent.DELIVERED]

    @property
    def completed(self) -> int:
        """Completed messages (receive-and-delete counts as completed on delivery)."""
        return self.events[LogEvent.COMPLETED]

    @property
    def abandoned(self) -> int:
        """Abandoned messages (explicit abandon; lock expiry is counted apart)."""
        return self.events[LogEvent.ABANDONED]

    @property
    def deadlettered(self) -> int:
        """Messages moved to a dead-letter queue, for any reason."""
        return self.events[LogEvent.DEADLETTERED]


TOTAL_FIELDS = (
    "incoming",
    "outgoing",
    "completed",
    "abandoned",
    "deadlettered",
    "incoming_bytes",
    "outgoing_bytes",
)


def totals(stats: Iterable[PartitionStats]) -> dict[str, int]:
    """The sum of several partitions' counters, keyed by TOTAL_FIELDS."""
    out = dict.fromkeys(TOTAL_FIELDS, 0)
    for s in stats:
        ev = s.events
        out["incoming"] += s.incoming
        out["outgoing"] += ev[LogEvent.DELIVERED]
        out["completed"] += ev[LogEvent.COMPLETED]
        out["abandoned"] += ev[LogEvent.ABANDONED]
        out["deadlettered"] += ev[LogEvent.DEADLETTERED]
        out["incoming_bytes"] += s.incoming_bytes
        out["outgoing_bytes"] += s.outgoing_bytes
    return out


class ServerStats:
    """Connection and error counters per namespace (lower-cased name)."""

    def __init__(self) -> None:
        self.connections_opened: dict[str, int] = {}
        self.connections_closed: dict[str, int] = {}
        self.server_errors: dict[str, int] = {}
        self.user_errors: dict[str, int] = {}
        self.throttled_requests: dict[str, int] = {}

    @staticmethod
    def _bump(table: dict[str, int], namespace: str) -> None:
        table[namespace] = table.get(namespace, 0) + 1

    def connection_opened(self, namespace: str) -> None:
        """An AMQP connection was opened (after SASL) for the namespace."""
        self._bump(self.connections_opened, namespace.lower())

    def connection_closed(self, namespace: str) -> None:
        """An opened AMQP connection went away."""
        self._bump(self.connections_closed, namespace.lower())

    def error(self, namespace: str, condition: str) -> None:
        """An error sent to a client: throttled (server-busy), server (internal) or user error."""
        if condition in THROTTLED_CONDITIONS:
            table = self.throttled_requests
        elif condition in SERVER_CONDITIONS:
            table = self.server_errors
        else:
            table = self.user_errors
        self._bump(table, namespace.lower())
