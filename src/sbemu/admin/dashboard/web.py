"""The web dashboard on the admin port: its routes, pages, JSON reads and live events (SSE).

The page is package data in admin/static/ (no build step, no CDN). The rate sampler ticks once
a second on the running loop and feeds every live (SSE) client, whose number is capped; a client
too slow to keep up loses old ticks, never slows the sampler.
"""

from __future__ import annotations

import asyncio
import json
import logging
import mimetypes
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from ...auth.sas import SAS_PREFIX
from ...errors import ArgumentError, ServiceBusError
from .. import explorer, metrics
from ..access import COOKIE_NAME, Access, Principal
from ..atom import empty_feed
from ..bounded import INT64_MAX, int_field
from ..http import Request, Response, json_response, text_response
from ..msgsearch import MessageSearch
from ..notfound import favicon, not_found
from ..policy import LOGIN, MANAGE, PUBLIC, READ
from ..routes import HttpRoutes
from ..serverstatus import ServerStatus
from ..sessionlist import session_list
from .actions import DashboardActions
from .data import DashboardData
from .scrape import metric_families

log = logging.getLogger("sbemu.dashboard")

SAMPLE_INTERVAL = 1.0  # seconds between rate samples (and SSE ticks)
MAX_SSE_CLIENTS = 32


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


class Dashboard:
    """State and handlers of the dashboard for one running Server; `codec` is the wire format
    the message explorer decodes and encodes with (see explorer.WireCodec)."""

    def __init__(self, server: ServerStatus, access: Access, codec: explorer.WireCodec) -> None:
        self.server = server
        self.access = access
        self.codec = codec
        self.data = DashboardData(server, access)
        self.actions = DashboardActions(self.data, codec)
        self._subscribers: set[asyncio.Queue[str]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._static = resources.files("sbemu.admin") / "static"

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
            point = self.data.sample()
            if point is not None and self._subscribers:
                payload = self.data.tick_payload(point)
                event = "event: tick\ndata: " + json.dumps(payload) + "\n\n"
                for q in list(self._subscribers):
                    _offer(q, event)
        except Exception:  # a guard: the sampler must keep going
            log.exception("dashboard sample failed")
        self._timer = loop.call_later(SAMPLE_INTERVAL, self._tick)

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
        for path, handler in self.actions.routes():
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
            return empty_feed(request, self.data.now_ms())
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

    def _session(self, request: Request, principal: Principal) -> dict[str, Any]:
        return {
            "csrf": self.access.csrf_token(principal),
            "key_name": principal.key_name or None,
            "login_required": self.access.login_required,
        }

    async def _api_overview(self, request: Request, principal: Principal) -> dict[str, Any]:
        return await self.data.overview()

    def _api_entities(self, request: Request, principal: Principal) -> dict[str, Any]:
        return self.data.snapshot()

    def _api_entity(self, request: Request, principal: Principal) -> dict[str, Any]:
        return self.data.entity_detail(_q(request, "ns"), _q(request, "entity"))

    def _api_messages(self, request: Request, principal: Principal) -> dict[str, Any]:
        entity = self.data.entity(_q(request, "ns"), _q(request, "entity"))
        return explorer.peek(
            self.codec,
            entity,
            _q(request, "subscription", "") or None,
            _q(request, "state", "active"),
            _q_int(request, "from", 0, 0, INT64_MAX),
            _q_int(request, "count", 20, 1, 1000),
            self.data.now_ms(),
            MessageSearch.parse(_q(request, "message_id", ""), _q(request, "property", "")),
        )

    def _api_sessions(self, request: Request, principal: Principal) -> dict[str, Any]:
        entity = self.data.entity(_q(request, "ns"), _q(request, "entity"))
        return session_list(entity, _q(request, "subscription", "") or None, self.data.now_ms())

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
        hello = {"history": list(self.data.history.points), "totals": self.data.totals()}
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

    def _metrics(self, request: Request, params: dict[str, str]) -> Response:
        return text_response(200, metrics.render(metric_families(self.data)), metrics.CONTENT_TYPE)


def _offer(q: asyncio.Queue[str], event: str) -> None:
    """Queue an event for one SSE client; a client too slow to keep up loses old ticks."""
    if q.full():
        try:
            q.get_nowait()
        except asyncio.QueueEmpty:
            pass
    q.put_nowait(event)


def _q(request: Request, name: str, default: str | None = None) -> str:
    values = request.query.get(name)
    if values:
        return values[0]
    if default is None:
        raise ArgumentError(f"query parameter '{name}' is required.")
    return default


def _q_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    return int_field({name: _q(request, name, "")}, name, low, high, default)


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
