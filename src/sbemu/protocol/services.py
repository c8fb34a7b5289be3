"""What a connection is handed by the server: the namespaces it may serve (keys, rights,
limits) and the router. Shared by the connection, `$management` and the server's wiring."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..auth.rejections import LogThrottle, RejectionLog
from ..auth.sasrules import SasRule, parse_authorization_rules
from ..config import NamespaceConfig
from ..errors import EntityNotFound
from ..partitions import Router, ServerStats, resolve_view_name
from .limits import Limits


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """What the protocol side needs of a namespace: keys, rights and size limits."""

    name: str
    keys: dict[str, str]  # SAS key name -> key
    rights: dict[str, frozenset[str]]  # SAS key name -> {"Manage", "Send", "Listen"}
    max_message_size: int


def namespace_info(ns: NamespaceConfig) -> NamespaceInfo:
    """Keys, rights and limits of a configured namespace for the protocol side."""
    return NamespaceInfo(
        name=ns.name,
        keys={p.key_name: p.key for p in ns.sas_policies},
        rights={p.key_name: frozenset(p.rights) for p in ns.sas_policies},
        max_message_size=ns.max_message_size_bytes,
    )


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
    # requests dropped for want of a reply link, logged rate-limited like the rejections
    unanswered: LogThrottle = field(
        default_factory=lambda: LogThrottle(
            "requests without a reply link", logging.getLogger("sbemu.connection")
        )
    )

    # A large answer was produced and its temporaries freed: the server gives the freed heap
    # back to the system (runtime/heap.py), which it otherwise keeps while the peer is connected
    trim_heap: Callable[[], None] = field(default=lambda: None)

    def entity_rules(self, namespace: str, name: str) -> Sequence[SasRule]:
        """A queue's or topic's own SAS rules: the admin API's authorization_rules, kept in
        the entity's description (sbemu.admin.catalog)."""
        entity = self.router.entities.get((namespace.lower(), name.lower()))
        raw = entity.description.get("authorization_rules") if entity is not None else None
        return parse_authorization_rules(raw) if isinstance(raw, str) else ()

    def entity_name(self, namespace: str, path: str) -> str | None:
        """The queue or topic a normalised entity path names (a subscription's topic, a
        dead-letter queue's entity), None when there is none; unlike Router.lookup it does
        not count as access to the entity."""
        ns = namespace.lower()
        router = self.router
        try:
            name, sub = resolve_view_name([n for (s, n) in router.entities if s == ns], path)
        except EntityNotFound:
            return None
        entity = router.entities.get((ns, name))
        return name if entity is not None and sub in entity.views else None

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
