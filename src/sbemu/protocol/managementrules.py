"""The rule operations of a subscription's `$management` node [contract 6.3]: add-rule,
remove-rule and enumerate-rules, and rule descriptions as they go on the wire (numeric
descriptors, filter values in proton's types). management.py's handle_request runs them as it
runs its other operations (RULE_OPERATIONS joins its table); the rules themselves are the
partitions side's (Subscriptions).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, Protocol

from proton import Described, int32, symbol, timestamp, ulong

from ..errors import ArgumentError, EntityAlreadyExists, InvalidOperation
from . import codec
from .links import RequestLink
from .messages import plain_value
from .services import NamespaceInfo


class RuleHost(Protocol):
    """What a rule operation needs of its connection (management.ManagementHost has it): the
    namespace (named in Azure's words for a rule that exists) and the time."""

    namespace: NamespaceInfo

    @property
    def now_ms(self) -> int:
        """The current time in Unix milliseconds."""


# management.handle_request's reply: (status, description, result map, error condition)
Reply = Callable[[int, str, dict[str, Any] | None, str | None], None]


# Rule descriptions on the wire [contract 6.3]: numeric descriptors, two code families.
RULE_DESCRIPTION = 0x0000013700000004
EMPTY_RULE_ACTION = 0x0000013700000005
SQL_RULE_ACTION = 0x0000013700000006
SQL_FILTER = 0x0000001370000006
TRUE_FILTER = 0x0000001370000007
FALSE_FILTER = 0x0000001370000008
CORRELATION_FILTER = 0x0000001370000009
SQL_COMPATIBILITY_LEVEL = 20
# Correlation filter fields: wire key (add-rule map) / Config.json key, in descriptor order.
CORRELATION_FIELDS = (
    ("correlation-id", "CorrelationId"),
    ("message-id", "MessageId"),
    ("to", "To"),
    ("reply-to", "ReplyTo"),
    ("label", "Label"),
    ("session-id", "SessionId"),
    ("reply-to-session-id", "ReplyToSessionId"),
    ("content-type", "ContentType"),
)


def _subscription_of(state: RequestLink) -> tuple[Any, str]:
    entity, view = state.entity, state.view
    assert entity is not None and view is not None
    if entity.subscriptions is None or not view.queue.startswith("subscriptions/"):
        raise InvalidOperation("Rules are managed on a subscription's $management node.")
    return entity.subscriptions, view.queue.removeprefix("subscriptions/")


def _str_map(value: object) -> dict[str, Any]:
    if isinstance(value, Described):
        value = value.value
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _add_rule(conn: RuleHost, state: RequestLink, body: dict, reply: Reply) -> None:
    from ..partitions import RuleSource

    subscriptions, sub_name = _subscription_of(state)
    name = body.get("rule-name")
    if not isinstance(name, str) or not name:
        raise ArgumentError("rule-name is required.")
    description = _str_map(body.get("rule-description"))
    sql = _str_map(description.get("sql-filter"))
    corr = description.get("correlation-filter")
    action = _str_map(description.get("sql-rule-action"))
    action_expression = action.get("expression") if action else None
    if sql and corr is not None:
        raise ArgumentError("A rule has one filter: sql-filter or correlation-filter.")
    if sql:
        source = RuleSource(name, "sql", str(sql.get("expression") or ""), None, action_expression)
    elif corr is not None:
        fields = _str_map(corr)
        correlation: dict[str, object] = {}
        for wire, config_key in CORRELATION_FIELDS:
            if fields.get(wire) is not None:
                correlation[config_key] = str(fields[wire])
        props = fields.get("properties")
        if isinstance(props, dict) and props:
            correlation["Properties"] = {str(k): _plain_value(v) for k, v in props.items()}
        source = RuleSource(name, "correlation", None, correlation, action_expression)
    else:
        source = RuleSource(name, "true", None, None, action_expression)
    try:
        subscriptions.add_rule(sub_name, source, conn.now_ms)
    except EntityAlreadyExists:
        # Azure's words, as the Atom API has them (Microsoft's ruleManager.spec matches
        # /The messaging entity '.*ruleName' already exists./)
        raise EntityAlreadyExists(
            f"The messaging entity '{conn.namespace.name}:Topic:{subscriptions.topic}|"
            f"{sub_name}|{name}' already exists."
        ) from None
    reply(200, "OK", {}, None)


def _plain_value(value: object) -> object:
    """A correlation property's value as filters compare it: a symbol as its text, a
    timestamp as an aware UTC datetime (what a message's timestamp is in its filter view, and
    what rules.json and the Atom API keep as a dateTime)."""
    plain = plain_value(value)
    if isinstance(plain, codec.Timestamp):
        return _EPOCH + dt.timedelta(milliseconds=int(plain))
    return str(plain) if isinstance(plain, codec.Symbol) else plain


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _remove_rule(conn: RuleHost, state: RequestLink, body: dict, reply: Reply) -> None:
    subscriptions, sub_name = _subscription_of(state)
    name = body.get("rule-name")
    if not isinstance(name, str) or not name:
        raise ArgumentError("rule-name is required.")
    subscriptions.remove_rule(sub_name, name)
    reply(200, "OK", {}, None)


def _proton_value(value: Any) -> Any:
    """A stored filter value as proton encodes it: sbemu.protocol.codec's Timestamp and Symbol
    (what plain_value made of proton's) back to proton's types; proton refuses the others
    (KeyError on its type table: enumerate-rules with a Date property once went unanswered)."""
    if isinstance(value, codec.Timestamp):
        return timestamp(int(value))
    if isinstance(value, dt.datetime):  # naive: taken as UTC, as the filters take it
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        return timestamp((aware - _EPOCH) // dt.timedelta(milliseconds=1))
    if isinstance(value, codec.Symbol):
        return symbol(str(value))
    if isinstance(value, codec.Described):
        return Described(_proton_value(value.descriptor), _proton_value(value.value))
    if isinstance(value, list):
        return [_proton_value(v) for v in value]
    if isinstance(value, dict):
        return {_proton_value(k): _proton_value(v) for k, v in value.items()}
    return value


def _describe_rule(source: Any) -> Described:
    if source.filter_type == "sql":
        filt = Described(ulong(SQL_FILTER), [source.sql_expression, int32(SQL_COMPATIBILITY_LEVEL)])
    elif source.filter_type == "correlation":
        corr = {str(k).lower(): v for k, v in dict(source.correlation or {}).items()}
        fields: list[Any] = [corr.get(key.lower()) for _, key in CORRELATION_FIELDS]
        props = corr.get("properties") or {}
        fields.append({str(k): _proton_value(v) for k, v in dict(props).items()})
        filt = Described(ulong(CORRELATION_FILTER), fields)
    elif source.filter_type == "false":
        filt = Described(ulong(FALSE_FILTER), [])
    else:
        filt = Described(ulong(TRUE_FILTER), [])
    if source.action_expression:
        action = Described(
            ulong(SQL_RULE_ACTION), [source.action_expression, int32(SQL_COMPATIBILITY_LEVEL)]
        )
    else:
        action = Described(ulong(EMPTY_RULE_ACTION), [])
    return Described(
        ulong(RULE_DESCRIPTION), [filt, action, source.name, timestamp(source.created_ms)]
    )


def _enumerate_rules(conn: RuleHost, state: RequestLink, body: dict, reply: Reply) -> None:
    subscriptions, sub_name = _subscription_of(state)
    skip = int(body.get("skip") or 0)
    top = int(body.get("top") or 2**31 - 1)
    # Azure lists rules in name order ($Default, correlationRule, sqlRule), not by creation
    # (Microsoft's ruleManager.spec "list rules by page").
    ordered = sorted(subscriptions.subscription(sub_name).sources, key=_rule_order)
    sources = ordered[skip : skip + top]
    if not sources:
        reply(204, "No rules.", {}, None)
        return
    reply(200, "OK", {"rules": [{"rule-description": _describe_rule(s)} for s in sources]}, None)


def _rule_order(source: Any) -> tuple[str, str]:
    """Rules by name, case-insensitively (as Azure's names are unique), then ordinally."""
    return (source.name.lower(), source.name)


RULE_OPERATIONS: dict[str, Callable[[RuleHost, RequestLink, dict, Reply], None]] = {
    "com.microsoft:add-rule": _add_rule,
    "com.microsoft:remove-rule": _remove_rule,
    "com.microsoft:enumerate-rules": _enumerate_rules,
}
