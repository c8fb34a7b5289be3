"""The admin port's route table: method + pattern + the rule it needs -> handler.

A route cannot be added without its :class:`~sbemu.admin.policy.Rule` (a required argument),
and :meth:`HttpRoutes.dispatch` asks the one :class:`~sbemu.admin.policy.AccessPolicy` before
any handler runs; :meth:`HttpRoutes.table` lists every route with its rule (for the docs table
and the test that checks each route from every kind of origin).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from .http import Handler, Request, Response, json_response
from .policy import AccessPolicy, Refusal, Rule

__all__ = ["HttpRoutes", "RouteInfo"]


@dataclass(frozen=True)
class RouteInfo:
    """One row of the route table."""

    method: str
    pattern: str  # "/partitions" (+ "/..." when prefix)
    prefix: bool
    rule: Rule


@dataclass
class _Route:
    method: str
    segments: tuple[str, ...]
    handler: Handler
    prefix: bool
    rule: Rule

    def match(self, parts: list[str]) -> dict[str, str] | None:
        segs = self.segments
        if len(parts) < len(segs) or (not self.prefix and len(parts) != len(segs)):
            return None
        params: dict[str, str] = {}
        for seg, part in zip(segs, parts, strict=False):
            if seg.startswith("{") and seg.endswith("}"):
                if not part:
                    return None
                params[seg[1:-1]] = part
            elif seg != part:
                return None
        if self.prefix:
            params["rest"] = "/".join(parts[len(segs) :])
        return params

    def rank(self) -> tuple[int, int, int]:
        """Sort key: non-prefix before prefix, then more literal segments, then longer."""
        literals = sum(1 for s in self.segments if not s.startswith("{"))
        return (1 if self.prefix else 0, -literals, -len(self.segments))


def _split(path: str) -> list[str]:
    stripped = path.strip("/")
    return stripped.split("/") if stripped else []


class HttpRoutes:
    """A route table whose every route names its rule; one policy decides every request."""

    def __init__(self, policy: AccessPolicy) -> None:
        self.policy = policy
        self._routes: list[_Route] = []

    def add(
        self, method: str, pattern: str, handler: Handler, *, rule: Rule, prefix: bool = False
    ) -> None:
        """pattern: "/api/entities/{ns}/{entity}"; {name} matches one segment; prefix=True matches
        the pattern and anything under it (params["rest"] holds the remainder). ``rule``: what a
        request needs (sbemu.admin.policy: PUBLIC, READ, MANAGE, a SAS rule, AMQP)."""
        if not isinstance(rule, Rule):
            raise TypeError(f"route {method} {pattern}: rule must be a policy Rule, not {rule!r}")
        self._routes.append(_Route(method.upper(), tuple(_split(pattern)), handler, prefix, rule))
        self._routes.sort(key=_Route.rank)

    def table(self) -> list[RouteInfo]:
        """Every route with its rule, in matching order."""
        return [
            RouteInfo(r.method, "/" + "/".join(r.segments), r.prefix, r.rule) for r in self._routes
        ]

    def find(self, method: str, path: str) -> tuple[_Route, dict[str, str]] | None | list[str]:
        """The route and params; None when no pattern matches; the allowed methods on 405."""
        parts = _split(path)
        best: tuple[tuple[str, ...], bool] | None = None
        allowed: list[str] = []
        # The most specific matching pattern owns the path: a method it lacks is a 405, never a
        # fall-through to a broader prefix route (GET /api/purge must not reach the Atom API).
        for want in (method, "GET") if method == "HEAD" else (method,):
            for route in self._routes:
                params = route.match(parts)
                if params is None:
                    continue
                if best is None:
                    best = (route.segments, route.prefix)
                if (route.segments, route.prefix) != best:
                    continue
                if route.method == want:
                    return route, params
                if route.method not in allowed:
                    allowed.append(route.method)
        return allowed or None

    def dispatch(self, request: Request) -> Response | Awaitable[Response]:
        found = self.find(request.method, request.path)
        if found is None:
            return json_response(404, {"error": "not found", "path": request.path})
        if isinstance(found, list):
            if "GET" in found and "HEAD" not in found:
                found.append("HEAD")
            resp = json_response(
                405, {"error": f"method {request.method} not allowed", "allow": found}
            )
            resp.headers.append(("Allow", ", ".join(found)))
            return resp
        route, params = found
        verdict = self.policy.decide(route.rule, request, params)
        if isinstance(verdict, Refusal):
            return route.rule.refuse(request, verdict.status, verdict.message)
        request.grant = verdict
        return route.handler(request, params)
