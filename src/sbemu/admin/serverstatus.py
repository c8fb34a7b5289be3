"""What the dashboard reads of the running server: admin/ is below the server, so it names what
it uses of the Server (and of its AMQP connections) in these Protocols instead of importing it;
sbemu.runtime.server.Server is one."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Protocol

from ..config import Config
from ..partitions import Router, ServerStats


# ------------------------------------------------------------------ what the dashboard reads
# admin/ is below the server: the dashboard names what it uses of the running Server (and of
# its AMQP connections) in these Protocols instead of importing it; sbemu.runtime.server.Server is one.
class Connection(Protocol):
    """One open AMQP connection (protocol.listener.AmqpProtocol)."""

    @property
    def connection_id(self) -> int | None: ...

    def describe(self) -> dict[str, Any] | None:
        """Its peer, namespace, links and counters (None once it is gone)."""
        ...

    def close_by_operator(self, description: str) -> None:
        """Close it with amqp:connection:forced."""
        ...


class Services(Protocol):
    """What the AMQP connections share: the dashboard reads their counters."""

    @property
    def stats(self) -> ServerStats: ...


class ServerStatus(Protocol):
    """What the dashboard reads of the running server, and the one thing it asks of it."""

    @property
    def config(self) -> Config: ...
    @property
    def router(self) -> Router | None: ...  # None until started
    @property
    def services(self) -> Services | None: ...  # None until started
    @property
    def connections(self) -> Collection[Connection]: ...
    @property
    def host(self) -> str: ...
    @property
    def amqp_port(self) -> int: ...
    @property
    def data_dir(self) -> Path: ...
    @property
    def started_at(self) -> float: ...  # epoch seconds
    @property
    def clock(self) -> Callable[[], float]: ...  # the server's time source (Unix seconds)
    @property
    def management(self) -> Any: ...  # sbemu.admin.management.Management; None until started

    def wake(self) -> None:
        """Ask for a turn soon (after a partition was taken on or offline)."""
        ...
