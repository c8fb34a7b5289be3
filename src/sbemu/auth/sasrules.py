"""Entity-level SAS rules: a queue's or topic's AuthorizationRules.

Azure lets a queue or a topic carry Shared Access rules of its own beside the namespace's
(the admin API's `authorization_rules`, Resource Manager's queue/topic authorization rules).
A token signed with such a rule's primary or secondary key is good for that entity only (a
topic's also for its subscriptions, both for their dead-letter queues and `$management`),
with that rule's rights. The admin API stores the rules as the XML it was given
(sbemu.admin.catalog, `authorization_rules`); this module reads them for `$cbs`.

Bottom layer: used by the protocol side ($cbs) and the admin side, importing neither.
"""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET
from dataclasses import dataclass

__all__ = ["SasRule", "parse_authorization_rules"]

RIGHTS = ("Manage", "Send", "Listen")


@dataclass(frozen=True, slots=True)
class SasRule:
    """One SAS rule of an entity: its key name, keys (primary, then secondary) and rights."""

    key_name: str
    keys: tuple[str, ...]
    rights: frozenset[str]


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


@functools.lru_cache(maxsize=256)
def parse_authorization_rules(xml: str) -> tuple[SasRule, ...]:
    """The SAS rules in an entity's stored AuthorizationRules XML (the rule elements, each
    with its namespace declarations); rules without a key name or any key are skipped, and
    text that does not parse holds no rules."""
    if not xml or not xml.strip():
        return ()
    try:
        root = ET.fromstring(f"<rules>{xml}</rules>")
    except ET.ParseError:
        return ()
    rules: list[SasRule] = []
    for element in root:
        if _local(element.tag) != "AuthorizationRule":
            continue
        fields: dict[str, str] = {}
        rights: set[str] = set()
        for child in element:
            name = _local(child.tag)
            if name == "Rights":
                for right in child:
                    text = (right.text or "").strip().title()
                    if text in RIGHTS:
                        rights.add(text)
            else:
                fields[name] = (child.text or "").strip()
        keys = tuple(k for k in (fields.get("PrimaryKey"), fields.get("SecondaryKey")) if k)
        key_name = fields.get("KeyName", "")
        if key_name and keys:
            rules.append(SasRule(key_name, keys, frozenset(rights)))
    return tuple(rules)
