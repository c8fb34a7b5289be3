"""What a connection is handed by the server: the namespaces it may serve (keys, rights,
limits) and the router. Shared by the connection, `$management` and the server's wiring."""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass, field

from ..partitions.router import Router
from ..partitions.stats import ServerStats
from ..rejections import RejectionLog
from .limits import Limits


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """What the protocol side needs of a namespace: keys, rights and size limits."""

    name: str
    keys: dict[str, str]  # SAS key name -> key
    rights: dict[str, frozenset[str]]  # SAS key name -> {"Manage", "Send", "Listen"}
    max_message_size: int


@dataclass(slots=True)
class Services:
    """Everything a connection talks to, handed in by the server."""

    router: Router
    namespaces: dict[str, NamespaceInfo]  # lower-cased name -> info
    default_namespace: str
    stats: ServerStats = field(default_factory=ServerStats)  # connections and errors
    limits: Limits = field(default_factory=Limits)
    # refused SASL PLAIN keys and $cbs tokens, logged rate-limited (docs/security.md)
    rejections: RejectionLog = field(
        default_factory=lambda: RejectionLog("AMQP", logging.getLogger("sbemu.protocol.auth"))
    )

    def namespace_for(self, hostname: str | None) -> NamespaceInfo:
        """Pick the namespace a client addresses: by host name (first label), else the default."""
        if hostname:
            host = hostname.lower()
            if host in self.namespaces:
                return self.namespaces[host]
            first = host.split(".", 1)[0]
            if first in self.namespaces:
                return self.namespaces[first]
        return self.namespaces[self.default_namespace]

    def check_plain(self, hostname: str | None, username: str, password: str) -> bool:
        """SASL PLAIN: user = SAS key name, password = key."""
        ns = self.namespace_for(hostname)
        key = ns.keys.get(username)
        return key is not None and hmac.compare_digest(key.encode(), password.encode())
