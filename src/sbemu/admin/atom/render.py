"""Writing documents: Atom entries and feeds, the descriptions with their runtime counts summed
over every partition [P17, P18], rules, the namespace info, empty feeds and Azure's <Error>."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

from ...config import TIMESPAN_MAX_MS, format_duration_ms
from ...partitions import Entity, RuleSource, subscription_queue
from ..authrules import authorization_rules_xml
from ..http import Request, Response
from ..keyvalues import key_values_xml
from ..management import Management
from .parse import api_version, host_of, paging
from .schema import (
    API_VERSION,
    ATOM,
    CORRELATION_FIELDS,
    FEED_TYPE,
    FIELDS,
    MORE_INFO,
    SB,
    SB2,
    TIMESPAN_MAX_TEXT,
    XML_TYPE,
    XSI,
)


def time_text(ms: int) -> str:
    stamp = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def duration_text(ms: int) -> str:
    """xs:duration text as Azure writes it (P1DT2H3M4.5S; TimeSpan.MaxValue exactly)."""
    if ms >= TIMESPAN_MAX_MS:
        return TIMESPAN_MAX_TEXT
    return format_duration_ms(ms)


def bool_text(value: object) -> str:
    return "true" if value else "false"


def el(name: str, text: object) -> str:
    return f"<{name}>{escape(str(text))}</{name}>"


class AtomDocuments:
    """The documents the API answers, over a Management (for the counts) and a clock."""

    def __init__(self, management: Management, clock: Callable[[], float]) -> None:
        self.m = management
        self.clock = clock

    def error(self, request: Request, ns: str, status: int, detail: str) -> Response:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%m/%d/%Y %I:%M:%S %p")
        tracker = f"{ns}.servicebus.windows.net:{request.path.strip('/')}"
        text = (
            f"{detail} {MORE_INFO} TrackingId:{uuid.uuid4()}_G0, SystemTracker:{tracker}, "
            f"Timestamp:{stamp}"
        )
        body = f"<Error><Code>{status}</Code><Detail>{escape(text)}</Detail></Error>"
        return Response(status, body.encode(), [("Content-Type", "application/xml; charset=utf-8")])

    def base(self, request: Request) -> str:
        return f"https://{request.headers.get('host', 'localhost')}"

    def entry(
        self,
        request: Request,
        ns: str,
        path: str,
        title: str,
        created: int,
        updated: int,
        content: str,
    ) -> str:
        url = f"{self.base(request)}/{quote(path, safe='/$')}?api-version={API_VERSION}"
        return (
            f'<entry xmlns="{ATOM}"><id>{escape(url)}</id><title type="text">{escape(title)}'
            f"</title><published>{time_text(created)}</published><updated>{time_text(updated)}</updated>"
            f"<author><name>{escape(ns)}</name></author>"
            f'<link rel="self" href="{escape(url)}"/>'
            f'<content type="application/xml">{content}</content></entry>'
        )

    def feed(self, request: Request, title: str, entries: list[str], total: int) -> Response:
        skip, top = paging(request)
        base = f"{self.base(request)}{quote(request.path)}"
        self_url = f"{base}?$skip={skip}&$top={top}&api-version={API_VERSION}"
        links = f'<link rel="self" href="{escape(self_url)}"/>'
        if skip + top < total:
            nxt = f"{base}?$skip={skip + top}&$top={top}&api-version={API_VERSION}"
            links += f'<link rel="next" href="{escape(nxt)}"/>'
        now = time_text(int(self.clock() * 1000))
        body = (
            f'<?xml version="1.0" encoding="utf-8"?><feed xmlns="{ATOM}">'
            f'<title type="text">{escape(title)}</title><id>{escape(self_url)}</id>'
            f"<updated>{now}</updated>{links}{''.join(entries)}</feed>"
        )
        return Response(200, body.encode(), [("Content-Type", FEED_TYPE)])

    def empty_feed(self, request: Request) -> Response:
        return empty_feed(request, int(self.clock() * 1000))

    def entry_response(self, status: int, entry: str) -> Response:
        body = '<?xml version="1.0" encoding="utf-8"?>' + entry
        return Response(status, body.encode(), [("Content-Type", XML_TYPE)])

    def description(
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
                out.append(el(name, duration_text(int(value))))
            elif typ == "int":
                out.append(el(name, int(value)))
            elif typ == "bool":
                out.append(el(name, bool_text(value)))
            elif typ == "str":
                if value is not None:
                    out.append(el(name, value))
            elif typ == "fwd":  # Azure's form: sb://<namespace host>/<entity path>
                if value:
                    out.append(el(name, f"sb://{host_of(request) or 'localhost'}/{value}"))
            elif typ == "raw":  # AuthorizationRules, in Azure's form (admin/authrules.py)
                rules = authorization_rules_xml(value, time_text(created), time_text(updated))
                out.append(f"<{name}>{rules}</{name}>")
            elif typ == "maxsize":  # [P5] per-partition size x partition count
                out.append(el(name, int(value) * entity.spec.partition_count))
            elif typ == "size":
                out.append(el(name, counts["size"]))
            elif typ == "count":
                out.append(
                    el(
                        name,
                        counts["active"]
                        + counts["deferred"]
                        + counts["scheduled"]
                        + counts["dead_letter"]
                        + counts["transfer_dead_letter"],
                    )
                )
            elif typ == "created":
                out.append(el(name, time_text(created)))
            elif typ == "updated":
                out.append(el(name, time_text(updated)))
            elif typ == "accessed":
                out.append(el(name, time_text(accessed)))
            elif typ == "subcount":
                out.append(el(name, len(self.m.subscriptions(entity))))
            elif typ == "avail":
                out.append(el(name, self.m.availability(entity)))
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
        if kind == "topic" and api_version(request) >= "2024-05":
            sql, correlation = self.m.filter_counts(entity)  # api-version 2024-05 on
            out.append(el("SqlFilterCount", sql) + el("CorrelationFilterCount", correlation))
        out.append(f"</{element}>")
        return "".join(out)

    def entity_entry(self, request: Request, ns: str, entity: Entity) -> str:
        element = "QueueDescription" if entity.spec.kind == "queue" else "TopicDescription"
        desc = entity.description
        content = self.description(request, element, desc, entity, "main")
        return self.entry(
            request,
            ns,
            entity.name,
            entity.name,
            int(desc.get("created_ms") or 0),
            int(desc.get("updated_ms") or 0),
            content,
        )

    def subscription_entry(
        self, request: Request, ns: str, entity: Entity, desc: dict[str, Any]
    ) -> str:
        content = self.description(
            request, "SubscriptionDescription", desc, entity, subscription_queue(desc["name"])
        )
        path = f"{entity.name}/Subscriptions/{desc['name']}"
        return self.entry(
            request,
            ns,
            path,
            desc["name"],
            int(desc["created_ms"]),
            int(desc["updated_ms"]),
            content,
        )

    def rule_entry(
        self, request: Request, ns: str, entity: Entity, sub: str, rule: RuleSource
    ) -> str:
        path = f"{entity.name}/Subscriptions/{sub}/Rules/{rule.name}"
        created = rule.created_ms or int(entity.description.get("created_ms") or 0)
        content = (
            f'<RuleDescription xmlns="{SB}" xmlns:i="{XSI}">{rule_xml(rule)}'
            f"{el('CreatedAt', time_text(created))}{el('Name', rule.name)}</RuleDescription>"
        )
        return self.entry(request, ns, path, rule.name, created, created, content)

    def namespace_info(self, request: Request, ns: str) -> Response:
        cfg = self.m.namespace(ns)
        premium = cfg.premium_partitions is not None
        started = self.m.started_ms
        content = (
            f'<NamespaceInfo xmlns="{SB}" xmlns:i="{XSI}">'
            f"{el('CreatedTime', time_text(started))}"
            f"{el('MessagingSKU', 'Premium' if premium else 'Standard')}"
            + (el("MessagingUnits", 1) if premium else "")
            + f"{el('ModifiedTime', time_text(started))}{el('Name', cfg.name)}"
            f"{el('NamespaceType', 'Messaging')}</NamespaceInfo>"
        )
        return self.entry_response(
            200,
            self.entry(request, cfg.name, "$namespaceinfo", cfg.name, started, started, content),
        )


def empty_feed(request: Request, now_ms: int) -> Response:
    """Azure's answer to a GET of a missing entity (or of the namespace root, an empty name):
    200 with a feed without entries, which the SDKs turn into not-found."""
    now = time_text(now_ms)
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


def _parameters_xml(params: Any) -> str:
    return key_values_xml("Parameters", params) if params else ""


def rule_xml(rule: RuleSource) -> str:
    kind = rule.filter_type
    if kind == "correlation":
        corr = dict(rule.correlation or {})
        inner = "".join(
            el(f, corr[k])
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
            f'<Filter i:type="{xsi}">{el("SqlExpression", sql)}'
            f"{el('CompatibilityLevel', 20)}{_parameters_xml(rule.parameters)}</Filter>"
        )
    if rule.action_expression:
        action = (
            f'<Action i:type="SqlRuleAction">{el("SqlExpression", rule.action_expression)}'
            f"{el('CompatibilityLevel', 20)}{_parameters_xml(rule.action_parameters)}</Action>"
        )
    else:
        action = '<Action i:type="EmptyRuleAction"/>'
    return flt + action
