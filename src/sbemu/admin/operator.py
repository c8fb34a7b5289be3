"""The operator's JSON routes on the admin port: health, partitions on/offline, entity status,
purge, and the test clock. Each is added with the rule it needs (sbemu.admin.policy).

``GET /health`` (public: liveness, as on Microsoft's emulator; the entity list only to a request
that may read), ``GET /partitions``, ``POST /partitions/<ns>/<entity>/<n>/(offline|online)``,
``POST /entities/<ns>/<entity>[/subscriptions/<name>]/status/<Status>``,
``POST /purge/<ns>[/<entity>]`` (see Management.purge) and, only on a TestClock,
``POST /test-clock/advance/<seconds>``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any, Protocol
from urllib.parse import unquote

from .. import __version__
from ..clock import Clock, TestClock
from ..config import ENTITY_STATUSES, Config
from ..errors import ServiceBusError
from ..partitions import Router, StoreError
from .http import Request, Response, json_response
from .management import Management
from .policy import MANAGE, PUBLIC, READ, entity_in_path
from .routes import HttpRoutes

__all__ = ["OperatorServer", "add_operator_routes"]

log = logging.getLogger("sbemu.server")

MAX_ADVANCE_S = 10 * 365 * 86400.0  # one step of the test clock: ten years at most
ENTITY_MANAGE = MANAGE.but(audience="the entity", locate=entity_in_path)
NAMESPACE_MANAGE = MANAGE.but(audience="the entity, or the namespace", locate=entity_in_path)


class OperatorServer(Protocol):
    """What the operator routes read of the running server (sbemu.runtime.server.Server is one)."""

    @property
    def config(self) -> Config: ...
    @property
    def router(self) -> Router | None: ...
    @property
    def management(self) -> Management | None: ...
    @property
    def connections(self) -> Collection[Any]: ...
    @property
    def started_at(self) -> float: ...
    @property
    def clock(self) -> Clock: ...

    def wake(self) -> None: ...


def add_operator_routes(routes: HttpRoutes, server: OperatorServer) -> None:
    """Health, partitions, entity status, purge and (on a TestClock) the test clock."""
    ops = _Operator(server)
    routes.add("GET", "/health", ops.health, rule=PUBLIC)
    routes.add("GET", "/partitions", ops.partitions, rule=READ)
    routes.add("POST", "/partitions", ops.partition_command, rule=ENTITY_MANAGE, prefix=True)
    routes.add("POST", "/entities", ops.status_command, rule=ENTITY_MANAGE, prefix=True)
    routes.add("POST", "/purge", ops.purge, rule=NAMESPACE_MANAGE, prefix=True)
    if isinstance(server.clock, TestClock):
        routes.add("POST", "/test-clock/advance", ops.advance, rule=MANAGE, prefix=True)


class _Operator:
    def __init__(self, server: OperatorServer) -> None:
        self.server = server

    def _router(self) -> Router:
        router = self.server.router
        assert router is not None
        return router

    def _management(self) -> Management:
        management = self.server.management
        assert management is not None
        return management

    # ------------------------------------------------------------------ health
    def health(self, request: Request, params: dict[str, str]) -> Response:
        # Microsoft's emulator answers {"status":"healthy","message":"Service is healthy."}
        body: dict[str, Any] = {
            "status": "healthy",
            "message": "Service is healthy.",
            "version": __version__,
        }
        if request.grant is None or not request.grant.can_read:
            return json_response(200, body)  # liveness only: names nothing
        router = self.server.router
        entities = []
        if router is not None:
            for (ns, _), entity in router.entities.items():
                healthy = all(p.health.serving for p in entity.partitions)
                entities.append(
                    {
                        "namespace": ns,
                        "name": entity.name,
                        "kind": entity.spec.kind,
                        "partitions": len(entity.partitions),
                        "status": "Available" if healthy else "Limited",
                    }
                )
        return json_response(
            200,
            body
            | {
                "uptime_seconds": round(self.server.clock() - self.server.started_at, 3),
                "connections": len(self.server.connections),
                "namespaces": [ns.name for ns in self.server.config.namespaces],
                "entities": entities,
            },
        )

    # ------------------------------------------------------------------ partitions
    def partitions(self, request: Request, params: dict[str, str]) -> Response:
        router = self._router()
        return json_response(
            200, {"entities": [router.partition_status(e) for e in router.entities.values()]}
        )

    def partition_command(self, request: Request, params: dict[str, str]) -> Response:
        """POST /partitions/<namespace>/<entity>/<n>/(offline|online)."""
        parts = [unquote(p) for p in params.get("rest", "").strip("/").split("/")]
        if len(parts) < 4 or parts[-1] not in ("offline", "online") or not parts[-2].isdigit():
            return json_response(
                400,
                {"error": "expected /partitions/<namespace>/<entity>/<partition>/(offline|online)"},
            )
        namespace, entity = parts[0], "/".join(parts[1:-2])
        if len(parts[-2]) > 9:
            return json_response(404, {"error": f"no partition {parts[-2][:20]} of {entity!r}"})
        try:
            status = self._router().set_partition_online(
                namespace, entity, int(parts[-2]), parts[-1] == "online"
            )
        except ServiceBusError as exc:
            return json_response(exc.status_code, {"error": exc.description})
        log.info("partition %s of %s/%s is now %s", parts[-2], namespace, entity, parts[-1])
        self.server.wake()
        return json_response(200, status)

    # ------------------------------------------------------------------ entity status
    def status_command(self, request: Request, params: dict[str, str]) -> Response:
        """POST /entities/<namespace>/<queue|topic>[/subscriptions/<sub>]/status/<Status>: the
        same change as an admin API update of Status (persisted, applied to open links)."""
        management = self._management()
        parts = [unquote(p) for p in params.get("rest", "").strip("/").split("/")]
        if len(parts) < 4 or parts[-2].lower() != "status":
            return json_response(
                400,
                {
                    "error": "expected /entities/<namespace>/<entity>[/subscriptions/<name>]"
                    "/status/<Active|Disabled|SendDisabled|ReceiveDisabled>"
                },
            )
        namespace, path, value = parts[0], parts[1:-2], parts[-1]
        entity = management.entity(namespace, path[0])
        sub_name = path[2] if len(path) == 3 and path[1].lower() == "subscriptions" else None
        if entity is None or (len(path) != 1 and sub_name is None):
            return json_response(
                404, {"error": f"no entity {'/'.join(path)!r} in namespace {namespace!r}"}
            )
        kind = "subscription" if sub_name else entity.spec.kind
        allowed = {a.lower(): a for a in ENTITY_STATUSES[kind]}
        if value.lower() not in allowed:
            return json_response(
                400,
                {"error": f"{value!r} is not a {kind} status: use {', '.join(allowed.values())}"},
            )
        status = allowed[value.lower()]
        try:
            if sub_name is not None:
                sub = management.subscription(entity, sub_name)
                if sub is None:
                    return json_response(
                        404, {"error": f"no subscription {sub_name!r} on {entity.name!r}"}
                    )
                management.update_subscription(
                    namespace, entity.name, sub_name, dict(sub) | {"status": status}
                )
            else:
                current = {k: v for k, v in entity.description.items() if k != "subscriptions"}
                management.update_entity(namespace, kind, entity.name, current | {"status": status})
        except ServiceBusError as exc:
            return json_response(exc.status_code, {"error": exc.description})
        except (OSError, StoreError) as exc:  # the data dir cannot be written: nothing changed
            log.warning(
                "status of %s/%s not changed: the data dir cannot be written: %s",
                namespace,
                "/".join(path),
                exc,
            )
            return json_response(
                503, {"error": f"the change cannot be stored now ({exc}); retry later"}
            )
        log.info("%s %s/%s is now %s", kind, namespace, "/".join(path), status)
        return json_response(
            200, {"namespace": namespace, "entity": "/".join(path), "status": status}
        )

    # ------------------------------------------------------------------ purge
    async def purge(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /purge/<namespace>[/<entity path>]``: purge messages (JSON answer)."""
        parts = [p for p in params.get("rest", "").split("/") if p]
        if not parts:
            return json_response(400, {"error": "expected /purge/<namespace>[/<entity>]"})
        entity = "/".join(parts[1:]) or None
        try:
            counts = await self._management().purge(parts[0], entity)
        except ServiceBusError as exc:
            return json_response(exc.status_code, {"error": exc.description})
        return json_response(
            200,
            {
                "namespace": parts[0],
                "entity": entity,
                "purged": counts,
                "total": sum(counts.values()),
            },
        )

    # ------------------------------------------------------------------ test clock
    def advance(self, request: Request, params: dict[str, str]) -> Response:
        """POST /test-clock/advance/<seconds>: only when the server runs on a TestClock
        (SBEMU_TEST_CLOCK=1, loopback only), for tests that would otherwise sleep."""
        clock = self.server.clock
        assert isinstance(clock, TestClock)
        text = params.get("rest", "").strip("/")
        try:
            seconds = float(text)
            if not 0 <= seconds <= MAX_ADVANCE_S:
                raise ValueError(f"{text[:40]!r} is not between 0 and {MAX_ADVANCE_S:.0f} seconds")
            now = clock.advance(seconds)
        except ValueError as exc:
            return json_response(400, {"error": f"expected /test-clock/advance/<seconds>: {exc}"})
        log.info("test clock advanced by %s s (offset now %.3f s)", text, clock.offset)
        return json_response(200, {"now_ms": int(now * 1000), "offset_s": clock.offset})
