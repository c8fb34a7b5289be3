"""`$cbs` and the entities [issue 23 items 7, 8]: entity-level SAS rules and missing entities,
on cbs.put_token and Grants (pure: the router is stood in for by two small functions)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from sbemu.auth.sas import make_sas_token
from sbemu.auth.sasrules import SasRule, parse_authorization_rules
from sbemu.errors import Unauthorized
from sbemu.protocol.cbs import ENTITY_NOT_FOUND, Grants, put_token

NOW = 1_700_000_000.0
EXPIRY = int(NOW) + 3600
NS_KEYS = {"RootManageSharedAccessKey": "ns-key"}
NS_RIGHTS = {"RootManageSharedAccessKey": frozenset({"Manage", "Send", "Listen"})}
RULES = {
    "orders": (SasRule("orders-send", ("k-primary", "k-secondary"), frozenset({"Send"})),),
    "events": (SasRule("events-all", ("k-events",), frozenset({"Send", "Listen"})),),
}
ENTITIES = {
    "orders": "orders",
    "orders/$deadletterqueue": "orders",
    "events": "events",
    "events/subscriptions/s1": "events",
}


def _put(audience: str, key_name: str, key: str, resource: str | None = None):
    token = make_sas_token(resource or audience, key_name, key, EXPIRY)
    return put_token(
        {"operation": "put-token", "name": audience},
        token,
        NS_KEYS,
        NOW,
        entity_of=ENTITIES.get,
        rules_of=lambda e: RULES.get(e, ()),
    )


def test_a_missing_entity_is_refused_with_404() -> None:
    audience = "sb://localhost:5672/nowhere"
    status, description, grant = _put(audience, "RootManageSharedAccessKey", "ns-key")
    assert (status, grant) == (404, None)
    assert description == ENTITY_NOT_FOUND.format(audience)
    assert "could not be found" in description  # what JS and .NET classify as not found


def test_the_namespace_audience_needs_no_entity() -> None:
    status, _, grant = _put("sb://localhost/", "RootManageSharedAccessKey", "ns-key")
    assert status == 202 and grant is not None and grant.scope == ""


@pytest.mark.parametrize("key", ["k-primary", "k-secondary"])
def test_an_entity_rule_grants_its_entity_with_its_rights(key: str) -> None:
    status, _, grant = _put("sb://localhost/orders", "orders-send", key)
    assert status == 202 and grant is not None
    assert (grant.scope, grant.rights) == ("orders", frozenset({"Send"}))
    grants = Grants()
    grants.add(grant, NOW)
    assert grants.authorize("orders", ("Send",), NS_RIGHTS, NOW) == EXPIRY
    with pytest.raises(Unauthorized):
        grants.authorize("orders", ("Listen",), NS_RIGHTS, NOW)  # the rule's rights only
    with pytest.raises(Unauthorized):
        grants.authorize("events", ("Send",), NS_RIGHTS, NOW)  # its entity only


def test_an_entity_rule_signed_for_the_whole_namespace_is_still_its_entitys() -> None:
    status, _, grant = _put("sb://localhost/orders", "orders-send", "k-primary", "sb://localhost/")
    assert status == 202 and grant is not None and grant.scope == "orders"


def test_a_topic_rule_covers_its_subscriptions() -> None:
    audience = "sb://localhost/events/subscriptions/s1"
    status, _, grant = _put(audience, "events-all", "k-events", "sb://localhost/events")
    assert status == 202 and grant is not None and grant.scope == "events"
    status, _, grant = _put(audience, "events-all", "k-events")  # signed for the subscription
    assert status == 202 and grant is not None and grant.scope == "events/subscriptions/s1"


def test_an_entity_rule_is_not_good_for_another_entity() -> None:
    status, description, grant = _put("sb://localhost/events", "orders-send", "k-primary")
    assert (status, grant) == (401, None)
    assert "unknown SAS key name" in description
    status, _, grant = _put("sb://localhost/orders", "orders-send", "wrong-key")
    assert (status, grant) == (401, None)


def test_rules_as_the_admin_api_stores_them() -> None:
    sb = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
    xsi = "http://www.w3.org/2001/XMLSchema-instance"
    rule = ET.fromstring(
        f'<AuthorizationRule xmlns="{sb}" xmlns:i="{xsi}" i:type="SharedAccessAuthorizationRule">'
        "<ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>"
        "<Rights><AccessRights>Listen</AccessRights><AccessRights>Send</AccessRights></Rights>"
        "<KeyName>r1</KeyName><PrimaryKey>p</PrimaryKey><SecondaryKey>s</SecondaryKey>"
        "</AuthorizationRule>"
    )
    keyless = ET.fromstring(
        f'<AuthorizationRule xmlns="{sb}"><KeyName>r2</KeyName></AuthorizationRule>'
    )
    stored = "".join(ET.tostring(e, encoding="unicode") for e in (rule, keyless))  # as atom.py
    assert parse_authorization_rules(stored) == (
        SasRule("r1", ("p", "s"), frozenset({"Listen", "Send"})),
    )
    assert parse_authorization_rules("") == () and parse_authorization_rules("<broken") == ()
