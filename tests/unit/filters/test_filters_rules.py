"""SQL rule actions, correlation filters, rule evaluation (copy semantics) and config rules."""

from __future__ import annotations

import uuid
from dataclasses import FrozenInstanceError
from datetime import datetime, timedelta, timezone

import pytest

from sbemu.filters import (
    RULE_NAME_PROPERTY,
    CorrelationFilter,
    FalseFilter,
    FilterEvaluationError,
    FilterSyntaxError,
    MessageView,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    evaluate_rules,
    rule_from_config,
)


def make_msg(**user: object) -> MessageView:
    system: dict[str, object] = {
        "MessageId": "m1",
        "CorrelationId": "high",
        "To": "Store5",
        "ReplyTo": "johndoe@contoso.com",
        "Label": "red",
        "SessionId": "s1",
        "ReplyToSessionId": "rs1",
        "ContentType": "application/json",
        "SequenceNumber": 7,
        "EnqueuedTimeUtc": datetime(2024, 1, 1, tzinfo=timezone.utc),
        "ScheduledEnqueueTimeUtc": None,
        "TimeToLive": timedelta(hours=1),
        "DeliveryCount": 0,
        "Size": 10,
        "PartitionKey": None,
    }
    base: dict[str, object] = {"color": "red", "quantity": 15, "priority": "high", "price": 2.5}
    base.update(user)
    return MessageView(system=system, user=base)


# ================================================================================================
# SqlRuleAction
# ================================================================================================

# (action, user overrides, expected user changes {key: value | REMOVED}, expected sys changes)
REMOVED = object()
ACTIONS = [
    ("SET quantity = quantity / 2", {}, {"quantity": 7}, {}),
    ("SET quantity = quantity / 2;", {}, {"quantity": 7}, {}),
    (
        "SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';",
        {},
        {"quantity": 7, "priority": REMOVED},
        {"CorrelationId": "low"},
    ),
    ("SET source='routedOrders'", {}, {"source": "routedOrders"}, {}),
    ("SET importance = 'critical';", {}, {"importance": "critical"}, {}),
    ("SET a = 1 SET b = a + 1", {}, {"a": 1, "b": 2}, {}),
    ("SET a = 1, SET b = 2", {}, {"a": 1, "b": 2}, {}),
    ("SET a = 1; SET a = a * 10; SET a = a + 1", {}, {"a": 11}, {}),
    ("set a = 1; remove color", {}, {"a": 1, "color": REMOVED}, {}),
    ("Set A = 'x'", {}, {"A": "x"}, {}),
    ("SET user.x = 'y'", {}, {"x": "y"}, {}),
    ("SET [my prop] = 1", {}, {"my prop": 1}, {}),
    ('SET "q""uote" = 1', {}, {'q"uote': 1}, {}),
    ("SET x = color + '-' + priority", {}, {"x": "red-high"}, {}),
    ("SET x = quantity * price", {}, {"x": 37.5}, {}),
    ("SET x = -quantity % 4", {}, {"x": -3}, {}),
    ("SET x = missing", {}, {"x": None}, {}),
    ("SET x = missing + 1", {}, {"x": None}, {}),
    ("SET x = NULL", {}, {"x": None}, {}),
    ("SET x = TRUE", {}, {"x": True}, {}),
    ("SET x = 1.5E2", {}, {"x": 150.0}, {}),
    ("SET x = quantity > 10", {}, {"x": True}, {}),
    ("SET x = EXISTS(color)", {}, {"x": True}, {}),
    ("SET x = sys.Label", {}, {"x": "red"}, {}),
    ("SET x = sys.SequenceNumber + 1", {}, {"x": 8}, {}),
    ("SET x = property('sys.To')", {}, {"x": "Store5"}, {}),
    ("SET Quantity = 1", {}, {"quantity": 1}, {}),  # existing key, case-insensitive
    ("SET price = 10", {}, {"price": 10.0}, {}),  # implicit long -> double for a double property
    ("SET quantity = 2.5", {}, {"quantity": 2.5}, {}),  # no implicit double -> long
    ("SET color = 5", {}, {"color": 5}, {}),
    ("REMOVE color", {}, {"color": REMOVED}, {}),
    ("REMOVE COLOR", {}, {"color": REMOVED}, {}),
    ("REMOVE user.color", {}, {"color": REMOVED}, {}),
    ("REMOVE missing", {}, {}, {}),
    ("REMOVE [with space]", {"with space": 1}, {"with space": REMOVED}, {}),
    ("REMOVE color; SET color = 'blue'", {}, {"color": "blue"}, {}),
    ("SET sys.Label = 'new'", {}, {}, {"Label": "new"}),
    ("SET sys.Subject = 'new'", {}, {}, {"Label": "new"}),
    ("SET SYS.LABEL = sys.Label + '!'", {}, {}, {"Label": "red!"}),
    ("SET sys.To = 'Entity'", {}, {}, {"To": "Entity"}),
    ("SET sys.ReplyTo = 'q'", {}, {}, {"ReplyTo": "q"}),
    ("SET sys.MessageId = 'x'", {}, {}, {"MessageId": "x"}),
    ("SET sys.SessionId = color", {}, {}, {"SessionId": "red"}),
    ("SET sys.ReplyToSessionId = NULL", {}, {}, {"ReplyToSessionId": None}),
    ("SET sys.ContentType = 'text/plain'", {}, {}, {"ContentType": "text/plain"}),
    ("SET sys.PartitionKey = 'p'", {}, {}, {"PartitionKey": "p"}),
    ("SET sys.CorrelationId = missing", {}, {}, {"CorrelationId": None}),
    (
        "SET sys.TimeToLive = sys.TimeToLive + sys.TimeToLive",
        {},
        {},
        {"TimeToLive": timedelta(hours=2)},
    ),
    (
        "SET sys.ScheduledEnqueueTimeUtc = sys.EnqueuedTimeUtc + sys.TimeToLive",
        {},
        {},
        {"ScheduledEnqueueTimeUtc": datetime(2024, 1, 1, 1, tzinfo=timezone.utc)},
    ),
    ("REMOVE sys.CorrelationId", {}, {}, {"CorrelationId": None}),
    ("REMOVE sys.Subject", {}, {}, {"Label": None}),
    ("SET sys.Label = 'a'; SET x = sys.Label", {}, {"x": "a"}, {"Label": "a"}),
]


@pytest.mark.parametrize(("action", "user", "user_changes", "sys_changes"), ACTIONS)
def test_action_table(action, user, user_changes, sys_changes):
    msg = make_msg(**user)
    before_user, before_sys = dict(msg.user), dict(msg.system)
    out = SqlRuleAction(action).apply(msg)
    # the input is untouched
    assert msg.user == before_user and msg.system == before_sys
    assert out is not msg and out.user is not msg.user and out.system is not msg.system
    expected_user = dict(before_user)
    for k, v in user_changes.items():
        if v is REMOVED:
            expected_user.pop(k, None)
        else:
            expected_user[k] = v
    expected_sys = {**before_sys, **sys_changes}
    assert out.user == expected_user
    assert out.system == expected_sys
    for k, v in user_changes.items():  # types matter (7 vs 7.0)
        if v is not REMOVED:
            assert type(out.user[k]) is type(v)


def test_set_message_id_to_newid_stores_a_string():
    out = SqlRuleAction("SET sys.MessageId = newid(); SET g = newid()").apply(make_msg())
    assert isinstance(out.system["MessageId"], str)
    uuid.UUID(out.system["MessageId"])  # type: ignore[arg-type]
    assert isinstance(out.user["g"], uuid.UUID)


def test_action_parameters():
    out = SqlRuleAction("SET x = @p", {"@p": 3}).apply(make_msg())
    assert out.user["x"] == 3


ACTION_EVAL_ERRORS = [
    "SET x = quantity / 0",
    "SET x = color + 1",
    "SET sys.Label = 5",
    "SET sys.Label = TRUE",
    "SET sys.TimeToLive = 5",
    "SET sys.ScheduledEnqueueTimeUtc = 'tomorrow'",
    "SET x = sys.NoSuchProperty",
    "SET a = 1; SET b = 1 / 0",
]


@pytest.mark.parametrize("action", ACTION_EVAL_ERRORS)
def test_action_evaluation_errors(action):
    a = SqlRuleAction(action)
    msg = make_msg()
    before = dict(msg.user)
    with pytest.raises(FilterEvaluationError):
        a.apply(msg)
    assert msg.user == before


ACTION_SYNTAX_ERRORS = [
    ("", 0, "empty action"),
    ("   ", 3, "empty action"),
    ("SET = 1", 4, "needs a property name"),
    ("SET a 1", 6, "expected '='"),
    ("SET a =", 7, "end of expression"),
    ("UPDATE a = 1", 0, "expected SET or REMOVE"),
    ("a = 1", 0, "expected SET or REMOVE"),
    ("SET a = 1;;", 10, "expected SET or REMOVE"),
    ("; SET a = 1", 0, "expected SET or REMOVE"),
    ("SET a = 1 b = 2", 10, "expected SET or REMOVE"),
    ("REMOVE", 6, "needs a property name"),
    ("REMOVE 'a'", 7, "needs a property name"),
    ("REMOVE a + 1", 9, "expected SET or REMOVE"),
    ("SET newid() = 1", 4, "not a function"),
    ("SET sys.SequenceNumber = 1", 4, "read-only"),
    ("SET sys.EnqueuedTimeUtc = NULL", 4, "read-only"),
    ("SET sys.DeliveryCount = 1", 4, "read-only"),
    ("SET sys.Size = 1", 4, "read-only"),
    ("REMOVE sys.DeliveryCount", 7, "read-only"),
    ("SET sys.NoSuch = 1", 4, "not a system property"),
    ("REMOVE sys.NoSuch", 7, "not a system property"),
    ("SET a = 'unterminated", 8, "unterminated string"),
    ("SET a = (1", 10, "expected ')'"),
    ("SET TRUE = 1", 4, "needs a property name"),
    ("SET a = @p", 8, "parameter '@p'"),
]


@pytest.mark.parametrize(("action", "position", "text"), ACTION_SYNTAX_ERRORS)
def test_action_syntax_errors(action, position, text):
    with pytest.raises(FilterSyntaxError) as info:
        SqlRuleAction(action)
    assert info.value.position == position, str(info.value)
    assert f"at position {position}" in str(info.value)
    assert text in str(info.value)


# ================================================================================================
# CorrelationFilter
# ================================================================================================

CORRELATION = [
    # (kwargs, user overrides, system overrides, expected)
    ({"correlation_id": "high"}, {}, {}, True),
    ({"correlation_id": "High"}, {}, {}, False),  # case-sensitive
    ({"correlation_id": "low"}, {}, {}, False),
    ({"message_id": "m1"}, {}, {}, True),
    ({"message_id": "m2"}, {}, {}, False),
    ({"to": "Store5"}, {}, {}, True),
    ({"to": "store5"}, {}, {}, False),
    ({"reply_to": "johndoe@contoso.com"}, {}, {}, True),
    ({"label": "red"}, {}, {}, True),
    ({"label": "blue"}, {}, {}, False),
    ({"session_id": "s1"}, {}, {}, True),
    ({"reply_to_session_id": "rs1"}, {}, {}, True),
    ({"content_type": "application/json"}, {}, {}, True),
    ({"content_type": "application/JSON"}, {}, {}, False),
    ({"label": "red", "correlation_id": "high"}, {}, {}, True),
    ({"label": "red", "correlation_id": "low"}, {}, {}, False),
    ({"label": "red"}, {}, {"Label": None}, False),
    ({"session_id": "s1"}, {}, {"SessionId": None}, False),
    ({"properties": {"color": "red"}}, {}, {}, True),
    ({"properties": {"color": "Red"}}, {}, {}, False),
    ({"properties": {"color": "red", "quantity": 15}}, {}, {}, True),
    ({"properties": {"color": "red", "quantity": 16}}, {}, {}, False),
    ({"properties": {"quantity": 15.0}}, {}, {}, True),
    ({"properties": {"quantity": "15"}}, {}, {}, False),
    ({"properties": {"flag": 1}}, {"flag": True}, {}, False),
    ({"properties": {"flag": True}}, {"flag": True}, {}, True),
    ({"properties": {"missing": "x"}}, {}, {}, False),
    ({"properties": {"Color": "red"}}, {}, {}, True),  # names like SQL: case-insensitive
    ({"properties": {"nothing": None}}, {}, {}, True),
    ({"properties": {"nothing": None}}, {"nothing": None}, {}, True),
    ({"properties": {"color": None}}, {}, {}, False),
    ({"properties": {"n": "x"}}, {"n": None}, {}, False),
    ({"properties": {"prop1": "abc", "prop2": "xyz"}}, {"prop1": "abc", "prop2": "xyz"}, {}, True),
    (
        {"label": "abc", "reply_to": "xdeu@hotmail.com", "properties": {"prop1": "abc"}},
        {"prop1": "abc"},
        {"Label": "abc", "ReplyTo": "xdeu@hotmail.com"},
        True,
    ),
    ({}, {}, {}, True),
]


@pytest.mark.parametrize(("kwargs", "user", "system", "expected"), CORRELATION)
def test_correlation_filter(kwargs, user, system, expected):
    msg = make_msg(**user)
    msg.system.update(system)
    assert CorrelationFilter(**kwargs).matches(msg) is expected


def test_correlation_equivalent_to_documented_sql():
    # "It's equivalent to: sys.ReplyTo = 'johndoe@contoso.com' AND sys.Label = 'Important'
    #  AND color = 'Red'" (Set subscription filters, Microsoft Learn)
    corr = CorrelationFilter(
        label="Important", reply_to="johndoe@contoso.com", properties={"color": "Red"}
    )
    sql = SqlFilter(
        "sys.ReplyTo = 'johndoe@contoso.com' AND sys.Label = 'Important' AND color = 'Red'"
    )
    for label in ("Important", "important", None):
        for color in ("Red", "red", 5, None):
            msg = make_msg(color=color)
            msg.system["Label"] = label
            assert corr.matches(msg) is sql.matches(msg), (label, color)


def test_correlation_filter_accessors_and_equality():
    f = CorrelationFilter(correlation_id="c", properties={"a": 1})
    assert f.system == {"CorrelationId": "c"}
    assert f.properties == {"a": 1}
    assert f == CorrelationFilter(correlation_id="c", properties={"a": 1})
    assert f != CorrelationFilter(correlation_id="c")
    assert "CorrelationId='c'" in repr(f)
    with pytest.raises(TypeError):
        CorrelationFilter("c")  # type: ignore[misc]


# ================================================================================================
# evaluate_rules: copy semantics
# ================================================================================================


def rule(name: str, flt, action: str | None = None) -> Rule:
    return Rule(
        name,
        SqlFilter(flt) if isinstance(flt, str) else flt,
        SqlRuleAction(action) if action else None,
    )


def test_five_rules_two_with_actions_give_three_messages():
    # The doc's scenario: 5 matching rules, 2 with actions -> 3 messages.
    rules = [
        rule("a", "color = 'red'"),
        rule("b", "quantity > 10", "SET quantity = quantity / 2"),
        rule("c", TrueFilter()),
        rule("d", "EXISTS(priority)", "SET tag = 'd'; REMOVE priority"),
        rule("e", CorrelationFilter(label="red")),
    ]
    msg = make_msg()
    before = (dict(msg.user), dict(msg.system))
    out = evaluate_rules(rules, msg)
    assert out is not None and len(out) == 3
    plain, b, d = out
    assert plain.user == msg.user and plain.system == msg.system
    assert RULE_NAME_PROPERTY not in plain.user
    assert b.user == {**msg.user, "quantity": 7, "RuleName": "b"}
    assert d.user == {"color": "red", "quantity": 15, "price": 2.5, "tag": "d", "RuleName": "d"}
    assert b.system == msg.system and d.system == msg.system
    # every result is a private copy, and the input is untouched
    assert (msg.user, msg.system) == before
    assert all(m is not msg and m.user is not msg.user and m.system is not msg.system for m in out)
    plain.user["x"] = 1
    assert "x" not in msg.user


def test_nothing_matches_gives_empty_list():
    rules = [
        rule("a", "color = 'blue'"),
        rule("b", FalseFilter(), "SET x = 1"),
        rule("c", "missing = 1"),
    ]
    assert evaluate_rules(rules, make_msg()) == []
    assert evaluate_rules([], make_msg()) == []


def test_several_plain_rules_give_one_unmodified_copy():
    rules = [rule("a", "color = 'red'"), rule("b", TrueFilter()), rule("c", "quantity = 15")]
    out = evaluate_rules(rules, make_msg())
    assert out is not None and len(out) == 1
    assert out[0].user == make_msg().user


def test_only_the_action_rule_matches():
    rules = [rule("plain", "color = 'blue'"), rule("act", "color = 'red'", "SET sys.Label = 'x'")]
    out = evaluate_rules(rules, make_msg())
    assert out is not None and len(out) == 1
    assert out[0].system["Label"] == "x"
    assert out[0].user["RuleName"] == "act"


def test_non_matching_action_rule_gives_no_copy():
    rules = [rule("plain", "color = 'red'"), rule("act", "color = 'blue'", "SET x = 1")]
    out = evaluate_rules(rules, make_msg())
    assert out is not None and len(out) == 1 and "x" not in out[0].user


def test_actions_apply_to_the_original_independently():
    rules = [
        rule("one", TrueFilter(), "SET n = 1; SET quantity = quantity + 1"),
        rule("two", TrueFilter(), "SET quantity = quantity + 100"),
    ]
    out = evaluate_rules(rules, make_msg())
    assert out is not None and [m.user["quantity"] for m in out] == [16, 115]
    assert "n" not in out[1].user
    assert [m.user["RuleName"] for m in out] == ["one", "two"]


def test_rule_name_overrides_a_sent_property_and_an_action():
    rules = [rule("r1", TrueFilter(), "SET RuleName = 'mine'")]
    out = evaluate_rules(rules, make_msg(RuleName="sender"))
    assert out is not None and out[0].user["RuleName"] == "r1"


def test_filter_exception_raises_even_when_another_rule_matched():
    rules = [rule("ok", TrueFilter()), rule("bad", "quantity / 0 = 1")]
    with pytest.raises(FilterEvaluationError) as info:
        evaluate_rules(rules, make_msg())
    assert info.value.rule_name == "bad"
    assert "bad" in str(info.value) and "division by zero" in str(info.value)


def test_action_exception_raises():
    rules = [rule("bad", TrueFilter(), "SET x = color * 2")]
    with pytest.raises(FilterEvaluationError) as info:
        evaluate_rules(rules, make_msg())
    assert info.value.rule_name == "bad"


def test_default_rule_and_correlation_rule():
    default = Rule("$Default", TrueFilter(), None)
    out = evaluate_rules([default], make_msg())
    assert out is not None and len(out) == 1
    corr = Rule("c", CorrelationFilter(correlation_id="nope"), None)
    assert evaluate_rules([corr], make_msg()) == []


def test_rule_is_frozen():
    r = Rule("a", TrueFilter(), None)
    with pytest.raises(FrozenInstanceError):
        r.name = "b"  # type: ignore[misc]
    assert Rule("a", TrueFilter()).action is None


# ================================================================================================
# rule_from_config (Microsoft emulator Config.json fields)
# ================================================================================================


def test_rule_from_config_sql_with_action():
    r = rule_from_config(
        "sql-filter-1",
        "Sql",
        "sys.MessageId = 'm1' AND color = 'red'",
        None,
        "SET sys.To = 'Entity'",
    )
    assert r.name == "sql-filter-1"
    assert r == Rule(
        "sql-filter-1",
        SqlFilter("sys.MessageId = 'm1' AND color = 'red'"),
        SqlRuleAction("SET sys.To = 'Entity'"),
    )
    out = evaluate_rules([r], make_msg())
    assert out is not None and out[0].system["To"] == "Entity"


def test_rule_from_config_correlation():
    corr = {
        "ContentType": "application/json",
        "CorrelationId": "high",
        "Label": "red",
        "MessageId": "m1",
        "ReplyTo": "johndoe@contoso.com",
        "ReplyToSessionId": "rs1",
        "SessionId": "s1",
        "To": "Store5",
        "Properties": {"color": "red", "quantity": 15},
    }
    r = rule_from_config("c", "Correlation", None, corr, None)
    assert isinstance(r.filter, CorrelationFilter) and r.action is None
    assert r.filter.matches(make_msg())
    assert not r.filter.matches(make_msg(quantity=1))
    r2 = rule_from_config("c", "correlation", None, {"subject": "red", "correlationid": "high"}, "")
    assert r2.filter == CorrelationFilter(label="red", correlation_id="high")
    assert r2.action is None


@pytest.mark.parametrize(
    ("filter_type", "cls"),
    [
        ("true", TrueFilter),
        ("True", TrueFilter),
        ("TrueFilter", TrueFilter),
        ("false", FalseFilter),
        ("FALSE", FalseFilter),
    ],
)
def test_rule_from_config_boolean(filter_type, cls):
    r = rule_from_config("b", filter_type, None, None, None)
    assert isinstance(r.filter, cls)


def test_rule_from_config_sql_filter_type_spellings():
    for t in ("sql", "SQL", "SqlFilter"):
        assert isinstance(rule_from_config("s", t, "1=1", None, None).filter, SqlFilter)


def test_rule_from_config_errors():
    with pytest.raises(ValueError, match="unknown filter type"):
        rule_from_config("x", "regex", None, None, None)
    with pytest.raises(ValueError, match="needs an expression"):
        rule_from_config("x", "sql", None, None, None)
    with pytest.raises(ValueError, match="unknown correlation filter key"):
        rule_from_config("x", "correlation", None, {"Colour": "red"}, None)
    with pytest.raises(ValueError, match="given twice"):
        rule_from_config("x", "correlation", None, {"Label": "a", "Subject": "b"}, None)
    with pytest.raises(ValueError, match="mapping"):
        rule_from_config("x", "correlation", None, {"Properties": ["a"]}, None)
    with pytest.raises(FilterSyntaxError):
        rule_from_config("x", "sql", "color = ", None, None)
    with pytest.raises(FilterSyntaxError):
        rule_from_config("x", "true", None, None, "SET")
