"""Everything the admin port serves, put together: the operator's JSON routes, AMQP over
WebSockets, the dashboard and the Atom management API, each route with its rule, all decided by
one access policy (sbemu.admin.policy) built from the namespaces' SAS rules.

Azure's own layout has a second, smaller table (``AdminSite.management``): the management API
and AMQP over WebSockets, what Azure serves on 443. The WebSocket port (443 by default) and the
AMQP ports (for an HTTP or TLS first byte, sbemu.runtime.endpoints) serve it, so an admin client given
the application's own connection string finds the API where it looks.

The server calls `admin_site` once at start-up and lists the tables (tests and docs/security.md
read them); the route handlers are the modules named below, not this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..config import NamespaceConfig
from .access import Access
from .atom import add_atom_routes
from .dashboard import Dashboard
from .explorer import WireCodec
from .http import Handler
from .management import Management
from .operator import OperatorServer, add_operator_routes
from .policy import AMQP, AccessPolicy, NamespaceKeys
from .routes import HttpRoutes
from .serverstatus import ServerStatus


class SiteServer(OperatorServer, ServerStatus, Protocol):
    """What the admin port reads of the running server (sbemu.runtime.server.Server is one)."""


@dataclass(frozen=True)
class AdminSite:
    """The admin port's route table and the dashboard that registered in it."""

    routes: HttpRoutes
    dashboard: Dashboard
    management: HttpRoutes  # Azure's 443: the management API and AMQP over WebSockets


def admin_site(
    server: SiteServer,
    management: Management,
    codec: WireCodec,
    websocket: tuple[str, Handler] | None = None,
) -> AdminSite:
    """Every route of the admin port with its rule; `websocket` (path, handler) serves AMQP
    over WebSockets there (sbemu.runtime.endpoints) when given."""
    namespaces: tuple[NamespaceConfig, ...] = server.config.namespaces
    manage = [
        (p.key_name, p.key) for ns in namespaces for p in ns.sas_policies if "Manage" in p.rights
    ]
    access = Access(server.host, manage)
    keys = [
        NamespaceKeys(
            ns.name,
            {p.key_name: p.key for p in ns.sas_policies},
            {p.key_name: frozenset(p.rights) for p in ns.sas_policies},
        )
        for ns in namespaces
    ]
    policy = AccessPolicy(server.host, keys, access, server.clock)
    routes = HttpRoutes(policy)
    add_operator_routes(routes, server)
    azure = HttpRoutes(policy)
    if websocket is not None:
        path, handler = websocket
        routes.add("GET", path, handler, rule=AMQP)
        azure.add("GET", path, handler, rule=AMQP)
    dashboard = Dashboard(server, access, codec)
    dashboard.register(routes)
    add_atom_routes(routes, management)
    add_atom_routes(azure, management, root=True)
    return AdminSite(routes, dashboard, azure)
