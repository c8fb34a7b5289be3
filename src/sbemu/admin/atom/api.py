"""The API's handlers: each request routed by its path to the queue, topic, subscription, rule,
list or namespace handler, the management operation run, the answer written by AtomDocuments."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ...auth.sas import normalize_entity_path
from ...errors import EntityNotFound, ServiceBusError
from ...partitions import Entity, RuleDefinitionError, StorageLayoutError, StoreError
from ..http import Request, Response
from ..management import Management
from ..notfound import browser_not_found, for_api_clients
from ..policy import Need, Resource, Rule
from ..routes import HttpRoutes
from .parse import host_of, paging, parse_body, rule_source
from .render import AtomDocuments
from .schema import FIELDS, XML_TYPE, AtomError

log = logging.getLogger("sbemu.admin")


class AtomApi:
    """Request handlers of the management API over a Management."""

    def __init__(self, management: Management, clock: Callable[[], float] = time.time) -> None:
        self.m = management
        self.docs = AtomDocuments(management, clock)

    def handle(self, request: Request, params: dict[str, str]) -> Response | Any:
        return self._guarded(request)

    async def _guarded(self, request: Request) -> Response:
        ns = self.m.namespace(host_of(request))
        try:  # authorised by the route's rule (sbemu.admin.policy) before this runs
            return await self._route(request, ns.name)
        except AtomError as exc:
            return self.docs.error(request, ns.name, exc.status, exc.detail)
        except RuleDefinitionError as exc:
            return self.docs.error(request, ns.name, 400, exc.description)
        except StorageLayoutError as exc:  # the data dir holds the entity otherwise [P4]
            return self.docs.error(request, ns.name, 409, str(exc))
        except ServiceBusError as exc:
            return self.docs.error(request, ns.name, exc.status_code, exc.description)
        except (OSError, StoreError) as exc:
            # The data dir cannot be written (read-only, full, failing disk): nothing was
            # changed (the catalog is written first and rolled back), retry later.
            log.warning(
                "admin %s %s: the data dir cannot be written: %s", request.method, request.path, exc
            )
            return self.docs.error(
                request,
                ns.name,
                503,
                f"The server is busy: the change cannot be stored now ({exc}). Retry later.",
            )

    def resource(self, request: Request, params: dict[str, str]) -> Resource:
        """What a token must cover: the entity path in the namespace the Host names."""
        return Resource(
            self.m.namespace(host_of(request)).name, normalize_entity_path(request.path)
        )

    def refusal(self, request: Request, status: int, detail: str) -> Response:
        """A request the access policy refused, as an Atom error (a browser's request for a
        path that names nothing: a plain 404, admin/notfound.py)."""
        plain = browser_not_found(request, lambda r: _names_resource(self.m, r))
        if plain is not None:
            return plain
        return self.docs.error(request, self.m.namespace(host_of(request)).name, status, detail)

    async def _route(self, request: Request, ns: str) -> Response:
        parts = [p for p in request.path.split("/") if p]
        if not parts:  # an empty entity name (the SDKs' get_queue(""), create_queue(""))
            if request.method in ("GET", "HEAD"):
                return self.docs.empty_feed(request)  # what Azure lists at its root
            raise AtomError(
                400,
                "SubCode=40000. Bad Request. The entity name is empty: name a queue, topic, "
                "subscription or rule in the request path.",
            )
        low = [p.lower() for p in parts]
        method = request.method
        if low[0] == "$namespaceinfo" and len(parts) == 1:
            self._only(method, "GET")
            return self.docs.namespace_info(request, ns)
        if low[0] == "$resources":
            self._only(method, "GET")
            if len(parts) == 2 and low[1] in ("queues", "topics"):
                return self._list_entities(request, ns, low[1][:-1])
            raise AtomError(404, f"The resource '{request.path}' does not exist.")
        if "subscriptions" in low[1:]:
            i = low.index("subscriptions", 1)
            topic = "/".join(parts[:i])
            rest = parts[i + 1 :]
            if not rest:
                self._only(method, "GET")
                return self._list_subscriptions(request, ns, topic)
            sub = rest[0]
            if len(rest) == 1:
                return await self._subscription(request, ns, topic, sub)
            if rest[1].lower() == "rules":
                if len(rest) == 2:
                    self._only(method, "GET")
                    return self._list_rules(request, ns, topic, sub)
                if len(rest) == 3:
                    return self._rule(request, ns, topic, sub, rest[2])
            raise AtomError(404, f"The resource '{request.path}' does not exist.")
        return await self._entity(request, ns, "/".join(parts))

    @staticmethod
    def _only(method: str, allowed: str) -> None:
        if method != allowed and not (allowed == "GET" and method == "HEAD"):
            raise AtomError(405, f"The method {method} is not allowed here.")

    def _list_entities(self, request: Request, ns: str, kind: str) -> Response:
        skip, top = paging(request)
        found = self.m.entities(ns, kind)
        entries = [self.docs.entity_entry(request, ns, e) for e in found[skip : skip + top]]
        return self.docs.feed(
            request, "Queues" if kind == "queue" else "Topics", entries, len(found)
        )

    def _list_subscriptions(self, request: Request, ns: str, topic: str) -> Response:
        entity = self._topic(ns, topic)
        skip, top = paging(request)
        subs = self.m.subscriptions(entity)
        entries = [
            self.docs.subscription_entry(request, ns, entity, d) for d in subs[skip : skip + top]
        ]
        return self.docs.feed(request, "Subscriptions", entries, len(subs))

    def _list_rules(self, request: Request, ns: str, topic: str, sub: str) -> Response:
        entity = self._topic(ns, topic)
        desc = self.m.subscription(entity, sub)
        if desc is None:
            raise EntityNotFound(f"Entity '{ns}:Topic:{topic}|{sub}' was not found.")
        skip, top = paging(request)
        # in name order, as Azure lists them ($Default, correlationRule, sqlRule)
        rules = sorted(self.m.rules(entity, sub), key=lambda r: (r.name.lower(), r.name))
        entries = [
            self.docs.rule_entry(request, ns, entity, desc["name"], r)
            for r in rules[skip : skip + top]
        ]
        return self.docs.feed(request, "Rules", entries, len(rules))

    def _topic(self, ns: str, topic: str) -> Entity:
        entity = self.m.entity(ns, topic)
        if entity is None or entity.spec.kind != "topic":
            raise EntityNotFound(f"Entity '{ns}:Topic:{topic}' was not found.")
        return entity

    async def _entity(self, request: Request, ns: str, name: str) -> Response:
        method = request.method
        if method in ("GET", "HEAD"):
            entity = self.m.entity(ns, name)
            if entity is None:
                return self.docs.empty_feed(request)
            return self.docs.entry_response(200, self.docs.entity_entry(request, ns, entity))
        if method == "DELETE":
            if self.m.entity(ns, name) is None:
                raise EntityNotFound(f"Entity '{ns}:Queue:{name}' was not found.")
            await self.m.delete_entity(ns, name)
            return Response(200, b"", [("Content-Type", XML_TYPE)])
        if method != "PUT":
            raise AtomError(405, f"The method {method} is not allowed here.")
        element, given, _ = parse_body(request.body)
        if element not in ("QueueDescription", "TopicDescription"):
            raise AtomError(400, f"Expected a QueueDescription or TopicDescription, not {element}.")
        kind = FIELDS[element][0]
        if request.headers.get("if-match"):
            entity = self.m.update_entity(ns, kind, name, given)
            return self.docs.entry_response(200, self.docs.entity_entry(request, ns, entity))
        entity = self.m.create_entity(ns, kind, name, given)
        return self.docs.entry_response(201, self.docs.entity_entry(request, ns, entity))

    async def _subscription(self, request: Request, ns: str, topic: str, sub: str) -> Response:
        method = request.method
        if method in ("GET", "HEAD"):
            entity = self.m.entity(ns, topic)
            desc = (
                self.m.subscription(entity, sub)
                if entity is not None and entity.spec.kind == "topic"
                else None
            )
            if entity is None or desc is None:
                # unlike a queue or topic (an empty feed), a missing subscription is a 404: the
                # Java admin client reads no feed here (getSubscriptionExists)
                raise EntityNotFound(f"Entity '{ns}:Topic:{topic}|{sub}' was not found.")
            return self.docs.entry_response(
                200, self.docs.subscription_entry(request, ns, entity, desc)
            )
        if method == "DELETE":
            await self.m.delete_subscription(ns, topic, sub)
            return Response(200, b"", [("Content-Type", XML_TYPE)])
        if method != "PUT":
            raise AtomError(405, f"The method {method} is not allowed here.")
        element, given, extra = parse_body(request.body)
        if element != "SubscriptionDescription":
            raise AtomError(400, f"Expected a SubscriptionDescription, not {element}.")
        entity = self._topic(ns, topic)
        if request.headers.get("if-match"):
            desc = self.m.update_subscription(ns, topic, sub, given)
            return self.docs.entry_response(
                200, self.docs.subscription_entry(request, ns, entity, desc)
            )
        default_rule = extra.get("default_rule")
        desc = self.m.create_subscription(ns, topic, sub, given, default_rule)
        return self.docs.entry_response(
            201, self.docs.subscription_entry(request, ns, entity, desc)
        )

    def _rule(self, request: Request, ns: str, topic: str, sub: str, name: str) -> Response:
        method = request.method
        entity = self.m.entity(ns, topic)
        if method in ("GET", "HEAD"):
            if (
                entity is None
                or entity.spec.kind != "topic"
                or self.m.subscription(entity, sub) is None
            ):
                raise EntityNotFound(f"Entity '{ns}:Topic:{topic}|{sub}' was not found.")
            rule = next(
                (r for r in self.m.rules(entity, sub) if r.name.lower() == name.lower()), None
            )
            if rule is None:
                raise EntityNotFound(f"Entity '{ns}:Topic:{topic}|{sub}|{name}' was not found.")
            return self.docs.entry_response(
                200, self.docs.rule_entry(request, ns, entity, sub, rule)
            )
        if method == "DELETE":
            self.m.delete_rule(ns, topic, sub, name)
            return Response(200, b"", [("Content-Type", XML_TYPE)])
        if method != "PUT":
            raise AtomError(405, f"The method {method} is not allowed here.")
        element, _, extra = parse_body(request.body)
        if element != "RuleDescription":
            raise AtomError(400, f"Expected a RuleDescription, not {element}.")
        source = rule_source(name, extra["rule"])
        entity = self._topic(ns, topic)
        if request.headers.get("if-match"):
            rule = self.m.update_rule(ns, topic, sub, source)
            return self.docs.entry_response(
                200, self.docs.rule_entry(request, ns, entity, sub, rule)
            )
        rule = self.m.create_rule(ns, topic, sub, source)
        return self.docs.entry_response(201, self.docs.rule_entry(request, ns, entity, sub, rule))


def add_atom_routes(routes: HttpRoutes, management: Management, *, root: bool = False) -> None:
    """The management API: everything not claimed by a more specific route (a browser's
    request for a path that names nothing gets a plain 404: admin/notfound.py). Every request
    needs a SAS token whose audience covers the path; writes need Manage (as Azure).
    ``root``: GET and HEAD of ``/`` too (where no dashboard claims them: Azure's 443)."""
    api = AtomApi(management, management.clock)
    rule = Rule(Need.SAS, audience="the path", locate=api.resource, refuse=api.refusal)
    handler = for_api_clients(api.handle, lambda request: _names_resource(management, request))
    for method in ("GET", "HEAD", "PUT", "DELETE"):
        routes.add(method, "/", handler, rule=rule, prefix=True)
    # The root itself (an empty entity name): GET is the dashboard's page unless it carries
    # an api-version (sbemu.admin.dashboard answers it with empty_feed); writes are ours.
    for method in ("PUT", "DELETE"):
        routes.add(method, "/", api.handle, rule=rule)
    if root:
        for method in ("GET", "HEAD"):
            routes.add(method, "/", handler, rule=rule)


def _names_resource(management: Management, request: Request) -> bool:
    """Whether a path is an API resource ($namespaceinfo, $Resources/...) or lies under an
    existing entity (whose name may itself hold slashes)."""
    parts = [p for p in request.path.split("/") if p]
    if not parts or parts[0].startswith("$"):
        return True
    ns = management.namespace(host_of(request)).name
    return any(
        management.entity(ns, "/".join(parts[:i])) is not None for i in range(1, len(parts) + 1)
    )
