"""Reading a request: the namespace host, api-version and paging it names, and its Atom body
(a description's given properties, a rule's filter and action) parsed from untrusted XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from ...config import parse_duration_ms
from ...errors import ArgumentError
from ...partitions import RuleSource
from ..bounded import BodyError, xml_document
from ..http import Request
from ..keyvalues import read_key_values
from .schema import API_VERSION, ATOM, CORRELATION_FIELDS, FIELDS, SB, XSI, AtomError


def host_of(request: Request) -> str:
    host = request.headers.get("host", "")
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def api_version(request: Request) -> str:
    """The request's api-version ("2017-04", "2021-05", "2024-05"; ours when absent)."""
    return (request.query.get("api-version") or [API_VERSION])[0]


def paging(request: Request) -> tuple[int, int]:
    try:
        skip = int(request.query.get("$skip", ["0"])[0])
        top = int(request.query.get("$top", ["100"])[0])
    except ValueError:
        raise AtomError(400, "$skip and $top must be integers.") from None
    if skip < 0 or top < 1:
        raise AtomError(400, "$skip must be >= 0 and $top >= 1.")
    return skip, min(top, 100)


def parse_body(body: bytes) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(description element, given properties, extras: default_rule / rule element)."""
    if not body:
        raise AtomError(400, "The request body is empty: expected an Atom entry.")
    try:  # defusedxml, depth-bounded (sbemu.admin.bounded)
        root = xml_document(body)
    except BodyError as exc:
        raise AtomError(400, f"The request body was refused: {exc}.") from None
    content = root.find(f"{{{ATOM}}}content") if local_name(root.tag) == "entry" else None
    if content is None or len(content) == 0:
        raise AtomError(400, "The request body must be an Atom entry with a description.")
    desc = content[0]
    element = local_name(desc.tag)
    extra: dict[str, Any] = {}
    if element == "RuleDescription":
        extra["rule"] = desc
        return element, {}, extra
    if element not in FIELDS:
        raise AtomError(400, f"Unknown description element '{element}'.")
    fields = {name: (key, typ) for name, key, typ in FIELDS[element][1] if key}
    given: dict[str, Any] = {}
    for child in desc:
        name = local_name(child.tag)
        if name == "DefaultRuleDescription" and element == "SubscriptionDescription":
            extra["default_rule"] = rule_source(
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


def rule_source(name: str, rule_el: ET.Element) -> RuleSource:
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


def local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]
