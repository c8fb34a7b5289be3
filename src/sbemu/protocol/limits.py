"""Per-server limits that keep one abusive peer from starving everyone else.

Azure Service Bus caps AMQP connections per namespace (5,000) and rejects the ones beyond with
a quota error; a peer that never finishes its handshake or opens links without end is cut off.
Defaults are generous enough for any honest test suite; each can be changed with an environment
variable (read once when the server starts):

| variable | default | meaning |
|---|---|---|
| SBEMU_MAX_CONNECTIONS | 5000 | open AMQP connections; the next one is closed with amqp:resource-limit-exceeded |
| SBEMU_MAX_LINKS_PER_CONNECTION | 1000 | links attached on one connection; the next attach is refused |
| SBEMU_HANDSHAKE_TIMEOUT | 30 | seconds from accept to the peer's AMQP open (SASL included) |
| SBEMU_WRITE_STALL_TIMEOUT | 60 | seconds a peer may leave the server's output to it unread (its socket buffer full, not shrinking) before it is closed |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

ENV_MAX_CONNECTIONS = "SBEMU_MAX_CONNECTIONS"
ENV_MAX_LINKS = "SBEMU_MAX_LINKS_PER_CONNECTION"
ENV_HANDSHAKE_TIMEOUT = "SBEMU_HANDSHAKE_TIMEOUT"
ENV_WRITE_STALL_TIMEOUT = "SBEMU_WRITE_STALL_TIMEOUT"


@dataclass(frozen=True, slots=True)
class Limits:
    """What one server tolerates; see the module docstring."""

    max_connections: int = 5000
    max_links_per_connection: int = 1000
    handshake_timeout: float = 30.0
    write_stall_timeout: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Limits:
        """Defaults overridden by SBEMU_* variables; a bad value raises ValueError naming it."""
        env = os.environ if env is None else env
        base = cls()

        def number(name: str, default: float, kind: type) -> float:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = kind(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a number") from None
            if value <= 0:
                raise ValueError(f"{name}={raw!r} must be positive")
            return value

        return cls(
            max_connections=int(number(ENV_MAX_CONNECTIONS, base.max_connections, int)),
            max_links_per_connection=int(number(ENV_MAX_LINKS, base.max_links_per_connection, int)),
            handshake_timeout=float(number(ENV_HANDSHAKE_TIMEOUT, base.handshake_timeout, float)),
            write_stall_timeout=float(
                number(ENV_WRITE_STALL_TIMEOUT, base.write_stall_timeout, float)
            ),
        )
