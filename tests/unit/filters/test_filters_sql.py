"""SQL filter language: a table of (expression, user props, system props, expected) and errors."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from sbemu.filters import (
    FalseFilter,
    FilterEvaluationError,
    FilterSyntaxError,
    MessageView,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
)

T, F, U = True, False, None  # U: unknown (NULL) -> the filter does not match

DT1 = datetime(2024, 1, 1, tzinfo=timezone.utc)
DT2 = datetime(2024, 1, 2, tzinfo=timezone.utc)
GUID = uuid.UUID("12345678-1234-5678-1234-567812345678")

USER: dict[str, object] = {
    "color": "red",
    "quantity": 15,
    "price": 9.5,
    "name": "O'Brien",
    "flag": True,
    "nothing": None,
    "Prop With Space": "x",
    "HR-EmployeeID": 7,
    "pct": "50%",
    "under": "a_c",
    "empty": "",
    "dt": DT1,
    "dt2": DT2,
    "guid": GUID,
    "blob": b"ab",
    "StoreId": "Store1",
}
SYSTEM: dict[str, object] = {
    "MessageId": "m1",
    "CorrelationId": "c1",
    "To": "Store5",
    "ReplyTo": "r",
    "Label": "hello bus",
    "SessionId": "s1",
    "ReplyToSessionId": None,
    "ContentType": "application/json",
    "SequenceNumber": 42,
    "EnqueuedTimeUtc": DT1,
    "ScheduledEnqueueTimeUtc": None,
    "TimeToLive": timedelta(minutes=5),
    "DeliveryCount": 1,
    "Size": 100,
    "PartitionKey": "pk",
}


def _logic_table() -> list[tuple[str, None, None, bool | None]]:
    """The doc's AND / OR truth tables, T=1=1, F=1=0, U=missing=1."""
    atoms = {T: "1=1", F: "1=0", U: "missing=1"}

    def and3(a, b):
        if a is F or b is F:
            return F
        return U if a is U or b is U else T

    def or3(a, b):
        if a is T or b is T:
            return T
        return U if a is U or b is U else F

    rows = []
    for a, ea in atoms.items():
        for b, eb in atoms.items():
            rows.append((f"{ea} AND {eb}", None, None, and3(a, b)))
            rows.append((f"{ea} OR {eb}", None, None, or3(a, b)))
    return rows


# (expression, user overrides, system overrides, expected three-valued result)
CASES: list[tuple[str, dict | None, dict | None, bool | None]] = [
    # --- comparison operators, numbers ---------------------------------------------------------
    ("quantity = 15", None, None, T),
    ("quantity = 15.0", None, None, T),
    ("quantity <> 15", None, None, F),
    ("quantity != 14", None, None, T),
    ("quantity > 10", None, None, T),
    ("quantity > 15", None, None, F),
    ("quantity >= 15", None, None, T),
    ("quantity < 15", None, None, F),
    ("quantity <= 15", None, None, T),
    ("price > 9", None, None, T),
    ("price < 9.5", None, None, F),
    ("price = 9.5", None, None, T),
    ("price >= 9.5", None, None, T),
    ("price <= 9.49", None, None, F),
    ("15 = quantity", None, None, T),
    ("quantity = price", None, None, F),
    ("quantity > price", None, None, T),
    # --- strings: ordinal, case-sensitive ------------------------------------------------------
    ("color = 'red'", None, None, T),
    ("color = 'RED'", None, None, F),
    ("color = 'red '", None, None, F),
    ("color <> 'blue'", None, None, T),
    ("color != 'red'", None, None, F),
    ("color > 'blue'", None, None, T),
    ("color < 'blue'", None, None, F),
    ("color >= 'red'", None, None, T),
    ("'red' = color", None, None, T),
    ("name = 'O''Brien'", None, None, T),
    ("'it''s' = 'it''s'", None, None, T),
    ("empty = ''", None, None, T),
    ("'' = ''", None, None, T),
    ("'héllo wörld ✓' = x", {"x": "héllo wörld ✓"}, None, T),
    # --- incompatible types compare FALSE, for every operator ---------------------------------
    ("color = 1", None, None, F),
    ("color <> 1", None, None, F),
    ("color > 1", None, None, F),
    ("quantity = '15'", None, None, F),
    ("quantity <> '15'", None, None, F),
    ("quantity > 'a'", None, None, F),
    ("quantity < 'a'", None, None, F),
    ("flag = 1", None, None, F),
    ("flag = TRUE", None, None, T),
    ("flag <> FALSE", None, None, T),
    ("flag > FALSE", None, None, F),
    ("guid = '12345678-1234-5678-1234-567812345678'", None, None, F),
    ("guid = guid", None, None, T),
    ("blob = blob", None, None, T),
    ("blob > blob", None, None, F),
    ("dt = 'x'", None, None, F),
    ("x = 5", {"x": [5]}, None, F),
    ("NOT color = 1", None, None, T),
    # --- datetimes -----------------------------------------------------------------------------
    ("dt < dt2", None, None, T),
    ("dt2 > dt", None, None, T),
    ("dt = dt", None, None, T),
    ("dt = naive", {"naive": datetime(2024, 1, 1)}, None, T),
    ("sys.EnqueuedTimeUtc < dt2", None, None, T),
    ("dt2 - dt > sys.TimeToLive", None, None, T),
    ("dt + sys.TimeToLive > dt", None, None, T),
    ("dt2 - sys.TimeToLive > dt", None, None, T),
    ("-sys.TimeToLive < sys.TimeToLive", None, None, T),
    # --- NULL / unknown ------------------------------------------------------------------------
    ("missing = 1", None, None, U),
    ("missing <> 1", None, None, U),
    ("missing > 1", None, None, U),
    ("nothing = 1", None, None, U),
    ("NOT missing = 1", None, None, U),
    ("NOT NOT missing = 1", None, None, U),
    ("missing = NULL", None, None, U),
    ("color = NULL", None, None, U),
    ("NULL = NULL", None, None, U),
    ("NULL <> NULL", None, None, U),
    ("missing = missing", None, None, U),
    ("missing IS NULL", None, None, T),
    ("nothing IS NULL", None, None, T),
    ("color IS NULL", None, None, F),
    ("color IS NOT NULL", None, None, T),
    ("missing IS NOT NULL", None, None, F),
    ("nothing IS NOT NULL", None, None, F),
    ("NULL IS NULL", None, None, T),
    ("missing + 1 IS NULL", None, None, T),
    ("missing + 1 = 1", None, None, U),
    ("missing / 0 = 1", None, None, U),
    ("-missing = 1", None, None, U),
    ("missing = 1 OR color = 'red'", None, None, T),
    ("missing = 1 AND color = 'blue'", None, None, F),
    ("(importance IS NULL OR importance = 'high')", None, None, T),
    ("(importance IS NULL OR importance = 'high')", {"importance": "high"}, None, T),
    ("(importance IS NULL OR importance = 'high')", {"importance": "low"}, None, F),
    *_logic_table(),
    # --- NOT -----------------------------------------------------------------------------------
    ("NOT 1=1", None, None, F),
    ("NOT 1=0", None, None, T),
    ("NOT NOT color = 'red'", None, None, T),
    ("NOT (color = 'red' AND quantity > 100)", None, None, T),
    # --- precedence: NOT > AND > OR, arithmetic above comparison --------------------------------
    ("1=0 AND 1=0 OR 1=1", None, None, T),
    ("1=1 OR 1=1 AND 1=0", None, None, T),
    ("(1=1 OR 1=1) AND 1=0", None, None, F),
    ("NOT 1=0 AND 1=0", None, None, F),
    ("NOT 1=1 OR 1=1", None, None, T),
    ("NOT (1=1 OR 1=1)", None, None, F),
    ("1 + 2 * 3 = 7", None, None, T),
    ("(1 + 2) * 3 = 9", None, None, T),
    ("10 - 2 - 3 = 5", None, None, T),
    ("8 / 2 / 2 = 2", None, None, T),
    ("2 * 3 % 4 = 2", None, None, T),
    ("2 + 3 % 2 = 3", None, None, T),
    ("-quantity = -15", None, None, T),
    ("- 2 * 3 = -6", None, None, T),
    ("-(2 + 3) = -5", None, None, T),
    ("- -2 = 2", None, None, T),
    ("+quantity = 15", None, None, T),
    ("quantity + 5 > 19", None, None, T),
    ("quantity + 5 > 19 AND color = 'red' OR 1=0", None, None, T),
    ("1=1 OR missing / 0 = 1", None, None, T),
    ("1=0 AND quantity / 0 = 1", None, None, F),
    # --- arithmetic (C#: int/int truncates, % has the dividend's sign) -------------------------
    ("quantity / 2 = 7", None, None, T),
    ("-7 / 2 = -3", None, None, T),
    ("7 / -2 = -3", None, None, T),
    ("-7 % 3 = -1", None, None, T),
    ("7 % -3 = 1", None, None, T),
    ("quantity % 4 = 3", None, None, T),
    ("quantity / 2.0 = 7.5", None, None, T),
    ("price * 2 = 19", None, None, T),
    ("price - 0.5 = 9", None, None, T),
    ("price % 2 = 1.5", None, None, T),
    ("quantity * price = 142.5", None, None, T),
    ("'a' + 'b' = 'ab'", None, None, T),
    ("name + '!' = 'O''Brien!'", None, None, T),
    ("9223372036854775807 + 1 < 0", None, None, T),
    ("big * 4 = 0", {"big": 2**62}, None, T),
    # --- numeric literals ----------------------------------------------------------------------
    ("1.5E1 = 15", None, None, T),
    ("1.5e1 = 15", None, None, T),
    ("0.5E-2 = 0.005", None, None, T),
    ("101.5E5 = 10150000", None, None, T),
    ("2E+2 = 200", None, None, T),
    ("2.0 = 2", None, None, T),
    ("1894.1204 > 1894", None, None, T),
    (".5 = 0.5", None, None, T),
    ("9223372036854775807 > 0", None, None, T),
    ("-9223372036854775808 < 0", None, None, T),
    ("x = 1.0", {"x": 1}, None, T),
    # --- LIKE ----------------------------------------------------------------------------------
    ("color LIKE 'r%'", None, None, T),
    ("color LIKE '%d'", None, None, T),
    ("color LIKE '%e%'", None, None, T),
    ("color LIKE '%'", None, None, T),
    ("color LIKE '%%'", None, None, T),
    ("color LIKE 'r_d'", None, None, T),
    ("color LIKE '___'", None, None, T),
    ("color LIKE 'r_'", None, None, F),
    ("color LIKE 're'", None, None, F),
    ("color LIKE 'red'", None, None, T),
    ("color LIKE 'R%'", None, None, F),
    ("color LIKE 'b%'", None, None, F),
    ("color NOT LIKE 'b%'", None, None, T),
    ("color NOT LIKE 'r%'", None, None, F),
    ("pct LIKE '50\\%' ESCAPE '\\'", None, None, T),
    ("'500' LIKE '50\\%' ESCAPE '\\'", None, None, F),
    ("'500' LIKE '50%'", None, None, T),
    ("'ABC%' LIKE 'ABC\\%' ESCAPE '\\'", None, None, T),
    ("'ABCD' LIKE 'ABC\\%' ESCAPE '\\'", None, None, F),
    ("under LIKE 'a!_c' ESCAPE '!'", None, None, T),
    ("'abc' LIKE 'a!_c' ESCAPE '!'", None, None, F),
    ("'a!c' LIKE 'a!!c' ESCAPE '!'", None, None, T),
    ("'abc' LIKE 'a_c'", None, None, T),
    ("'ac' LIKE 'a_c'", None, None, F),
    ("'a%c' LIKE '%!%%' ESCAPE '!'", None, None, T),
    ("empty LIKE '%'", None, None, T),
    ("empty LIKE '_'", None, None, F),
    ("'a.c' LIKE 'a.c'", None, None, T),
    ("'abc' LIKE 'a.c'", None, None, F),
    ("'[a]' LIKE '[a]'", None, None, T),
    ("'a' LIKE '[a]'", None, None, F),
    ("'a*b+' LIKE 'a*b+'", None, None, T),
    ("x LIKE 'a_b'", {"x": "a\nb"}, None, T),
    ("x LIKE 'a%'", {"x": "a\nb\nc"}, None, T),
    ("name LIKE '%''%'", None, None, T),
    ("missing LIKE 'a%'", None, None, U),
    ("missing NOT LIKE 'a%'", None, None, U),
    ("color LIKE missing", None, None, U),
    ("color LIKE 'r%' ESCAPE missing", None, None, U),
    ("color LIKE NULL", None, None, U),
    ("quantity LIKE '1%'", None, None, F),
    ("quantity NOT LIKE '1%'", None, None, T),
    ("color LIKE pat", {"pat": "r%"}, None, T),
    ("color LIKE pat ESCAPE esc", {"pat": "r!%", "esc": "!"}, None, F),
    ("pct LIKE pat ESCAPE esc", {"pat": "50!%", "esc": "!"}, None, T),
    ("color LIKE 'r' + '%'", None, None, T),
    ("sys.Label LIKE '%bus%'", None, None, T),
    ("sys.label LIKE '%bus%'", None, None, T),
    ("sys.Label LIKE '%Bus%'", None, None, F),
    ("sys.correlationid like 'c%'", None, None, T),
    # --- IN / NOT IN ---------------------------------------------------------------------------
    ("color IN ('red', 'blue')", None, None, T),
    ("color IN ('blue')", None, None, F),
    ("color IN ('RED')", None, None, F),
    ("color NOT IN ('blue', 'green')", None, None, T),
    ("color NOT IN ('red')", None, None, F),
    ("quantity IN (1, 15)", None, None, T),
    ("quantity IN (15.0)", None, None, T),
    ("quantity IN ('15', 15)", None, None, T),
    ("quantity IN ('15')", None, None, F),
    ("quantity NOT IN ('15')", None, None, T),
    ("color IN (1, 'red', TRUE)", None, None, T),
    ("color IN (1, 2.5, TRUE)", None, None, F),
    ("flag IN (1)", None, None, F),
    ("flag IN (TRUE)", None, None, T),
    ("price IN (9, 9.5)", None, None, T),
    ("missing IN ('a')", None, None, U),
    ("missing NOT IN ('a')", None, None, U),
    ("color IN ('blue', NULL)", None, None, F),
    ("color IN (NULL)", None, None, F),
    ("color IN (name, 'x')", None, None, F),
    ("color IN (name, 'red')", None, None, T),
    ("color IN (missing, sys.Label, 'red')", None, None, T),
    ("quantity IN (10 + 5)", None, None, T),
    ("quantity IN (-15, 3 * 5)", None, None, T),
    ("StoreId IN('Store1', 'Store2', 'Store3')", None, None, T),
    ("sys.To IN ('Store5','Store6','Store7') OR StoreId = 'Store8'", None, None, T),
    (
        "sys.To NOT IN ('Store1','Store2','Store3','Store4','Store5') "
        "OR StoreId NOT IN ('Store1','Store2')",
        None,
        None,
        F,
    ),
    ("color in ('red')", None, None, T),
    ("color not in ('red')", None, None, F),
    # --- EXISTS --------------------------------------------------------------------------------
    ("EXISTS(color)", None, None, T),
    ("EXISTS(missing)", None, None, F),
    ("EXISTS(nothing)", None, None, T),
    ("EXISTS(user.color)", None, None, T),
    ("EXISTS(COLOR)", None, None, T),
    ("exists (color)", None, None, T),
    ("NOT EXISTS(missing)", None, None, T),
    ("NOT EXISTS(color)", None, None, F),
    ("EXISTS([Prop With Space])", None, None, T),
    ("EXISTS(sys.Label)", None, None, T),
    ("EXISTS(sys.ReplyToSessionId)", None, None, F),
    ("EXISTS(sys.subject)", None, None, T),
    ("EXISTS(sys.NoSuchProperty)", None, None, F),
    ("EXISTS(sys.Custom)", None, {"Custom": 1}, T),
    ("EXISTS(missing) OR missing = 1", None, None, U),
    ("EXISTS(color) AND color = 'red'", None, None, T),
    # --- identifiers: plain, [delimited], "quoted", scopes ---------------------------------------
    ("[Prop With Space] = 'x'", None, None, T),
    ("[HR-EmployeeID] = 7", None, None, T),
    ("\"Prop With Space\" = 'x'", None, None, T),
    ("user.[Prop With Space] = 'x'", None, None, T),
    ("user.\"Prop With Space\" = 'x'", None, None, T),
    ("[a]]b] = 1", {"a]b": 1}, None, T),
    ('"a""b" = 1', {'a"b': 1}, None, T),
    (
        "\"http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName\" = 'account'",
        {"http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName": "account"},
        None,
        T,
    ),
    ("[and] = 1", {"and": 1}, None, T),
    ("user.color = 'red'", None, None, T),
    ("USER.color = 'red'", None, None, T),
    ("User.Color = 'red'", None, None, T),
    ("COLOR = 'red'", None, None, T),
    ("Quantity > 10", None, None, T),
    ("[sys.Label] = 'u'", {"sys.Label": "u"}, None, T),
    ("sys = 1", {"sys": 1}, None, T),
    ("user = 1", {"user": 1}, None, T),
    ("größe = 3", {"größe": 3}, None, T),
    ("p1_x2 = 1", {"p1_x2": 1}, None, T),
    ("x = 1", {"x": 1, "X": 2}, None, T),
    ("X = 2", {"x": 1, "X": 2}, None, T),
    ("MessageId = 'm1'", None, None, U),
    ("user.MessageId = 'm1'", None, None, U),
    ("MessageId = 'u1'", {"MessageId": "u1"}, None, T),
    # --- system properties, case-insensitive -------------------------------------------------
    ("sys.MessageId = 'm1'", None, None, T),
    ("SYS.MESSAGEID = 'm1'", None, None, T),
    ("sys.messageid = 'm1'", None, None, T),
    ("sys.[MessageId] = 'm1'", None, None, T),
    ("sys.CorrelationId = 'c1'", None, None, T),
    ("sys.To = 'Store5'", None, None, T),
    ("sys.ReplyTo = 'r'", None, None, T),
    ("sys.Label = 'hello bus'", None, None, T),
    ("sys.Subject = 'hello bus'", None, None, T),
    ("sys.subject = sys.label", None, None, T),
    ("sys.SessionId = 's1'", None, None, T),
    ("sys.ReplyToSessionId IS NULL", None, None, T),
    ("sys.ReplyToSessionId = 'x'", None, None, U),
    ("sys.ContentType = 'application/json'", None, None, T),
    ("sys.SequenceNumber > 40", None, None, T),
    ("sys.EnqueuedTimeUtc = dt", None, None, T),
    ("sys.ScheduledEnqueueTimeUtc IS NULL", None, None, T),
    ("sys.TimeToLive > dt - dt", None, None, T),
    ("sys.DeliveryCount = 1", None, None, T),
    ("sys.Size >= 100", None, None, T),
    ("sys.PartitionKey = 'pk'", None, None, T),
    ("sys.ViaPartitionKey IS NULL", None, None, T),
    ("sys.DeadLetterSource IS NULL", None, None, T),
    ("sys.EnqueuedTime = dt", None, None, T),
    ("sys.Custom = 5", None, {"Custom": 5}, T),
    ("sys.custom = 5", None, {"Custom": 5}, T),
    (
        "sys.CorrelationId = 'email' AND sender = 'joseph'",
        {"sender": "joseph"},
        {"CorrelationId": "email"},
        T,
    ),
    # --- keywords are case-insensitive --------------------------------------------------------
    ("color = 'red' and quantity > 10", None, None, T),
    ("Color = 'red' Or 1=0", None, None, T),
    ("color not like 'x%'", None, None, T),
    ("missing is null", None, None, T),
    ("color Is Not Null", None, None, T),
    ("color like 'r!%' escape '!'", None, None, F),
    ("not 1=0", None, None, T),
    ("flag = true", None, None, T),
    ("flag = True", None, None, T),
    ("missing = null", None, None, U),
    # --- functions -----------------------------------------------------------------------------
    ("property('color') = 'red'", None, None, T),
    ("p('color') = 'red'", None, None, T),
    ("P('COLOR') = 'red'", None, None, T),
    ("PROPERTY('Prop With Space') = 'x'", None, None, T),
    ("property('sys.Label') = 'hello bus'", None, None, T),
    ("property('SYS.subject') = 'hello bus'", None, None, T),
    ("property('user.color') = 'red'", None, None, T),
    ("property('col' + 'or') = 'red'", None, None, T),
    ("property(which) = 'red'", {"which": "color"}, None, T),
    ("property(which) = 15", {"which": "sys.Size"}, None, F),
    ("property(missing) = 'red'", None, None, U),
    ("property('missing') IS NULL", None, None, T),
    ("property(NULL) IS NULL", None, None, T),
    ("newid() IS NOT NULL", None, None, T),
    ("newid() = newid()", None, None, F),
    ("NEWID() <> 'x'", None, None, F),
    ("NewId() <> NewId()", None, None, T),
    # --- bare boolean expressions and constants -------------------------------------------------
    ("flag", None, None, T),
    ("NOT flag", None, None, F),
    ("flag AND color = 'red'", None, None, T),
    ("TRUE", None, None, T),
    ("FALSE", None, None, F),
    ("NULL", None, None, U),
    ("missing", None, None, U),
    ("(flag)", None, None, T),
    ("(1=1) = TRUE", None, None, T),
    ("(color = 'red') = (quantity = 15)", None, None, T),
    ("1=1", None, None, T),
    ("1=0", None, None, F),
    # --- whitespace ----------------------------------------------------------------------------
    ("  color='red'AND(quantity>10)  ", None, None, T),
    ("color\t=\n'red'", None, None, T),
]


def _msg(user: dict | None, system: dict | None) -> MessageView:
    return MessageView(system={**SYSTEM, **(system or {})}, user={**USER, **(user or {})})


@pytest.mark.parametrize(("expression", "user", "system", "expected"), CASES)
def test_filter_table(expression, user, system, expected):
    f = SqlFilter(expression)
    msg = _msg(user, system)
    assert f.evaluate(msg) is expected
    assert f.matches(msg) is (expected is True)


def test_table_is_big_and_unique():
    keys = [(e, repr(u), repr(s)) for e, u, s, _ in CASES]
    assert len(keys) == len(set(keys))
    assert len(CASES) > 300


def test_matches_does_not_mutate_message():
    msg = _msg(None, None)
    before = (dict(msg.system), dict(msg.user))
    SqlFilter("color = 'red' AND EXISTS(x) AND property('y') IS NULL").matches(msg)
    assert (msg.system, msg.user) == before


# --------------------------------------------------------------------------------------------
# Evaluation errors (FilterEvaluationError: what makes Azure dead-letter on filter exceptions)
# --------------------------------------------------------------------------------------------

EVAL_ERRORS = [
    "quantity / 0 = 1",
    "quantity % 0 = 1",
    "price / 0 = 1",
    "price / 0.0 > 1",
    "price % 0.0 > 1",
    "1 / 0 = 1",
    "1 % 0 = 1",
    "color + 1 = 'red1'",
    "1 + color = 'x'",
    "color * 2 = 1",
    "color - 'r' = 'ed'",
    "color / 'r' = 1",
    "flag + 1 = 2",
    "flag * flag = 1",
    "-color = 'x'",
    "+color = 'x'",
    "-flag = 1",
    "dt + 1 = dt",
    "dt + dt = dt",
    "guid + 1 = 1",
    "quantity + dt = dt",
    "sys.NoSuchProperty = 1",
    "sys.NoSuchProperty IS NULL",
    "property('sys.NoSuchProperty') = 1",
    "property(quantity) = 1",
    "color LIKE quantity",
    "color LIKE 'r%' ESCAPE name",
    "color LIKE 'r%' ESCAPE empty",
    "color LIKE pat ESCAPE '!'",
    "color",
    "quantity",
    "quantity AND 1=1",
    "NOT color",
    "1=1 AND quantity / 0 = 1",
    "1=0 OR quantity / 0 = 1",
    "missing = 1 OR quantity / 0 = 1",
    "quantity / (quantity - 15) = 1",
    "color IN ('a', quantity / 0)",
]


@pytest.mark.parametrize("expression", EVAL_ERRORS)
def test_evaluation_errors(expression):
    f = SqlFilter(expression)  # compiles fine: the error is per message
    msg = _msg({"pat": "r!"}, None)
    with pytest.raises(FilterEvaluationError):
        f.matches(msg)


def test_unexpected_python_error_becomes_filter_evaluation_error():
    class Weird:
        def __eq__(self, other):
            raise RuntimeError("boom")

        __hash__ = object.__hash__

    f = SqlFilter("x = y")
    with pytest.raises(FilterEvaluationError, match="RuntimeError"):
        f.matches(MessageView(system={}, user={"x": Weird(), "y": Weird()}))


# --------------------------------------------------------------------------------------------
# Syntax errors, with positions
# --------------------------------------------------------------------------------------------

SYNTAX_ERRORS = [
    # (expression, position, text expected in the message)
    ("", 0, "empty"),
    ("   ", 3, "empty"),
    ("color = 'red' AND", 17, "end of expression"),
    ("color = = 'red'", 8, "'='"),
    ("color = 'red", 8, "unterminated string"),
    ("color == 'red'", 7, "'='"),
    ("color = 'red' xyz", 14, "near 'xyz'"),
    ("(color = 'red'", 14, "expected ')'"),
    ("color = 'red')", 13, "')'"),
    ("color IN ()", 10, "at least one"),
    ("color IN 'a'", 9, "expected '('"),
    ("color IN ('a' 'b')", 14, "expected ')'"),
    ("color IN ('a',)", 14, "')'"),
    ("foo(1) = 1", 0, "unknown function 'foo'"),
    ("newid(1) = 1", 6, "expected ')'"),
    ("property() = 1", 9, "')'"),
    ("color NOT 'x'", 10, "IN or LIKE"),
    ("AND = 1", 0, "keyword 'AND'"),
    ("color IS 1", 9, "expected NULL"),
    ("color IS NOT 1", 13, "expected NULL"),
    ("[unterminated = 1", 0, "unterminated delimited identifier"),
    ('"unterminated = 1', 0, "unterminated quoted identifier"),
    ("[] = 1", 0, "empty identifier"),
    ("12abc = 1", 0, "invalid number"),
    ("color = 1.5.5", 8, "invalid number"),
    ("color # 1", 6, "unexpected character '#'"),
    ("!color", 0, "unexpected character '!'"),
    ("_x = 1", 0, "unexpected character '_'"),
    ("9223372036854775808 = 1", 0, "Int64"),
    ("-9223372036854775809 = 1", 1, "Int64"),
    ("1e999 = 1", 0, "out of range"),
    ("'abc'", 0, "condition"),
    ("42", 0, "condition"),
    ("1 + 2", 2, "condition"),
    ("color LIKE 'a' ESCAPE 'ab'", 22, "length 1"),
    ("color LIKE 'a' ESCAPE ''", 22, "length 1"),
    ("color LIKE 'a!' ESCAPE '!'", 11, "escape character"),
    ("color LIKE 5", 11, "must be a string"),
    ("EXISTS(color + 1)", 13, "expected ')'"),
    ("EXISTS(newid())", 7, "not a function"),
    ("EXISTS('color')", 7, "property name"),
    ("EXISTS color", 7, "expected '('"),
    ("sys. = 1", 5, "property name expected"),
    ("sys.'x' = 1", 4, "property name expected"),
    ("@p = 1", 0, "parameter '@p'"),
    ("@ = 1", 0, "parameter name"),
    ("color = 'red';", 13, "';'"),
    ("1 = 1 = 1", 6, "'='"),
    ("color LIKE", 10, "end of expression"),
    ("NOT", 3, "end of expression"),
    ("color = 'red' OR OR 1=1", 17, "keyword 'OR'"),
    ("a.b = 1", 1, "'.'"),
    ("property(42) = 1", 9, "string name"),
]


@pytest.mark.parametrize(("expression", "position", "text"), SYNTAX_ERRORS)
def test_syntax_errors(expression, position, text):
    with pytest.raises(FilterSyntaxError) as info:
        SqlFilter(expression)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.position == position, str(err)
    assert f"at position {position}" in str(err)
    assert " near " in str(err)
    assert text in str(err)


def test_syntax_error_message_format():
    with pytest.raises(FilterSyntaxError) as info:
        SqlFilter("color = 'red' AND quantity > 10 xyz")
    assert str(info.value) == "unexpected token 'xyz' at position 32 near 'xyz'"
    assert info.value.expression == "color = 'red' AND quantity > 10 xyz"


# --------------------------------------------------------------------------------------------
# Parameters (SqlRuleFilter.Parameters in the SDKs; the doc's "@stringParam" example)
# --------------------------------------------------------------------------------------------


def test_parameters():
    msg = MessageView(
        system={},
        user={"source": "orders", "DateTimeMp1": DT1, "DateTimeMp2": DT2, "n": 3},
    )
    assert SqlFilter("source = @stringParam", {"@stringParam": "orders"}).matches(msg)
    assert SqlFilter("source = @stringParam", {"stringParam": "orders"}).matches(msg)
    assert SqlFilter("source = @STRINGPARAM", {"@stringParam": "orders"}).matches(msg)
    assert not SqlFilter("source = @p", {"@p": "other"}).matches(msg)
    assert SqlFilter("DateTimeMp1 < @dtParam", {"@dtParam": DT2}).matches(msg)
    assert SqlFilter(
        "(DateTimeMp2-DateTimeMp1) <= @timespan", {"@timespan": timedelta(days=1)}
    ).matches(msg)
    assert not SqlFilter(
        "DateTimeMp2-DateTimeMp1 <= @timespan", {"@timespan": timedelta(hours=1)}
    ).matches(msg)
    assert SqlFilter("n IN (@a, @b)", {"a": 1, "b": 3}).matches(msg)
    assert SqlFilter("@p IS NULL", {"p": None}).matches(msg)


# --------------------------------------------------------------------------------------------
# Misc behaviour
# --------------------------------------------------------------------------------------------


def test_true_false_filters():
    msg = _msg(None, None)
    assert TrueFilter().matches(msg) is True
    assert FalseFilter().matches(msg) is False
    assert TrueFilter() == TrueFilter() and FalseFilter() != TrueFilter()


def test_filter_equality_and_repr():
    assert SqlFilter("a = 1") == SqlFilter("a = 1")
    assert SqlFilter("a = 1") != SqlFilter("a = 2")
    assert hash(SqlFilter("a = 1")) == hash(SqlFilter("a = 1"))
    assert "a = 1" in repr(SqlFilter("a = 1"))


def test_compiled_once_and_reusable():
    f = SqlFilter("color = 'red' AND quantity > 10")
    for q, expected in ((5, False), (11, True), (10, False), (11.5, True)):
        assert f.matches(MessageView(system={}, user={"color": "red", "quantity": q})) is expected


def test_message_view_missing_system_keys_are_null():
    msg = MessageView(system={}, user={})
    assert SqlFilter("sys.Label IS NULL").matches(msg)
    assert SqlFilter("sys.MessageId = 'x'").evaluate(msg) is None


def test_newid_returns_uuid():
    f = SqlFilter("newid() = newid()")
    assert f.evaluate(MessageView()) is False
    assert SqlFilter("property('x') = x").evaluate(MessageView(user={"x": uuid.uuid4()})) is True


def test_expression_type_is_checked():
    with pytest.raises(TypeError):
        SqlFilter(None)  # type: ignore[arg-type]


def test_matches_is_fast():
    import timeit

    f = SqlFilter("color = 'red' AND quantity > 10")
    msg = MessageView(system={"Label": "x"}, user={"color": "red", "quantity": 15})
    n = 20_000
    best = min(timeit.repeat(lambda: f.matches(msg), number=n, repeat=5)) / n
    assert best < 20e-6  # a few microseconds at most, even on a loaded CI machine


# ---------------------------------------------------------------- bounded nesting (issue 24)
@pytest.mark.parametrize(
    "expression",
    [
        "(" * 300 + "a = 1" + ")" * 300,  # a RecursionError in the parser before
        "NOT " * 5000 + "a = 1",
        "-" * 5000 + "a > 1",
        "a" + " + a" * 1000 + " > 0",  # compiled fine, overflowed the stack when evaluated
        " OR ".join(f"a = {i}" for i in range(300)),
    ],
    ids=["parentheses", "not", "signs", "arithmetic-chain", "or-chain"],
)
def test_too_deep_expressions_are_syntax_errors(expression: str) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        SqlFilter(expression)
    assert "nests more than" in str(info.value) or "too deep" in str(info.value)
    with pytest.raises(FilterSyntaxError):
        SqlRuleAction("SET b = " + expression)


def test_nesting_within_the_bounds_compiles_and_evaluates() -> None:
    from sbemu.filters.sql import MAX_EXPRESSION_DEPTH, MAX_NESTING

    msg = MessageView(user={"a": 1})
    assert SqlFilter("(" * MAX_NESTING + "a = 1" + ")" * MAX_NESTING).evaluate(msg) is True
    chain = " OR ".join(f"a = {i}" for i in range(MAX_EXPRESSION_DEPTH // 2 - 1))
    assert SqlFilter(chain).evaluate(msg) is True
    # constants fold: a long constant sum is one value, not a deep tree
    assert SqlFilter("1" + " + 1" * 5000 + " = 5001").evaluate(msg) is True
