"""Subscription rules: a filter plus an optional action, and how several of them combine.

Copy semantics, from "Topic filters and actions" (Microsoft Learn):

    "All rules without actions are combined using an OR condition and result in a single
    message on the subscription even if you have multiple matching rules.
    Each rule with an action produces a copy of the message. This message has a property
    called RuleName where the value is the name of the matching rule. [...] if you send one
    message that matches all five rules, you get three messages on the subscription. That's
    two messages for two rules with actions and one message for three rules without actions."

``evaluate_rules`` implements exactly that:

* every rule's filter is evaluated (in order, no short-circuit, so a filter that throws always
  surfaces as FilterEvaluationError whatever else matched);
* if at least one matching rule has no action, the result starts with ONE unmodified copy;
* then, in rule order, one copy per matching rule with an action: the action applied to the
  original message (actions do not see each other's changes), plus the user property
  ``RuleName`` set to the rule's name (after the action, so it is always present);
* nothing matches: ``[]``. It never returns None (the annotation allows it for the broker).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .correlation import CorrelationFilter
from .sql import (
    FalseFilter,
    FilterEvaluationError,
    MessageView,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
)

__all__ = ["RULE_NAME_PROPERTY", "Rule", "evaluate_rules", "rule_from_config"]

RULE_NAME_PROPERTY = "RuleName"

Filter = SqlFilter | TrueFilter | FalseFilter | CorrelationFilter


@dataclass(frozen=True)
class Rule:
    name: str
    filter: Filter
    action: SqlRuleAction | None = None


def evaluate_rules(rules: Sequence[Rule], msg: MessageView) -> list[MessageView] | None:
    """The messages the subscription receives for ``msg`` (see the module docstring)."""
    plain = False
    with_action: list[Rule] = []
    for rule in rules:
        try:
            matched = rule.filter.matches(msg)
        except FilterEvaluationError as e:
            raise FilterEvaluationError(f"rule {rule.name!r}: {e}", rule_name=rule.name) from e
        if matched:
            if rule.action is None:
                plain = True
            else:
                with_action.append(rule)
    out: list[MessageView] = [msg.copy()] if plain else []
    for rule in with_action:
        assert rule.action is not None
        try:
            copy = rule.action.apply(msg)
        except FilterEvaluationError as e:
            raise FilterEvaluationError(f"rule {rule.name!r}: {e}", rule_name=rule.name) from e
        copy.user[RULE_NAME_PROPERTY] = rule.name
        out.append(copy)
    return out


_FILTER_TYPES = {
    "sql": "sql",
    "sqlfilter": "sql",
    "correlation": "correlation",
    "correlationfilter": "correlation",
    "true": "true",
    "truefilter": "true",
    "false": "false",
    "falsefilter": "false",
}

# Config.json CorrelationFilter key (case-insensitive) -> CorrelationFilter keyword
_CORRELATION_KEYS = {
    "correlationid": "correlation_id",
    "messageid": "message_id",
    "to": "to",
    "replyto": "reply_to",
    "label": "label",
    "subject": "label",
    "sessionid": "session_id",
    "replytosessionid": "reply_to_session_id",
    "contenttype": "content_type",
    "properties": "properties",
}


def rule_from_config(
    name: str,
    filter_type: str,
    sql_expression: str | None,
    correlation: Mapping[str, object] | None,
    action_expression: str | None,
    parameters: Mapping[str, object] | None = None,
    action_parameters: Mapping[str, object] | None = None,
) -> Rule:
    """A Rule from the fields of Microsoft's emulator Config.json.

    ``filter_type``: 'sql' | 'correlation' | 'true' | 'false' (case-insensitive; 'SqlFilter',
    'CorrelationFilter', 'TrueFilter', 'FalseFilter' too). ``correlation`` keys as in Config.json
    (CorrelationId, MessageId, To, ReplyTo, Label or Subject, SessionId, ReplyToSessionId,
    ContentType, Properties), case-insensitive. A None or blank ``action_expression`` means no
    action. Raises FilterSyntaxError for a bad expression, ValueError for anything else wrong.
    """
    kind = _FILTER_TYPES.get(str(filter_type).casefold())
    if kind is None:
        raise ValueError(
            f"rule {name!r}: unknown filter type {filter_type!r} (sql, correlation, true, false)"
        )
    flt: Filter
    if kind == "sql":
        if sql_expression is None:
            raise ValueError(f"rule {name!r}: a SQL filter needs an expression")
        flt = SqlFilter(sql_expression, parameters)
    elif kind == "correlation":
        kwargs: dict[str, object] = {}
        for key, value in (correlation or {}).items():
            arg = _CORRELATION_KEYS.get(str(key).casefold())
            if arg is None:
                raise ValueError(f"rule {name!r}: unknown correlation filter key {key!r}")
            if arg in kwargs:
                raise ValueError(f"rule {name!r}: correlation filter key {key!r} given twice")
            if arg == "properties" and value is not None and not isinstance(value, Mapping):
                raise ValueError(f"rule {name!r}: correlation Properties must be a mapping")
            kwargs[arg] = value
        flt = CorrelationFilter(**kwargs)  # type: ignore[arg-type]
    elif kind == "true":
        flt = TrueFilter()
    else:
        flt = FalseFilter()
    action = None
    if action_expression is not None and action_expression.strip():
        action = SqlRuleAction(action_expression, action_parameters)
    return Rule(name=name, filter=flt, action=action)
