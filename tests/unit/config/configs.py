"""Builders of Config.json documents for the config tests: each test names only what it varies.

They build the plain dicts a Config.json holds (what `parse_config` reads); a member a test
does not pass is left out, as a hand-written file would leave it out.
"""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]


def user_config(*namespaces: Doc, **members: Any) -> Doc:
    """A whole document: these namespaces, plus other UserConfig members (e.g. Logging)."""
    return {"UserConfig": {"Namespaces": list(namespaces), **members}}


def namespace(name: str = "sbemulatorns", **members: Any) -> Doc:
    """A namespace; keyword arguments are its members (Queues, Topics, SharedAccessPolicies...)."""
    return {"Name": name, **members}


def document(**members: Any) -> Doc:
    """A one-namespace document with Queues, Topics and Logging given; keyword arguments
    override the namespace's members."""
    return user_config(
        namespace(**{"Queues": [], "Topics": [], **members}), Logging={"Type": "File"}
    )


def _with_properties(name: str, properties: Doc, **members: Any) -> Doc:
    entity: Doc = {"Name": name}
    if properties:
        entity["Properties"] = properties
    entity.update(members)
    return entity


def queue(name: str, **properties: Any) -> Doc:
    """A queue; keyword arguments are its Properties (none: no Properties member)."""
    return _with_properties(name, properties)


def topic(name: str, *subscriptions: Doc, **properties: Any) -> Doc:
    """A topic with these subscriptions (none: no Subscriptions member) and Properties."""
    if subscriptions:
        return _with_properties(name, properties, Subscriptions=list(subscriptions))
    return _with_properties(name, properties)


def subscription(name: str, *rules: Doc, **properties: Any) -> Doc:
    """A subscription with these rules (none: no Rules member) and Properties."""
    if rules:
        return _with_properties(name, properties, Rules=list(rules))
    return _with_properties(name, properties)


def rule(name: str, properties: object) -> Doc:
    """A rule with its Properties as given (any value, for the tests of bad ones)."""
    return {"Name": name, "Properties": properties}


def queue_doc(**properties: Any) -> Doc:
    """A document with one queue, q1, with these Properties (always present)."""
    return document(Queues=[{"Name": "q1", "Properties": properties}])


def topic_doc(sub: Doc, **topic_properties: Any) -> Doc:
    """A document with one topic, t, with these Properties (always present) and one
    subscription."""
    return document(Topics=[{"Name": "t", "Properties": topic_properties, "Subscriptions": [sub]}])


def rule_doc(properties: object) -> Doc:
    """A document whose one topic's one subscription has one rule, r, with these Properties."""
    return topic_doc(subscription("s", rule("r", properties)))
