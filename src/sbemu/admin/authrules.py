"""An entity's AuthorizationRules as Azure writes them back in the Atom documents.

The admin API keeps the rules as the client sent them (sbemu.admin.catalog's
`authorization_rules`: the rule elements with their own namespace declarations, which
sbemu.auth.sasrules reads for `$cbs`). What a client sent may use any prefixes (Python's
ElementTree writes ``ns0:``, the JS SDK ``p5:`` for the type): echoed, the JS SDK finds no
``ClaimType``/``KeyName`` and refuses the queue. Azure answers in its own form
whatever the request looked like, in the description's default namespace (the connect
namespace) with ``i`` for XMLSchema-instance, each rule's elements in this order (Microsoft's
Event Hubs REST reference shows the same AuthorizationRule)::

    <AuthorizationRule i:type="SharedAccessAuthorizationRule">
      <ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>
      <Rights><AccessRights>Listen</AccessRights>...</Rights>
      <CreatedTime>..</CreatedTime><ModifiedTime>..</ModifiedTime>
      <KeyName>..</KeyName><PrimaryKey>..</PrimaryKey><SecondaryKey>..</SecondaryKey>
    </AuthorizationRule>
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape, quoteattr

__all__ = ["authorization_rules_xml"]

XSI = "http://www.w3.org/2001/XMLSchema-instance"
_TEXT_FIELDS = ("ClaimType", "ClaimValue")
_KEY_FIELDS = ("KeyName", "PrimaryKey", "SecondaryKey")
_DEFAULTS = {"ClaimType": "SharedAccessKey", "ClaimValue": "None"}


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _el(name: str, text: str) -> str:
    return f"<{name}>{escape(text)}</{name}>"


def authorization_rules_xml(stored: str | None, created: str, modified: str) -> str:
    """The content of <AuthorizationRules> in Azure's form from the stored rule elements;
    `created`/`modified` (xs:dateTime text) stand in for times the client did not send.
    Stored text that does not parse holds no rules (as sbemu.auth.sasrules reads it)."""
    if not stored or not stored.strip():
        return ""
    try:
        root = ET.fromstring(f"<rules>{stored}</rules>")
    except ET.ParseError:
        return ""
    return "".join(
        _rule_xml(rule, created, modified)
        for rule in root
        if _local(rule.tag) == "AuthorizationRule"
    )


def _rule_xml(rule: ET.Element, created: str, modified: str) -> str:
    kind = (rule.get(f"{{{XSI}}}type") or "SharedAccessAuthorizationRule").split(":")[-1]
    fields: dict[str, str] = {}
    rights: list[str] = []
    for child in rule:
        name = _local(child.tag)
        if name == "Rights":
            rights.extend((r.text or "").strip() for r in child if _local(r.tag) == "AccessRights")
        else:
            fields[name] = (child.text or "").strip()
    parts = [_el(name, fields.get(name) or _DEFAULTS[name]) for name in _TEXT_FIELDS]
    parts.append("<Rights>" + "".join(_el("AccessRights", r) for r in rights) + "</Rights>")
    parts.append(_el("CreatedTime", fields.get("CreatedTime") or created))
    parts.append(_el("ModifiedTime", fields.get("ModifiedTime") or modified))
    parts.extend(_el(name, fields[name]) for name in _KEY_FIELDS if name in fields)
    return f"<AuthorizationRule i:type={quoteattr(kind)}>{''.join(parts)}</AuthorizationRule>"
