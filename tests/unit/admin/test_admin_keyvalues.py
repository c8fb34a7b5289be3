"""Typed rule parameters: the Atom Value elements both ways, rules.json, and the tier rules on
MaxMessageSizeInKilobytes (issue 23 items 10 and 14, pure)."""

from __future__ import annotations

import datetime as dt
import json
import xml.etree.ElementTree as ET

import pytest

from sbemu.admin.keyvalues import format_value, key_values_xml, parse_value, read_key_values
from sbemu.admin.tiers import check_message_size
from sbemu.config import NamespaceConfig
from sbemu.errors import ArgumentError
from sbemu.partitions.subscriptions import RuleSource

UTC = dt.timezone.utc


@pytest.mark.parametrize(
    ("value", "typ", "text"),
    [
        ("x", "string", "x"),
        (7, "int", "7"),
        (2**31, "long", "2147483648"),
        (-(2**31), "int", "-2147483648"),
        (0.25, "double", "0.25"),
        (True, "boolean", "true"),
        (dt.datetime(2020, 7, 5, 11, 12, 13), "dateTime", "2020-07-05T11:12:13"),
        (
            dt.datetime(2020, 7, 5, 11, 12, 13, 500_000, tzinfo=UTC),
            "dateTime",
            "2020-07-05T11:12:13.5Z",
        ),
        (
            dt.datetime(2020, 7, 5, 11, 12, 13, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            "dateTime",
            "2020-07-05T11:12:13-05:00",
        ),
        (dt.timedelta(days=1, hours=2, minutes=3), "duration", "P1DT2H3M"),
    ],
)
def test_values_keep_their_type_both_ways(value: object, typ: str, text: str) -> None:
    assert format_value(value) == (typ, text)
    back = parse_value(typ, text, "@p")
    assert back == value and type(back) is type(value)


def test_what_the_sdks_send_is_read() -> None:
    """.NET's 7-digit fractions, JS's toJSON(), Go's int for 64-bit values."""
    assert parse_value("dateTime", "2020-07-05T11:12:13.1234567Z", "k") == dt.datetime(
        2020, 7, 5, 11, 12, 13, 123456, tzinfo=UTC
    )
    assert parse_value("dateTime", "2020-07-05T11:12:13.000Z", "k").tzinfo is not None
    assert parse_value("int", "9007199254740993", "k") == 9007199254740993
    assert parse_value("double", "1", "k") == 1.0


@pytest.mark.parametrize(
    ("typ", "text"),
    [
        ("int", "x"),
        ("boolean", "yes"),
        ("dateTime", "no"),
        ("int", str(2**63)),
        ("hexBinary", "00"),
    ],
)
def test_a_bad_value_is_a_400_naming_it(typ: str, text: str) -> None:
    with pytest.raises(ArgumentError) as refused:
        parse_value(typ, text, "@param")
    assert refused.value.status_code == 400 and "@param" in refused.value.description


def test_key_values_round_trip_through_xml() -> None:
    values = {"@when": dt.datetime(2021, 1, 1, tzinfo=UTC), "@n": 3, "@s": "a<b"}
    xml = key_values_xml("Parameters", values)
    root = ET.fromstring(
        xml.replace(
            "<Parameters>",
            '<Parameters xmlns="http://schemas.microsoft.com/netservices/'
            '2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">',
        )
    )
    assert read_key_values(root) == values


def test_rules_json_keeps_datetime_and_duration() -> None:
    source = RuleSource(
        "r",
        "sql",
        "a > @when",
        None,
        "SET b = @span",
        5,
        {"@when": dt.datetime(2020, 7, 5, 11, 12, 13), "@big": 2**40},
        {"@span": dt.timedelta(minutes=90)},
    )
    corr = RuleSource(
        "c",
        "correlation",
        None,
        {"CorrelationId": "x", "Properties": {"at": dt.datetime(2020, 1, 1, tzinfo=UTC)}},
    )
    for rule in (source, corr):
        back = RuleSource.from_json(json.loads(json.dumps(rule.to_json())))
        assert back == rule
    source.compile()


def test_max_message_size_follows_the_tier() -> None:
    standard, premium = (
        NamespaceConfig("standardns"),
        NamespaceConfig("premiumns", premium_partitions=1),
    )
    desc: dict[str, object] = {"max_message_size_kb": None}
    check_message_size(desc, standard, given=False)
    assert desc["max_message_size_kb"] == 256
    with pytest.raises(ArgumentError, match=r"SubCode=40000\. Bad Request\."):
        check_message_size({"max_message_size_kb": 1024}, standard, given=True)
    check_message_size(desc := {"max_message_size_kb": None}, premium, given=False)
    assert desc["max_message_size_kb"] == 1024
    for ok in (1024, 102_400):
        check_message_size({"max_message_size_kb": ok}, premium, given=True)
    for bad in (1023, 102_401):
        with pytest.raises(
            ArgumentError,
            match="must be between 1024 and 102400 when the "
            "namespace 'premiumns' is using 'Premium' tier",
        ):
            check_message_size({"max_message_size_kb": bad}, premium, given=True)
