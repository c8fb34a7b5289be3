"""The web dashboard on the admin port: pages, JSON API, live events (SSE) and /metrics.

What belongs here: turning the router's state into JSON for the page (shipped as package data in
admin/static/, no build step, no CDN), the rate history the live charts draw, and the dashboard's
actions (partition on/offline, test send, resubmit, purge, close connection) as POSTs guarded by
admin/access.py. What does not: sockets (admin/http.py), message decoding and sending
(admin/explorer.py, over the same code paths as AMQP), counters (partitions/stats.py), the
snapshot rows of one entity (admin/entityrows.py), what it reads of the server
(admin/serverstatus.py, re-exported here).

A dashboard open on a busy broker must not slow it: the entity snapshot (counts walk the
partitions) is computed at most once per SNAPSHOT_MIN_AGE seconds and never more than ~10% of the
time (its age grows with its cost), and every client, SSE stream and /metrics scrape shares it;
the rate history is sampled once a second from plain counters; SSE clients are capped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import mimetypes
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from .. import __version__
from ..auth.sas import SAS_PREFIX
from ..errors import ArgumentError, EntityNotFound, ServiceBusError
from ..partitions import DLQ_SUFFIX, SCHEDULED_QUEUE, Entity, totals
from . import explorer, metrics
from .access import COOKIE_NAME, Access, Principal
from .atom import empty_feed
from .bounded import INT64_MAX, bool_field, int_field, json_object, str_field
from .entityrows import entity_rows
from .http import Request, Response, json_response, text_response
from .msgsearch import MessageSearch
from .notfound import favicon, not_found
from .policy import LOGIN, MANAGE, PUBLIC, READ
from .processusage import ProcessUsage
from .rates import PartitionRates
from .routes import HttpRoutes
from .serverstatus import Connection as Connection
from .serverstatus import ServerStatus
from .serverstatus import Services as Services
from .sessionlist import session_list

log = logging.getLogger("sbemu.dashboard")

HISTORY_SECONDS = 15 * 60  # the overview charts' window
SAMPLE_INTERVAL = 1.0  # seconds between rate samples (and SSE ticks)
SNAPSHOT_MIN_AGE = 1.0  # seconds a snapshot is reused at least
SNAPSHOT_COST_FACTOR = 10  # ... and at least this many times what it cost to compute
DATA_DIR_SIZE_AGE = 10.0  # seconds between data-directory walks (in a worker thread)
MAX_SSE_CLIENTS = 32
MAX_BODY = 1024 * 1024  # bytes of a dashboard POST body
MAX_NAME = 260  # characters of a namespace or entity path in a POST
MAX_PARTITION = 65_535  # partition ids are the top 16 bits of a sequence number
MAX_RESUBMIT = 1000  # dead letters resubmitted in one POST
RATE_FIELDS = ("incoming", "outgoing", "completed", "deadlettered", "abandoned")


class RateHistory:
    """A ring buffer of per-second rates computed from monotonic counter totals (no clock:
    the caller passes `now_ms`)."""

    def __init__(self, capacity: int = HISTORY_SECONDS) -> None:
        self.points: deque[dict[str, float]] = deque(maxlen=capacity)
        self._last: tuple[int, dict[str, int]] | None = None

    def sample(self, now_ms: int, current: dict[str, int]) -> dict[str, float] | None:
        """Add the rates since the previous sample; returns the new point (None on the first)."""
        last, self._last = self._last, (now_ms, dict(current))
        if last is None or now_ms <= last[0]:
            return None
        seconds = (now_ms - last[0]) / 1000
        point: dict[str, float] = {"t": now_ms}
        for name in RATE_FIELDS:
            point[name] = round(max(0, current.get(name, 0) - last[1].get(name, 0)) / seconds, 2)
        self.points.append(point)
        return point


def _api_refusal(request: Request, status: int, message: str) -> Response:
    body: dict[str, Any] = {"error": message}
    if status == 401:
        body["login"] = "/login"
    return json_response(status, body)


def _page_refusal(request: Request, status: int, message: str) -> Response:
    if status == 401:
        return Response(303, b"", [("location", "/login")])
    return text_response(status, message + "\n", "text/plain")


def _metrics_refusal(request: Request, status: int, message: str) -> Response:
    headers = [("content-type", "text/plain")]
    if status == 401:
        headers.append(("www-authenticate", 'Basic realm="sbemu"'))
    return Response(status, f"authentication required: {message}\n".encode(), headers)


def _entity_path(entity: Entity) -> str:
    return entity.name


class Dashboard:
    """State and handlers of the dashboard for one running Server; `codec` is the wire format
    the message explorer decodes and encodes with (see explorer.WireCodec)."""

    def __init__(self, server: ServerStatus, access: Access, codec: explorer.WireCodec) -> None:
        self.server = server
        self.access = access
        self.codec = codec
        self.history = RateHistory()
        self.rates = PartitionRates()  # per entity and partition (admin/rates.py)
        self._snapshot: dict[str, Any] | None = None
        self._snapshot_at = 0.0
        self._snapshot_age = SNAPSHOT_MIN_AGE
        self._dir_size: int | None = None
        self._dir_size_at = 0.0
        self._dir_size_task: asyncio.Future[int] | None = None
        self.process_usage = ProcessUsage()  # memory and CPU for the overview
        self._subscribers: set[asyncio.Queue[str]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._static = resources.files("sbemu.admin") / "static"

    def _now_ms(self) -> int:
        """The server's clock (the one its brokers read; a test may move it), in ms."""
        return int(self.server.clock() * 1000)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Begin sampling rates once a second (on the running loop)."""
        self._tick()

    def stop(self) -> None:
        """Stop sampling and end every SSE stream."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for q in list(self._subscribers):
            _offer(q, "")

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            now_ms = self._now_ms()  # the server's clock (a TestClock in tests)
            self.rates.sample(now_ms, self._partition_counters())
            point = self.history.sample(now_ms, self._totals())
            if point is not None and self._subscribers:
                event = "event: tick\ndata: " + json.dumps(self._tick_payload(point)) + "\n\n"
                for q in list(self._subscribers):
                    _offer(q, event)
        except Exception:  # a guard: the sampler must keep going
            log.exception("dashboard sample failed")
        self._timer = loop.call_later(SAMPLE_INTERVAL, self._tick)

    def _totals(self) -> dict[str, int]:
        router = self.server.router
        if router is None:
            return {}
        return totals(b.stats for e in router.entities.values() for b in e.partitions)

    def _partition_counters(self) -> list[tuple[tuple[str, str, int], int, int]]:
        router = self.server.router
        if router is None:
            return []
        return [
            ((ns, name, b.partition_id), b.stats.incoming, b.stats.outgoing)
            for (ns, name), e in router.entities.items()
            for b in e.partitions
        ]

    def _tick_payload(self, point: dict[str, float]) -> dict[str, Any]:
        conns = list(self.server.connections)
        return {
            "rates": point,
            "totals": self._totals(),
            "connections": len(conns),
            "uptime_s": round(self.server.clock() - self.server.started_at, 1),
        }

    # ------------------------------------------------------------------ snapshot (cached)
    def snapshot(self) -> dict[str, Any]:
        """Every entity with counts per partition; reused while fresh (see module doc)."""
        now = time.monotonic()
        if self._snapshot is not None and now - self._snapshot_at < self._snapshot_age:
            return self._snapshot
        started = time.perf_counter()
        rows: list[dict[str, Any]] = []
        router = self.server.router
        assert router is not None
        for entity in router.entities.values():
            rows.extend(entity_rows(router, self.rates, entity))
        cost = time.perf_counter() - started
        self._snapshot_age = max(SNAPSHOT_MIN_AGE, cost * SNAPSHOT_COST_FACTOR)
        self._snapshot = {"generated_ms": self._now_ms(), "entities": rows}
        self._snapshot_at = time.monotonic()
        return self._snapshot

    # ------------------------------------------------------------------ overview
    async def overview(self) -> dict[str, Any]:
        """Namespaces, entity and connection counts, uptime, data-dir size and rate history."""
        server = self.server
        router = server.router
        assert router is not None
        namespaces = []
        for ns in server.config.namespaces:
            ents = [e for (n, _), e in router.entities.items() if n == ns.name.lower()]
            namespaces.append(
                {
                    "name": ns.name,
                    "queues": sum(1 for e in ents if e.spec.kind == "queue"),
                    "topics": sum(1 for e in ents if e.spec.kind == "topic"),
                    "subscriptions": sum(
                        len(e.subscriptions.by_name) for e in ents if e.subscriptions is not None
                    ),
                    "partitioned": sum(1 for e in ents if e.partitioned),
                    "limited": sum(
                        1
                        for e in ents
                        if not all(b.health.serving and b.health.accepting for b in e.partitions)
                    ),
                }
            )
        described = [c.describe() for c in list(server.connections)]
        conns: list[dict[str, Any]] = [c for c in described if c is not None]
        return {
            "version": __version__,
            "uptime_s": round(server.clock() - server.started_at, 1),
            "started_ms": int(server.started_at * 1000),
            "amqp": f"amqp://{server.host}:{server.amqp_port}",
            "data_dir": str(server.data_dir),
            "data_dir_bytes": await self.data_dir_size(),
            "process": self.process_usage.sample(time.monotonic()),
            "namespaces": namespaces,
            "connections": len(conns),
            "links": sum(len(c["links"]) for c in conns),
            "totals": self._totals(),
            "history": list(self.history.points),
            "history_seconds": HISTORY_SECONDS,
            "login_required": self.access.login_required,
        }

    async def data_dir_size(self) -> int | None:
        """Bytes under the data directory, walked in a worker thread at most every 10 s."""
        now = time.monotonic()
        if self._dir_size_task is None and (
            self._dir_size is None or now - self._dir_size_at > DATA_DIR_SIZE_AGE
        ):
            loop = asyncio.get_running_loop()
            self._dir_size_task = loop.run_in_executor(None, _dir_size, self.server.data_dir)
        task = self._dir_size_task
        if task is not None and (self._dir_size is None or task.done()):
            try:
                self._dir_size = await task
            except OSError:
                pass
            self._dir_size_at = time.monotonic()
            self._dir_size_task = None
        return self._dir_size

    # ------------------------------------------------------------------ entity detail
    def entity(self, namespace: str, name: str) -> Entity:
        """An entity by namespace and name; raises EntityNotFound."""
        router = self.server.router
        assert router is not None
        found = router.entities.get((namespace.lower(), name.lower()))
        if found is None:
            raise EntityNotFound(f"The messaging entity '{namespace}/{name}' could not be found.")
        return found

    def entity_detail(self, namespace: str, name: str) -> dict[str, Any]:
        """One queue or topic: its rows of the snapshot, settings and rules."""
        entity = self.entity(namespace, name)
        rows = [
            r
            for r in self.snapshot()["entities"]
            if r["namespace"].lower() == namespace.lower() and r["entity"].lower() == name.lower()
        ]
        settings = {}
        for queue, s in entity.partitions[0].subqueue_settings().items():
            if queue.endswith(DLQ_SUFFIX) or queue == SCHEDULED_QUEUE:  # internal sub-queue
                continue
            settings[queue] = {
                "lock_duration_ms": s.lock_duration_ms,
                "max_delivery_count": s.max_delivery_count,
                "default_ttl_ms": s.default_ttl_ms,
                "dead_letter_on_expiration": s.dead_letter_on_expiration,
                "requires_session": s.requires_session,
            }
        rules: dict[str, list[dict[str, Any]]] = {}
        if entity.subscriptions is not None:
            for sub in entity.subscriptions.by_name.values():
                rules[sub.name] = [
                    {
                        "name": r.name,
                        "filter_type": r.filter_type,
                        "sql": r.sql_expression,
                        "correlation": dict(r.correlation) if r.correlation else None,
                        "action": r.action_expression,
                    }
                    for r in sub.sources
                ]
        spec = entity.spec
        return {
            "namespace": spec.namespace,
            "name": entity.name,
            "kind": spec.kind,
            "partitioned": entity.partitioned,
            "partition_count": len(entity.partitions),
            "max_size_mb": spec.max_size_mb,
            "requires_duplicate_detection": spec.requires_duplicate_detection,
            "requires_session": spec.requires_session,
            "rows": rows,
            "settings": settings,
            "rules": rules,
            "states": list(explorer.STATES),
        }

    def _max_size(self, namespace: str) -> int:
        for ns in self.server.config.namespaces:
            if ns.name.lower() == namespace.lower():
                return ns.max_message_size_bytes
        return 256 * 1024

    # ------------------------------------------------------------------ HTTP routes
    def register(self, routes: HttpRoutes) -> None:
        """Add the dashboard's routes: pages, static files, /api/..., /metrics, login; each
        with its rule (sbemu.admin.policy: reads READ, actions MANAGE)."""
        api_read = READ.but(refuse=_api_refusal)
        api_manage = MANAGE.but(refuse=_api_refusal)
        page = READ.but(refuse=_page_refusal)
        routes.add("GET", "/", self._page, rule=page)
        routes.add("GET", "/ui", self._page, rule=page, prefix=True)
        routes.add("GET", "/login", self._login_page, rule=PUBLIC)
        # the login form is the authentication itself: public, but not from another site
        routes.add("POST", "/login", self._login, rule=LOGIN)
        routes.add("POST", "/logout", self._guard(self._logout), rule=api_manage)
        routes.add("GET", "/static", self._static_file, rule=PUBLIC, prefix=True)
        routes.add("GET", "/favicon.ico", favicon, rule=PUBLIC)
        routes.add("GET", "/metrics", self._metrics, rule=READ.but(refuse=_metrics_refusal))
        for path, handler in (
            ("/api/session", self._session),
            ("/api/overview", self._api_overview),
            ("/api/entities", self._api_entities),
            ("/api/entity", self._api_entity),
            ("/api/messages", self._api_messages),
            ("/api/sessions", self._api_sessions),
            ("/api/connections", self._api_connections),
            ("/api/events", self._api_events),
        ):
            routes.add("GET", path, self._guard(handler), rule=api_read)
        for path, handler in (
            ("/api/partition", self._api_partition),
            ("/api/send", self._api_send),
            ("/api/resubmit", self._api_resubmit),
            ("/api/purge", self._api_purge),
            ("/api/entity/create", self._api_create_entity),
            ("/api/entity/delete", self._api_delete_entity),
            ("/api/connections/close", self._api_close),
        ):
            routes.add("POST", path, self._guard(handler), rule=api_manage)

    def _guard(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        """The principal the access policy let in, and JSON errors (never a 500)."""

        async def guarded(request: Request, params: dict[str, str]) -> Response:
            principal: Principal = request.grant.principal
            try:
                result = handler(request, principal)
                if asyncio.iscoroutine(result):
                    result = await result
            except ServiceBusError as exc:
                return json_response(exc.status_code, {"error": exc.description})
            except (ValueError, KeyError, TypeError, OverflowError) as exc:
                return json_response(400, {"error": f"bad request: {exc}"})
            if isinstance(result, Response):
                return result
            return json_response(200, result)

        return guarded

    # -- pages
    def _asset(self, name: str) -> bytes | None:
        node = self._static.joinpath(name)
        try:
            return node.read_bytes() if node.is_file() else None
        except (OSError, ValueError):
            return None

    def _page(self, request: Request, params: dict[str, str]) -> Response:
        if "api-version" in request.query or request.headers.get("authorization", "").startswith(
            SAS_PREFIX
        ):
            # An admin client's GET of the namespace root (an empty entity name, or the JS
            # SDK's bare GET / with its SAS token and no api-version): the management API's
            # answer, Azure's Atom feed; a browser (no SAS header) gets the dashboard.
            return empty_feed(request, self._now_ms())
        body = self._asset("index.html") or b"dashboard assets missing\n"
        return Response(200, body, _html_headers())

    def _login_page(self, request: Request, params: dict[str, str]) -> Response:
        body = self._asset("login.html") or b"login page missing\n"
        return Response(200, body, _html_headers())

    def _login(self, request: Request, params: dict[str, str]) -> Response:
        form = {k: v[0] for k, v in parse_qs(request.body.decode("utf-8", "replace")).items()}
        key_name, key = form.get("key_name", ""), form.get("key", "")
        if not self.access.login_required:
            return Response(303, b"", [("location", "/")])
        if not self.access.check_key(key_name, key):
            self.access.rejections.rejected(
                key_name,
                "dashboard login: not a key with the Manage right",
                request.peer,
                self.server.clock(),
            )
            return Response(303, b"", [("location", "/login?failed=1")])
        cookie = self.access.cookie_header(
            self.access.new_session(key_name, self.server.clock()), request.secure
        )
        return Response(303, b"", [("location", "/"), ("set-cookie", cookie)])

    def _logout(self, request: Request, principal: Principal) -> Response:
        expired = f"{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
        return Response(
            200, b'{"ok":true}', [("content-type", "application/json"), ("set-cookie", expired)]
        )

    def _static_file(self, request: Request, params: dict[str, str]) -> Response:
        name = params.get("rest", "").strip("/")
        body = None if not name or "/" in name or name.startswith(".") else self._asset(name)
        if body is None:
            return not_found(request, f"No dashboard file at {request.path}.")
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            ctype += "; charset=utf-8"
        return Response(200, body, [("content-type", ctype), ("cache-control", "no-cache")])

    # -- JSON
    def _session(self, request: Request, principal: Principal) -> dict[str, Any]:
        return {
            "csrf": self.access.csrf_token(principal),
            "key_name": principal.key_name or None,
            "login_required": self.access.login_required,
        }

    async def _api_overview(self, request: Request, principal: Principal) -> dict[str, Any]:
        return await self.overview()

    def _api_entities(self, request: Request, principal: Principal) -> dict[str, Any]:
        return self.snapshot()

    def _api_entity(self, request: Request, principal: Principal) -> dict[str, Any]:
        return self.entity_detail(_q(request, "ns"), _q(request, "entity"))

    def _api_messages(self, request: Request, principal: Principal) -> dict[str, Any]:
        entity = self.entity(_q(request, "ns"), _q(request, "entity"))
        return explorer.peek(
            self.codec,
            entity,
            _q(request, "subscription", "") or None,
            _q(request, "state", "active"),
            _q_int(request, "from", 0, 0, INT64_MAX),
            _q_int(request, "count", 20, 1, 1000),
            self._now_ms(),
            MessageSearch.parse(_q(request, "message_id", ""), _q(request, "property", "")),
        )

    def _api_sessions(self, request: Request, principal: Principal) -> dict[str, Any]:
        entity = self.entity(_q(request, "ns"), _q(request, "entity"))
        return session_list(entity, _q(request, "subscription", "") or None, self._now_ms())

    def _api_connections(self, request: Request, principal: Principal) -> dict[str, Any]:
        items: list[dict[str, Any] | None] = [c.describe() for c in list(self.server.connections)]
        conns = sorted((c for c in items if c is not None), key=lambda c: int(c["id"]))
        return {"connections": conns}

    async def _api_events(self, request: Request, principal: Principal) -> Response:
        if len(self._subscribers) >= MAX_SSE_CLIENTS:
            return json_response(
                503, {"error": f"too many live dashboards (max {MAX_SSE_CLIENTS})"}
            )
        q: asyncio.Queue[str] = asyncio.Queue(maxsize=8)
        hello = {"history": list(self.history.points), "totals": self._totals()}
        return Response(
            200,
            headers=[
                ("content-type", "text/event-stream"),
                ("cache-control", "no-store"),
                ("x-accel-buffering", "no"),
            ],
            stream=self._stream(
                q, "retry: 2000\nevent: hello\ndata: " + json.dumps(hello) + "\n\n"
            ),
        )

    async def _stream(self, q: asyncio.Queue[str], first: str) -> AsyncIterator[bytes]:
        # Subscribed only once the body is being sent (a HEAD request never starts the
        # generator, so it never holds a place); unsubscribed however the stream ends.
        self._subscribers.add(q)
        try:
            yield first.encode()
            while True:
                try:
                    event = await asyncio.wait_for(q.get(), 15)
                except asyncio.TimeoutError:
                    event = ": keep-alive\n\n"
                if not event:
                    return
                yield event.encode()
        finally:
            self._subscribers.discard(q)

    # -- actions
    def _api_partition(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        router = self.server.router
        assert router is not None
        status = router.set_partition_online(
            str_field(body, "ns", MAX_NAME),
            str_field(body, "entity", MAX_NAME),
            int_field(body, "partition", 0, MAX_PARTITION),
            bool_field(body, "online"),
        )
        log.info(
            "dashboard: partition %s of %s/%s is now %s",
            body["partition"],
            body["ns"],
            body["entity"],
            "online" if body["online"] else "offline",
        )
        self._snapshot = None
        self.server.wake()
        return status

    async def _api_send(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        entity = self.entity(str_field(body, "ns", MAX_NAME), str_field(body, "entity", MAX_NAME))
        now_ms = self._now_ms()
        data = explorer.build_test_message(body, now_ms)
        done, committed = explorer.completion()
        numbers = explorer.send_bytes(
            self.codec, entity, data, self._max_size(entity.spec.namespace), now_ms, done
        )
        await committed
        self._snapshot = None
        return {"ok": True, "sequence_numbers": numbers}

    async def _api_resubmit(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        entity = self.entity(str_field(body, "ns", MAX_NAME), str_field(body, "entity", MAX_NAME))
        given = body.get("sequence_numbers") or []
        if not isinstance(given, list) or len(given) > MAX_RESUBMIT:
            raise ArgumentError(f"sequence_numbers: a list of at most {MAX_RESUBMIT} numbers.")
        numbers = [int_field({"n": n}, "n", 0, INT64_MAX) for n in given]
        if not numbers:
            raise ArgumentError("sequence_numbers: pick at least one dead-lettered message.")
        results = await explorer.resubmit(
            self.codec,
            entity,
            body.get("subscription") or None,
            numbers,
            self._max_size(entity.spec.namespace),
            self._now_ms,
        )
        self._snapshot = None
        return {"results": results}

    async def _api_purge(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        entity = self.entity(str_field(body, "ns", MAX_NAME), str_field(body, "entity", MAX_NAME))
        if body.get("state") == "all":
            return await self._purge_entity(entity)
        result = await explorer.purge(
            entity,
            body.get("subscription") or None,
            str(body.get("state") or "active"),
            self._now_ms,
        )
        log.info(
            "dashboard: purged %s (%s): %d messages",
            result["path"],
            body.get("state"),
            result["removed"],
        )
        self._snapshot = None
        return result

    def _api_create_entity(self, request: Request, principal: Principal) -> dict[str, Any]:
        """A queue or topic created as the admin API creates it (same checks, same catalog)."""
        body = _json_body(request)
        kind = str_field(body, "kind", 10)
        if kind not in ("queue", "topic"):
            raise ArgumentError(f"kind must be 'queue' or 'topic', not {kind!r}")
        given: dict[str, Any] = {"enable_partitioning": bool_field(body, "partitioned", False)}
        if kind == "queue":
            given["requires_session"] = bool_field(body, "requires_session", False)
        entity = self.server.management.create_entity(
            str_field(body, "ns", MAX_NAME), kind, str_field(body, "name", MAX_NAME), given
        )
        log.info("dashboard: created %s %s/%s", kind, entity.spec.namespace, entity.name)
        self._snapshot = None
        return {"namespace": entity.spec.namespace, "entity": entity.name, "kind": kind}

    async def _api_delete_entity(self, request: Request, principal: Principal) -> dict[str, Any]:
        """A queue or topic deleted as the admin API deletes it (its messages are gone)."""
        body = _json_body(request)
        entity = self.entity(str_field(body, "ns", MAX_NAME), str_field(body, "entity", MAX_NAME))
        await self.server.management.delete_entity(entity.spec.namespace, entity.name)
        log.info(
            "dashboard: deleted %s %s/%s", entity.spec.kind, entity.spec.namespace, entity.name
        )
        self._snapshot = None
        return {"namespace": entity.spec.namespace, "entity": entity.name, "deleted": True}

    async def _purge_entity(self, entity: Entity) -> dict[str, Any]:
        """Every message of the entity, all sub-queues and states: the admin API's purge."""
        router = self.server.router
        assert router is not None
        done, committed = explorer.completion()
        counts = router.purge(entity.spec.namespace, entity.name, self._now_ms(), done)
        await committed
        log.info("dashboard: purged every message of %s/%s", entity.spec.namespace, entity.name)
        self._snapshot = None
        return {"path": entity.name, "removed": sum(counts.values()), "locked_kept": 0}

    def _api_close(self, request: Request, principal: Principal) -> dict[str, Any]:
        body = _json_body(request)
        wanted = int_field(body, "id", 0, INT64_MAX)
        for proto in list(self.server.connections):
            if proto.connection_id == wanted:
                proto.close_by_operator("Closed from the sbemu dashboard.")
                log.info("dashboard: closed connection %d", wanted)
                return {"ok": True, "id": wanted}
        raise EntityNotFound(f"No open connection with id {wanted}.")

    # ------------------------------------------------------------------ /metrics
    def _metrics(self, request: Request, params: dict[str, str]) -> Response:
        return text_response(200, metrics.render(self.metric_families()), metrics.CONTENT_TYPE)

    def metric_families(self) -> list[metrics.Family]:
        """Counters straight from the brokers, gauges from the shared snapshot."""
        router = self.server.router
        assert router is not None
        families = []
        for field, name, help_text in metrics.COUNTERS:
            fam = metrics.Family(name, "counter", help_text)
            for entity in router.entities.values():
                for broker in entity.partitions:
                    value = totals([broker.stats])[field]
                    fam.add(
                        value,
                        namespace=entity.spec.namespace,
                        entity=entity.name,
                        partition=str(broker.partition_id),
                    )
            families.append(fam)
        rows = [r for r in self.snapshot()["entities"] if r["kind"] != "topic"]
        for field, name, help_text in metrics.GAUGES:
            fam = metrics.Family(name, "gauge", help_text)
            for row in rows:
                for part in row["partitions"]:
                    fam.add(
                        part[field],
                        namespace=row["namespace"],
                        entity=row["name"],
                        partition=str(part["id"]),
                    )
            families.append(fam)
        size = metrics.Family(
            "sbemu_size_bytes", "gauge", "Bytes of the messages stored per partition (Size)."
        )
        online = metrics.Family(
            "sbemu_partition_online", "gauge", "1 while a partition is in service."
        )
        for row in self.snapshot()["entities"]:
            if row["kind"] == "subscription":
                continue
            for part in row["partitions"]:
                size.add(
                    part["size"],
                    namespace=row["namespace"],
                    entity=row["entity"],
                    partition=str(part["id"]),
                )
                online.add(
                    1 if part["online"] else 0,
                    namespace=row["namespace"],
                    entity=row["entity"],
                    partition=str(part["id"]),
                )
        families += [size, online]
        assert self.server.services is not None
        stats = self.server.services.stats
        namespaces = [ns.name for ns in self.server.config.namespaces]
        for attr, name, help_text in metrics.NAMESPACE_COUNTERS:
            fam = metrics.Family(name, "counter", help_text)
            table = getattr(stats, attr)
            for ns in namespaces:
                fam.add(table.get(ns.lower(), 0), namespace=ns)
            families.append(fam)
        active = metrics.Family(
            "sbemu_active_connections", "gauge", "Open AMQP connections (ActiveConnections)."
        )
        by_ns: dict[str, int] = {ns.lower(): 0 for ns in namespaces}
        for proto in list(self.server.connections):
            info = proto.describe()
            if info is not None:
                key = str(info["namespace"]).lower()
                by_ns[key] = by_ns.get(key, 0) + 1
        for ns in namespaces:
            active.add(by_ns.get(ns.lower(), 0), namespace=ns)
        up = metrics.Family("sbemu_uptime_seconds", "gauge", "Seconds since the server started.")
        up.add(round(self.server.clock() - self.server.started_at, 3))
        return families + [active, up]


# ------------------------------------------------------------------------ helpers
def _offer(q: asyncio.Queue[str], event: str) -> None:
    """Queue an event for one SSE client; a client too slow to keep up loses old ticks."""
    if q.full():
        try:
            q.get_nowait()
        except asyncio.QueueEmpty:
            pass
    q.put_nowait(event)


def _dir_size(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _q(request: Request, name: str, default: str | None = None) -> str:
    values = request.query.get(name)
    if values:
        return values[0]
    if default is None:
        raise ArgumentError(f"query parameter '{name}' is required.")
    return default


def _q_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    return int_field({name: _q(request, name, "")}, name, low, high, default)


def _json_body(request: Request) -> dict[str, Any]:
    """The POST's JSON object, bounded (depth, numbers: sbemu.admin.bounded)."""
    return json_object(request.body, MAX_BODY)


def _html_headers() -> list[tuple[str, str]]:
    return [
        ("content-type", "text/html; charset=utf-8"),
        ("cache-control", "no-cache"),
        ("x-frame-options", "DENY"),
        (
            "content-security-policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "connect-src 'self'; frame-ancestors 'none'",
        ),
    ]
