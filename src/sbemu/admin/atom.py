"""The Service Bus management REST API (Atom/XML) that every SDK's administration client speaks.

Paths (all with ``?api-version=...``): ``/{entity}`` GET/PUT/DELETE (queue or topic; PUT with
``If-Match: *`` updates, without it creates), ``/{topic}/Subscriptions/{sub}`` and
``/{topic}/Subscriptions/{sub}/Rules/{rule}`` likewise, lists at ``/$Resources/Queues``,
``/$Resources/Topics``, ``/{topic}/Subscriptions``, ``/{topic}/Subscriptions/{sub}/Rules``
(``$skip``/``$top``, a ``rel="next"`` link while more remain) and ``/$namespaceinfo``.
Descriptions carry the SDK models' elements (QueueDescription, TopicDescription,
SubscriptionDescription, RuleDescription, NamespaceInfo) with runtime counts summed over every
partition [P17, P18]; a partitioned entity reports MaxSizeInMegabytes x partitions [P5].

Like Azure: a GET of a missing entity answers 200 with an empty feed (the SDKs turn it into
not-found), errors are ``<Error><Code>..</Code><Detail>..</Detail></Error>`` with 400, 401,
403 (quota), 404, 409 or 503 (a partition is out of service). Every request needs a SAS token
in ``Authorization`` (verified like ``$cbs`` tokens, by the admin port's access policy:
sbemu.admin.policy); writes need Manage.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

from ..auth.sas import normalize_entity_path
from ..config import TIMESPAN_MAX_MS, format_duration_ms, parse_duration_ms
from ..errors import ArgumentError, EntityNotFound, ServiceBusError
from ..partitions import (
    Entity,
    RuleDefinitionError,
    RuleSource,
    StorageLayoutError,
    StoreError,
    subscription_queue,
)
from .authrules import authorization_rules_xml
from .bounded import BodyError, xml_document
from .http import Request, Response
from .keyvalues import key_values_xml, read_key_values
from .management import Management
from .notfound import browser_not_found, for_api_clients
from .policy import Need, Resource, Rule
from .routes import HttpRoutes

__all__ = ["add_atom_routes", "empty_feed"]

log = logging.getLogger("sbemu.admin")

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
SB2 = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"
API_VERSION = "2021-05"
TIMESPAN_MAX_TEXT = "P10675199DT2H48M5.4775807S"
XML_TYPE = "application/atom+xml;type=entry;charset=utf-8"
FEED_TYPE = "application/atom+xml;type=feed;charset=utf-8"
MORE_INFO = "To know more visit https://aka.ms/sbResourceMgrExceptions."

# (element, description key, type) in the SDK models' order. Types: dur, int, bool, str, raw,
# and the computed ones (size, count, created, updated, accessed, counts, avail, maxsize, fwd).
QUEUE_FIELDS = (
    ("LockDuration", "lock_duration_ms", "dur"),
    ("MaxSizeInMegabytes", "max_size_mb", "maxsize"),
    ("RequiresDuplicateDetection", "requires_duplicate_detection", "bool"),
    ("RequiresSession", "requires_session", "bool"),
    ("DefaultMessageTimeToLive", "default_message_ttl_ms", "dur"),
    ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration", "bool"),
    ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_window_ms", "dur"),
    ("MaxDeliveryCount", "max_delivery_count", "int"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("SizeInBytes", None, "size"),
    ("MessageCount", None, "count"),
    ("IsAnonymousAccessible", "is_anonymous_accessible", "bool"),
    ("AuthorizationRules", "authorization_rules", "raw"),
    ("Status", "status", "str"),
    ("ForwardTo", "forward_to", "fwd"),
    ("UserMetadata", "user_metadata", "str"),
    ("CreatedAt", None, "created"),
    ("UpdatedAt", None, "updated"),
    ("AccessedAt", None, "accessed"),
    ("SupportOrdering", "support_ordering", "bool"),
    ("CountDetails", None, "counts"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle_ms", "dur"),
    ("EnablePartitioning", "enable_partitioning", "bool"),
    ("EntityAvailabilityStatus", None, "avail"),
    ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to", "fwd"),
    ("EnableExpress", "enable_express", "bool"),
    ("MaxMessageSizeInKilobytes", "max_message_size_kb", "int"),
)
TOPIC_FIELDS = (
    ("DefaultMessageTimeToLive", "default_message_ttl_ms", "dur"),
    ("MaxSizeInMegabytes", "max_size_mb", "maxsize"),
    ("RequiresDuplicateDetection", "requires_duplicate_detection", "bool"),
    ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_window_ms", "dur"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("SizeInBytes", None, "size"),
    ("FilteringMessagesBeforePublishing", "filtering_messages_before_publishing", "bool"),
    ("IsAnonymousAccessible", "is_anonymous_accessible", "bool"),
    ("AuthorizationRules", "authorization_rules", "raw"),
    ("Status", "status", "str"),
    ("CreatedAt", None, "created"),
    ("UpdatedAt", None, "updated"),
    ("AccessedAt", None, "accessed"),
    ("SupportOrdering", "support_ordering", "bool"),
    ("CountDetails", None, "counts"),
    ("SubscriptionCount", None, "subcount"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle_ms", "dur"),
    ("EnablePartitioning", "enable_partitioning", "bool"),
    ("EntityAvailabilityStatus", None, "avail"),
    ("EnableSubscriptionPartitioning", "enable_subscription_partitioning", "bool"),
    ("EnableExpress", "enable_express", "bool"),
    ("UserMetadata", "user_metadata", "str"),
    ("MaxMessageSizeInKilobytes", "max_message_size_kb", "int"),
)
SUBSCRIPTION_FIELDS = (
    ("LockDuration", "lock_duration_ms", "dur"),
    ("RequiresSession", "requires_session", "bool"),
    ("DefaultMessageTimeToLive", "default_message_ttl_ms", "dur"),
    ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration", "bool"),
    (
        "DeadLetteringOnFilterEvaluationExceptions",
        "dead_lettering_on_filter_evaluation_exceptions",
        "bool",
    ),
    ("MessageCount", None, "count"),
    ("MaxDeliveryCount", "max_delivery_count", "int"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("Status", "status", "str"),
    ("ForwardTo", "forward_to", "fwd"),
    ("CreatedAt", None, "created"),
    ("UpdatedAt", None, "updated"),
    ("AccessedAt", None, "accessed"),
    ("CountDetails", None, "counts"),
    ("UserMetadata", "user_metadata", "str"),
    ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to", "fwd"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle_ms", "dur"),
    ("EntityAvailabilityStatus", None, "avail"),
)
FIELDS = {
    "QueueDescription": ("queue", QUEUE_FIELDS),
    "TopicDescription": ("topic", TOPIC_FIELDS),
    "SubscriptionDescription": ("subscription", SUBSCRIPTION_FIELDS),
}
CORRELATION_FIELDS = (
    "CorrelationId",
    "MessageId",
    "To",
    "ReplyTo",
    "Label",
    "SessionId",
    "ReplyToSessionId",
    "ContentType",
)


class AtomError(Exception):
    """An error answered as Azure's <Error> document."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


# ------------------------------------------------------------------ value formatting
def _time(ms: int) -> str:
    stamp = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _duration(ms: int) -> str:
    """xs:duration text as Azure writes it (P1DT2H3M4.5S; TimeSpan.MaxValue exactly)."""
    if ms >= TIMESPAN_MAX_MS:
        return TIMESPAN_MAX_TEXT
    return format_duration_ms(ms)


def _bool(value: object) -> str:
    return "true" if value else "false"


def _el(name: str, text: object) -> str:
    return f"<{name}>{escape(str(text))}</{name}>"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


# ------------------------------------------------------------------ the API
class AtomApi:
    """Request handlers of the management API over a Management."""

    def __init__(self, management: Management, clock: Callable[[], float] = time.time) -> None:
        self.m = management
        self.clock = clock

    # -------------------------------------------------------------- plumbing
    def handle(self, request: Request, params: dict[str, str]) -> Response | Any:
        return self._guarded(request)

    async def _guarded(self, request: Request) -> Response:
        ns = self.m.namespace(_host(request))
        try:  # authorised by the route's rule (sbemu.admin.policy) before this runs
            return await self._route(request, ns.name)
        except AtomError as exc:
            return self._error(request, ns.name, exc.status, exc.detail)
        except RuleDefinitionError as exc:
            return self._error(request, ns.name, 400, exc.description)
        except StorageLayoutError as exc:  # the data dir holds the entity otherwise [P4]
            return self._error(request, ns.name, 409, str(exc))
        except ServiceBusError as exc:
            return self._error(request, ns.name, exc.status_code, exc.description)
        except (OSError, StoreError) as exc:
            # The data dir cannot be written (read-only, full, failing disk): nothing was
            # changed (the catalog is written first and rolled back), retry later.
            log.warning(
                "admin %s %s: the data dir cannot be written: %s", request.method, request.path, exc
            )
            return self._error(
                request,
                ns.name,
                503,
                f"The server is busy: the change cannot be stored now ({exc}). Retry later.",
            )

    def _error(self, request: Request, ns: str, status: int, detail: str) -> Response:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%m/%d/%Y %I:%M:%S %p")
        tracker = f"{ns}.servicebus.windows.net:{request.path.strip('/')}"
        text = (
            f"{detail} {MORE_INFO} TrackingId:{uuid.uuid4()}_G0, SystemTracker:{tracker}, "
            f"Timestamp:{stamp}"
        )
        body = f"<Error><Code>{status}</Code><Detail>{escape(text)}</Detail></Error>"
        return Response(status, body.encode(), [("Content-Type", "application/xml; charset=utf-8")])

    def resource(self, request: Request, params: dict[str, str]) -> Resource:
        """What a token must cover: the entity path in the namespace the Host names."""
        return Resource(self.m.namespace(_host(request)).name, normalize_entity_path(request.path))

    def refusal(self, request: Request, status: int, detail: str) -> Response:
        """A request the access policy refused, as an Atom error (a browser's request for a
        path that names nothing: a plain 404, admin/notfound.py)."""
        plain = browser_not_found(request, lambda r: _names_resource(self.m, r))
        if plain is not None:
            return plain
        return self._error(request, self.m.namespace(_host(request)).name, status, detail)

    def _base(self, request: Request) -> str:
        return f"https://{request.headers.get('host', 'localhost')}"

    async def _route(self, request: Request, ns: str) -> Response:
        parts = [p for p in request.path.split("/") if p]
        if not parts:  # an empty entity name (the SDKs' get_queue(""), create_queue(""))
            if request.method in ("GET", "HEAD"):
                return self._empty_feed(request)  # what Azure lists at its root
            raise AtomError(
                400,
                "SubCode=40000. Bad Request. The entity name is empty: name a queue, topic, "
                "subscription or rule in the request path.",
            )
        low = [p.lower() for p in parts]
        method = request.method
        if low[0] == "$namespaceinfo" and len(parts) == 1:
            self._only(method, "GET")
            return self._namespace_info(request, ns)
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

    # -------------------------------------------------------------- documents
    def _entry(
        self,
        request: Request,
        ns: str,
        path: str,
        title: str,
        created: int,
        updated: int,
        content: str,
    ) -> str:
        url = f"{self._base(request)}/{quote(path, safe='/$')}?api-version={API_VERSION}"
        return (
            f'<entry xmlns="{ATOM}"><id>{escape(url)}</id><title type="text">{escape(title)}'
            f"</title><published>{_time(created)}</published><updated>{_time(updated)}</updated>"
            f"<author><name>{escape(ns)}</name></author>"
            f'<link rel="self" href="{escape(url)}"/>'
            f'<content type="application/xml">{content}</content></entry>'
        )

    def _feed(self, request: Request, title: str, entries: list[str], total: int) -> Response:
        skip, top = _paging(request)
        base = f"{self._base(request)}{quote(request.path)}"
        self_url = f"{base}?$skip={skip}&$top={top}&api-version={API_VERSION}"
        links = f'<link rel="self" href="{escape(self_url)}"/>'
        if skip + top < total:
            nxt = f"{base}?$skip={skip + top}&$top={top}&api-version={API_VERSION}"
            links += f'<link rel="next" href="{escape(nxt)}"/>'
        now = _time(int(self.clock() * 1000))
        body = (
            f'<?xml version="1.0" encoding="utf-8"?><feed xmlns="{ATOM}">'
            f'<title type="text">{escape(title)}</title><id>{escape(self_url)}</id>'
            f"<updated>{now}</updated>{links}{''.join(entries)}</feed>"
        )
        return Response(200, body.encode(), [("Content-Type", FEED_TYPE)])

    def _empty_feed(self, request: Request) -> Response:
        return empty_feed(request, int(self.clock() * 1000))

    def _entry_response(self, status: int, entry: str) -> Response:
        body = '<?xml version="1.0" encoding="utf-8"?>' + entry
        return Response(status, body.encode(), [("Content-Type", XML_TYPE)])

    def _description(
        self, request: Request, element: str, desc: dict[str, Any], entity: Entity, prefix: str
    ) -> str:
        kind, fields = FIELDS[element]
        counts = self.m.counts(entity, prefix)
        created = int(desc.get("created_ms") or 0)
        updated = int(desc.get("updated_ms") or created)
        accessed = max(entity.accessed_ms, updated)
        out = [f'<{element} xmlns="{SB}" xmlns:i="{XSI}">']
        for name, key, typ in fields:
            value: Any = desc.get(key) if key else None
            if typ == "dur":
                out.append(_el(name, _duration(int(value))))
            elif typ == "int":
                out.append(_el(name, int(value)))
            elif typ == "bool":
                out.append(_el(name, _bool(value)))
            elif typ == "str":
                if value is not None:
                    out.append(_el(name, value))
            elif typ == "fwd":  # Azure's form: sb://<namespace host>/<entity path>
                if value:
                    out.append(_el(name, f"sb://{_host(request) or 'localhost'}/{value}"))
            elif typ == "raw":  # AuthorizationRules, in Azure's form (admin/authrules.py)
                rules = authorization_rules_xml(value, _time(created), _time(updated))
                out.append(f"<{name}>{rules}</{name}>")
            elif typ == "maxsize":  # [P5] per-partition size x partition count
                out.append(_el(name, int(value) * entity.spec.partition_count))
            elif typ == "size":
                out.append(_el(name, counts["size"]))
            elif typ == "count":
                out.append(
                    _el(
                        name,
                        counts["active"]
                        + counts["deferred"]
                        + counts["scheduled"]
                        + counts["dead_letter"]
                        + counts["transfer_dead_letter"],
                    )
                )
            elif typ == "created":
                out.append(_el(name, _time(created)))
            elif typ == "updated":
                out.append(_el(name, _time(updated)))
            elif typ == "accessed":
                out.append(_el(name, _time(accessed)))
            elif typ == "subcount":
                out.append(_el(name, len(self.m.subscriptions(entity))))
            elif typ == "avail":
                out.append(_el(name, self.m.availability(entity)))
            elif typ == "counts":
                out.append(
                    f'<CountDetails xmlns:d2p1="{SB2}">'
                    f"<d2p1:ActiveMessageCount>{counts['active'] + counts['deferred']}"
                    "</d2p1:ActiveMessageCount>"
                    f"<d2p1:DeadLetterMessageCount>{counts['dead_letter']}"
                    "</d2p1:DeadLetterMessageCount>"
                    f"<d2p1:ScheduledMessageCount>{counts['scheduled']}"
                    "</d2p1:ScheduledMessageCount>"
                    f"<d2p1:TransferMessageCount>{counts['transfer']}"
                    "</d2p1:TransferMessageCount>"
                    f"<d2p1:TransferDeadLetterMessageCount>{counts['transfer_dead_letter']}"
                    "</d2p1:TransferDeadLetterMessageCount></CountDetails>"
                )
        if kind == "topic" and _api_version(request) >= "2024-05":
            sql, correlation = self.m.filter_counts(entity)  # api-version 2024-05 on
            out.append(_el("SqlFilterCount", sql) + _el("CorrelationFilterCount", correlation))
        out.append(f"</{element}>")
        return "".join(out)

    def _entity_entry(self, request: Request, ns: str, entity: Entity) -> str:
        element = "QueueDescription" if entity.spec.kind == "queue" else "TopicDescription"
        desc = entity.description
        content = self._description(request, element, desc, entity, "main")
        return self._entry(
            request,
            ns,
            entity.name,
            entity.name,
            int(desc.get("created_ms") or 0),
            int(desc.get("updated_ms") or 0),
            content,
        )

    def _subscription_entry(
        self, request: Request, ns: str, entity: Entity, desc: dict[str, Any]
    ) -> str:
        content = self._description(
            request, "SubscriptionDescription", desc, entity, subscription_queue(desc["name"])
        )
        path = f"{entity.name}/Subscriptions/{desc['name']}"
        return self._entry(
            request,
            ns,
            path,
            desc["name"],
            int(desc["created_ms"]),
            int(desc["updated_ms"]),
            content,
        )

    def _rule_entry(
        self, request: Request, ns: str, entity: Entity, sub: str, rule: RuleSource
    ) -> str:
        path = f"{entity.name}/Subscriptions/{sub}/Rules/{rule.name}"
        created = rule.created_ms or int(entity.description.get("created_ms") or 0)
        content = (
            f'<RuleDescription xmlns="{SB}" xmlns:i="{XSI}">{_rule_xml(rule)}'
            f"{_el('CreatedAt', _time(created))}{_el('Name', rule.name)}</RuleDescription>"
        )
        return self._entry(request, ns, path, rule.name, created, created, content)

    # -------------------------------------------------------------- namespace and lists
    def _namespace_info(self, request: Request, ns: str) -> Response:
        cfg = self.m.namespace(ns)
        premium = cfg.premium_partitions is not None
        started = self.m.started_ms
        content = (
            f'<NamespaceInfo xmlns="{SB}" xmlns:i="{XSI}">'
            f"{_el('CreatedTime', _time(started))}"
            f"{_el('MessagingSKU', 'Premium' if premium else 'Standard')}"
            + (_el("MessagingUnits", 1) if premium else "")
            + f"{_el('ModifiedTime', _time(started))}{_el('Name', cfg.name)}"
            f"{_el('NamespaceType', 'Messaging')}</NamespaceInfo>"
        )
        return self._entry_response(
            200,
            self._entry(request, cfg.name, "$namespaceinfo", cfg.name, started, started, content),
        )

    def _list_entities(self, request: Request, ns: str, kind: str) -> Response:
        skip, top = _paging(request)
        found = self.m.entities(ns, kind)
        entries = [self._entity_entry(request, ns, e) for e in found[skip : skip + top]]
        return self._feed(request, "Queues" if kind == "queue" else "Topics", entries, len(found))

    def _list_subscriptions(self, request: Request, ns: str, topic: str) -> Response:
        entity = self._topic(ns, topic)
        skip, top = _paging(request)
        subs = self.m.subscriptions(entity)
        entries = [
            self._subscription_entry(request, ns, entity, d) for d in subs[skip : skip + top]
        ]
        return self._feed(request, "Subscriptions", entries, len(subs))

    def _list_rules(self, request: Request, ns: str, topic: str, sub: str) -> Response:
        entity = self._topic(ns, topic)
        desc = self.m.subscription(entity, sub)
        if desc is None:
            raise EntityNotFound(f"Entity '{ns}:Topic:{topic}|{sub}' was not found.")
        skip, top = _paging(request)
        # in name order, as Azure lists them ($Default, correlationRule, sqlRule) [issue 36]
        rules = sorted(self.m.rules(entity, sub), key=lambda r: (r.name.lower(), r.name))
        entries = [
            self._rule_entry(request, ns, entity, desc["name"], r) for r in rules[skip : skip + top]
        ]
        return self._feed(request, "Rules", entries, len(rules))

    def _topic(self, ns: str, topic: str) -> Entity:
        entity = self.m.entity(ns, topic)
        if entity is None or entity.spec.kind != "topic":
            raise EntityNotFound(f"Entity '{ns}:Topic:{topic}' was not found.")
        return entity

    # -------------------------------------------------------------- queues and topics
    async def _entity(self, request: Request, ns: str, name: str) -> Response:
        method = request.method
        if method in ("GET", "HEAD"):
            entity = self.m.entity(ns, name)
            if entity is None:
                return self._empty_feed(request)
            return self._entry_response(200, self._entity_entry(request, ns, entity))
        if method == "DELETE":
            if self.m.entity(ns, name) is None:
                raise EntityNotFound(f"Entity '{ns}:Queue:{name}' was not found.")
            await self.m.delete_entity(ns, name)
            return Response(200, b"", [("Content-Type", XML_TYPE)])
        if method != "PUT":
            raise AtomError(405, f"The method {method} is not allowed here.")
        element, given, _ = _parse_body(request.body)
        if element not in ("QueueDescription", "TopicDescription"):
            raise AtomError(400, f"Expected a QueueDescription or TopicDescription, not {element}.")
        kind = FIELDS[element][0]
        if request.headers.get("if-match"):
            entity = self.m.update_entity(ns, kind, name, given)
            return self._entry_response(200, self._entity_entry(request, ns, entity))
        entity = self.m.create_entity(ns, kind, name, given)
        return self._entry_response(201, self._entity_entry(request, ns, entity))

    # -------------------------------------------------------------- subscriptions
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
            return self._entry_response(200, self._subscription_entry(request, ns, entity, desc))
        if method == "DELETE":
            await self.m.delete_subscription(ns, topic, sub)
            return Response(200, b"", [("Content-Type", XML_TYPE)])
        if method != "PUT":
            raise AtomError(405, f"The method {method} is not allowed here.")
        element, given, extra = _parse_body(request.body)
        if element != "SubscriptionDescription":
            raise AtomError(400, f"Expected a SubscriptionDescription, not {element}.")
        entity = self._topic(ns, topic)
        if request.headers.get("if-match"):
            desc = self.m.update_subscription(ns, topic, sub, given)
            return self._entry_response(200, self._subscription_entry(request, ns, entity, desc))
        default_rule = extra.get("default_rule")
        desc = self.m.create_subscription(ns, topic, sub, given, default_rule)
        return self._entry_response(201, self._subscription_entry(request, ns, entity, desc))

    # -------------------------------------------------------------- rules
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
            return self._entry_response(200, self._rule_entry(request, ns, entity, sub, rule))
        if method == "DELETE":
            self.m.delete_rule(ns, topic, sub, name)
            return Response(200, b"", [("Content-Type", XML_TYPE)])
        if method != "PUT":
            raise AtomError(405, f"The method {method} is not allowed here.")
        element, _, extra = _parse_body(request.body)
        if element != "RuleDescription":
            raise AtomError(400, f"Expected a RuleDescription, not {element}.")
        source = _rule_source(name, extra["rule"])
        entity = self._topic(ns, topic)
        if request.headers.get("if-match"):
            rule = self.m.update_rule(ns, topic, sub, source)
            return self._entry_response(200, self._rule_entry(request, ns, entity, sub, rule))
        rule = self.m.create_rule(ns, topic, sub, source)
        return self._entry_response(201, self._rule_entry(request, ns, entity, sub, rule))


def empty_feed(request: Request, now_ms: int) -> Response:
    """Azure's answer to a GET of a missing entity (or of the namespace root, an empty name):
    200 with a feed without entries, which the SDKs turn into not-found."""
    now = _time(now_ms)
    base = f"https://{request.headers.get('host', 'localhost')}"
    url = f"{base}{quote(request.path)}?api-version={API_VERSION}"
    body = (
        f'<?xml version="1.0" encoding="utf-8"?><feed xmlns="{ATOM}">'
        '<title type="text">Publicly Listed Services</title>'
        '<subtitle type="text">This is the list of publicly-listed services currently '
        f"available.</subtitle><id>{escape(url)}</id><updated>{now}</updated>"
        "<generator>Microsoft® Service Bus</generator></feed>"
    )
    return Response(200, body.encode(), [("Content-Type", FEED_TYPE)])


# ------------------------------------------------------------------ parsing
def _host(request: Request) -> str:
    host = request.headers.get("host", "")
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _api_version(request: Request) -> str:
    """The request's api-version ("2017-04", "2021-05", "2024-05"; ours when absent)."""
    return (request.query.get("api-version") or [API_VERSION])[0]


def _paging(request: Request) -> tuple[int, int]:
    try:
        skip = int(request.query.get("$skip", ["0"])[0])
        top = int(request.query.get("$top", ["100"])[0])
    except ValueError:
        raise AtomError(400, "$skip and $top must be integers.") from None
    if skip < 0 or top < 1:
        raise AtomError(400, "$skip must be >= 0 and $top >= 1.")
    return skip, min(top, 100)


def _parse_body(body: bytes) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(description element, given properties, extras: default_rule / rule element)."""
    if not body:
        raise AtomError(400, "The request body is empty: expected an Atom entry.")
    try:  # defusedxml, depth-bounded (sbemu.admin.bounded)
        root = xml_document(body)
    except BodyError as exc:
        raise AtomError(400, f"The request body was refused: {exc}.") from None
    content = root.find(f"{{{ATOM}}}content") if _local(root.tag) == "entry" else None
    if content is None or len(content) == 0:
        raise AtomError(400, "The request body must be an Atom entry with a description.")
    desc = content[0]
    element = _local(desc.tag)
    extra: dict[str, Any] = {}
    if element == "RuleDescription":
        extra["rule"] = desc
        return element, {}, extra
    if element not in FIELDS:
        raise AtomError(400, f"Unknown description element '{element}'.")
    fields = {name: (key, typ) for name, key, typ in FIELDS[element][1] if key}
    given: dict[str, Any] = {}
    for child in desc:
        name = _local(child.tag)
        if name == "DefaultRuleDescription" and element == "SubscriptionDescription":
            extra["default_rule"] = _rule_source(
                (child.findtext(f"{{{SB}}}Name") or "$Default"), child
            )
            continue
        if name not in fields:
            continue  # read-only or unknown elements (counts, times) are ignored, as Azure does
        key, typ = fields[name]
        text = (child.text or "").strip()
        is_nil = child.get(f"{{{XSI}}}nil") == "true"
        try:
            if typ == "raw":
                given[key] = "".join(ET.tostring(c, encoding="unicode") for c in child)
            elif is_nil:
                given[key] = None
            elif typ == "dur":
                given[key] = parse_duration_ms(text)
            elif typ in ("int", "maxsize"):
                given[key] = int(text)
            elif typ == "bool":
                if text.lower() not in ("true", "false"):
                    raise ValueError(f"'{text}' is not a boolean")
                given[key] = text.lower() == "true"
            else:
                given[key] = text if text else None
        except ValueError as exc:
            raise ArgumentError(f"The value supplied for {name} is invalid: {exc}.") from None
    return element, given, extra


def _rule_source(name: str, rule_el: ET.Element) -> RuleSource:
    """A RuleSource from a RuleDescription (or DefaultRuleDescription) element."""
    flt = rule_el.find(f"{{{SB}}}Filter")
    action = rule_el.find(f"{{{SB}}}Action")
    ftype = (flt.get(f"{{{XSI}}}type") if flt is not None else None) or "TrueFilter"
    ftype = ftype.split(":")[-1]
    sql = None
    correlation: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    action_params: dict[str, Any] | None = None
    if ftype in ("SqlFilter", "TrueFilter", "FalseFilter"):
        sql = flt.findtext(f"{{{SB}}}SqlExpression") if flt is not None else None
        if flt is not None:
            params = read_key_values(flt.find(f"{{{SB}}}Parameters")) or None
        kind = {"SqlFilter": "sql", "TrueFilter": "true", "FalseFilter": "false"}[ftype]
    elif ftype == "CorrelationFilter":
        kind = "correlation"
        correlation = {}
        assert flt is not None
        for field in CORRELATION_FIELDS:
            element = flt.find(f"{{{SB}}}{field}")
            if element is not None and element.get(f"{{{XSI}}}nil") != "true":
                correlation[field] = element.text or ""
        props = read_key_values(flt.find(f"{{{SB}}}Properties"))
        if props:
            correlation["Properties"] = props
    else:
        raise ArgumentError(f"Unknown filter type '{ftype}'.")
    action_sql = None
    if action is not None:
        atype = (action.get(f"{{{XSI}}}type") or "EmptyRuleAction").split(":")[-1]
        if atype == "SqlRuleAction":
            action_sql = action.findtext(f"{{{SB}}}SqlExpression")
            action_params = read_key_values(action.find(f"{{{SB}}}Parameters")) or None
        elif atype != "EmptyRuleAction":
            raise ArgumentError(f"Unknown rule action type '{atype}'.")
    source = RuleSource(name, kind, sql, correlation, action_sql, 0, params, action_params)
    source.compile()  # RuleDefinitionError -> 400
    return source


def _parameters_xml(params: Any) -> str:
    return key_values_xml("Parameters", params) if params else ""


def _rule_xml(rule: RuleSource) -> str:
    kind = rule.filter_type
    if kind == "correlation":
        corr = dict(rule.correlation or {})
        inner = "".join(
            _el(f, corr[k])
            for f in CORRELATION_FIELDS
            for k in list(corr)
            if k.lower() in (f.lower(), "subject" if f == "Label" else f.lower())
            and k != "Properties"
        )
        inner += key_values_xml("Properties", corr.get("Properties"))
        flt = f'<Filter i:type="CorrelationFilter">{inner}</Filter>'
    else:
        xsi = {"sql": "SqlFilter", "true": "TrueFilter", "false": "FalseFilter"}[kind]
        sql = rule.sql_expression or {"true": "1=1", "false": "1=0"}.get(kind, "")
        flt = (
            f'<Filter i:type="{xsi}">{_el("SqlExpression", sql)}'
            f"{_el('CompatibilityLevel', 20)}{_parameters_xml(rule.parameters)}</Filter>"
        )
    if rule.action_expression:
        action = (
            f'<Action i:type="SqlRuleAction">{_el("SqlExpression", rule.action_expression)}'
            f"{_el('CompatibilityLevel', 20)}{_parameters_xml(rule.action_parameters)}</Action>"
        )
    else:
        action = '<Action i:type="EmptyRuleAction"/>'
    return flt + action


# ------------------------------------------------------------------ wiring
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
    ns = management.namespace(_host(request)).name
    return any(
        management.entity(ns, "/".join(parts[:i])) is not None for i in range(1, len(parts) + 1)
    )
