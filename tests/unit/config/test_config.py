"""Config.json loading: Microsoft's sample verbatim, defaults, sbemu extensions, errors, durations."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from pathlib import Path

import pytest
from configs import (
    document,
    namespace,
    queue,
    queue_doc,
    rule,
    rule_doc,
    subscription,
    topic,
    topic_doc,
    user_config,
)

from sbemu.config import (
    Config,
    ConfigError,
    QueueConfig,
    RuleConfig,
    SasPolicy,
    default_config,
    format_duration_ms,
    load_config,
    parse_config,
    parse_duration_ms,
)

# Azure/azure-service-bus-emulator-installer, ServiceBus-Emulator/Config/Config.json, verbatim
# (comments included: Microsoft's emulator accepts them, so must we); kept as the data file it is.
MICROSOFT_SAMPLE = (Path(__file__).parent / "microsoft_config.json").read_text(encoding="utf-8")


def write(tmp_path: Path, text: str, name: str = "Config.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------
# Microsoft's sample and the embedded default
# ------------------------------------------------------------------------------------------------


def test_microsoft_sample_loads_verbatim(tmp_path: Path) -> None:
    path = write(tmp_path, MICROSOFT_SAMPLE)
    config = load_config(path)

    assert config.source == str(path)
    assert config.logging_type == "File"
    (ns,) = config.namespaces
    assert ns.name == "sbemulatorns"
    assert ns.premium_partitions is None
    assert ns.max_message_size_bytes == 256 * 1024
    assert ns.sas_policies == (
        SasPolicy(
            "RootManageSharedAccessKey", "SAS_KEY_VALUE", frozenset({"Manage", "Send", "Listen"})
        ),
    )

    (queue,) = ns.queues
    assert queue == QueueConfig(
        name="queue.1",
        lock_duration_ms=60_000,
        max_delivery_count=3,
        default_message_ttl_ms=3_600_000,
        dead_lettering_on_message_expiration=False,
        requires_duplicate_detection=False,
        duplicate_detection_window_ms=20_000,
        requires_session=False,
        forward_to=None,  # "" means no forwarding
        forward_dead_lettered_messages_to=None,
        partition_count=1,
        max_size_mb=1024,
        enable_partitioning=False,
    )
    assert not queue.partitioned

    (topic,) = ns.topics
    assert topic.name == "topic.1" and not topic.partitioned
    assert [s.name for s in topic.subscriptions] == [f"subscription.{i}" for i in range(1, 5)]
    sub1, sub2, sub3, sub4 = topic.subscriptions
    assert sub1.rules == (
        RuleConfig(
            "app-prop-filter-1", "correlation", None, {"ContentType": "application/json"}, None
        ),
    )
    assert sub2.rules[0].filter_type == "correlation"
    assert sub2.rules[0].correlation == {"Properties": {"prop1": "value1"}}
    assert sub3.rules == (RuleConfig("$Default", "true", None, None, None),)
    assert sub4.rules == (
        RuleConfig(
            "sql-filter-1",
            "sql",
            "sys.MessageId = '123456' AND userProp1 = 'value1'",
            None,
            "SET sys.To = 'Entity'",
        ),
    )
    for sub in topic.subscriptions:
        assert sub.lock_duration_ms == 60_000
        assert sub.max_delivery_count == 3
        assert sub.dead_lettering_on_filter_evaluation_exceptions is True


def test_default_config_has_partitioned_entities() -> None:
    config = default_config()
    assert config.source == "<embedded default>"
    (ns,) = config.namespaces
    assert ns.name == "sbemulatorns"
    assert [q.name for q in ns.queues] == ["queue.1", "queue.partitioned"]
    assert [t.name for t in ns.topics] == ["topic.1", "topic.partitioned"]
    assert not ns.queue("queue.1").partitioned
    partitioned_queue = ns.queue("QUEUE.PARTITIONED")  # lookups ignore case
    assert partitioned_queue.partitioned and partitioned_queue.partition_count == 16
    topic = ns.topic("topic.partitioned")
    assert topic.partitioned and topic.partition_count == 16
    assert topic.total_max_size_mb == 16 * 1024  # [P5]
    assert [s.name for s in topic.subscriptions] == ["subscription.1"]
    assert ns.topic("topic.1").subscription("subscription.1").rules[0].filter_type == "true"
    assert config.namespace("SBEMULATORNS") is ns


def test_config_values_survive_copy_pickle_and_asdict(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MICROSOFT_SAMPLE))
    assert copy.deepcopy(config) == config
    assert pickle.loads(pickle.dumps(config)) == config
    json.dumps(dataclasses.asdict(config), default=sorted)
    correlation = config.namespaces[0].topics[0].subscriptions[1].rules[0].correlation
    with pytest.raises(TypeError):
        correlation["x"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        correlation["Properties"]["prop2"] = 2  # type: ignore[index]


# ------------------------------------------------------------------------------------------------
# Defaults for omitted values (the Microsoft emulator schema's "default"s)
# ------------------------------------------------------------------------------------------------


def test_omitted_properties_take_microsoft_defaults() -> None:
    doc = user_config(namespace(Queues=[queue("q")], Topics=[topic("t", subscription("s"))]))
    config = parse_config(doc, "mem")
    assert config.logging_type == "Console"
    ns = config.namespaces[0]
    q = ns.queues[0]
    assert (q.lock_duration_ms, q.max_delivery_count, q.default_message_ttl_ms) == (
        60_000,
        3,
        3_600_000,
    )
    assert q.duplicate_detection_window_ms == 20_000
    assert not (
        q.dead_lettering_on_message_expiration
        or q.requires_duplicate_detection
        or q.requires_session
    )
    assert (q.forward_to, q.forward_dead_lettered_messages_to) == (None, None)
    assert (q.partition_count, q.enable_partitioning, q.max_size_mb) == (1, False, 1024)
    t = ns.topics[0]
    assert (
        t.default_message_ttl_ms,
        t.duplicate_detection_window_ms,
        t.requires_duplicate_detection,
    ) == (
        3_600_000,
        20_000,
        False,
    )
    s = t.subscriptions[0]
    assert (s.lock_duration_ms, s.max_delivery_count, s.default_message_ttl_ms) == (
        60_000,
        3,
        3_600_000,
    )
    assert s.dead_lettering_on_filter_evaluation_exceptions is True
    assert s.rules == (RuleConfig("$Default", "true"),)


def test_queues_topics_and_logging_may_be_omitted() -> None:
    config = parse_config(user_config(namespace()), "mem")
    assert config.namespaces[0].queues == () and config.namespaces[0].topics == ()


def test_property_names_ignore_case_and_logging_type_is_normalised() -> None:
    doc = queue_doc(lockduration="PT30S", MAXDELIVERYCOUNT=7)
    doc["UserConfig"]["Logging"] = {"type": "console, file"}  # type: ignore[index]
    config = parse_config(doc, "mem")
    assert config.namespaces[0].queues[0].lock_duration_ms == 30_000
    assert config.namespaces[0].queues[0].max_delivery_count == 7
    assert config.logging_type == "Console,File"


# ------------------------------------------------------------------------------------------------
# sbemu extensions
# ------------------------------------------------------------------------------------------------


def test_standard_partitioning_gives_16_partitions() -> None:
    doc = document(
        Queues=[queue("pq", EnablePartitioning=True, MaxSizeInMegabytes=2048)],
        Topics=[topic("pt", subscription("s"), EnablePartitioning=True)],
    )
    ns = parse_config(doc, "mem").namespaces[0]
    q, t = ns.queues[0], ns.topics[0]
    assert (q.enable_partitioning, q.partition_count, q.partitioned, q.max_size_mb) == (
        True,
        16,
        True,
        2048,
    )
    assert q.total_max_size_mb == 16 * 2048
    assert (t.enable_partitioning, t.partition_count, t.partitioned) == (True, 16, True)
    assert ns.max_message_size_bytes == 262_144


@pytest.mark.parametrize("count", [1, 2, 4])
def test_premium_namespace_partitions_every_entity(count: int) -> None:
    doc = document(
        PremiumMessagingPartitions=count,
        Queues=[queue("q"), queue("q2", EnablePartitioning=True)],
        Topics=[topic("t", subscription("s"))],
    )
    ns = parse_config(doc, "mem").namespaces[0]
    assert ns.premium_partitions == count
    assert ns.max_message_size_bytes == 1_048_576  # [P19]
    for entity in (*ns.queues, *ns.topics):
        assert entity.enable_partitioning and entity.partitioned  # even with a single partition
        assert entity.partition_count == count


def test_shared_access_policies_and_several_namespaces() -> None:
    doc = user_config(
        namespace(
            "first-ns",
            SharedAccessPolicies=[
                {"KeyName": "sender", "Key": "k1", "Rights": ["Send"]},
                {"KeyName": "admin", "Key": "k2", "Rights": ["manage"]},
            ],
        ),
        namespace("second-ns", Queues=[queue("q")]),
    )
    config = parse_config(doc, "mem")
    first, second = config.namespaces
    assert first.sas_policies == (
        SasPolicy("sender", "k1", frozenset({"Send"})),
        SasPolicy("admin", "k2", frozenset({"Manage", "Send", "Listen"})),  # Manage implies both
    )
    assert second.sas_policies[0].key_name == "RootManageSharedAccessKey"


def test_rule_extensions_and_forwarding() -> None:
    sub = subscription(
        "s",
        rule("none", {"FilterType": "False"}),
        rule("all", {"FilterType": "True", "Action": {"SqlExpression": "SET a = 1"}}),
        ForwardTo="out",
        DeadLetteringOnFilterEvaluationExceptions=False,
    )
    doc = document(
        Queues=[
            queue("in", ForwardTo="OUT", ForwardDeadLetteredMessagesTo="dead"),
            queue("out"),
            queue("dead"),
        ],
        Topics=[topic("t", sub)],
    )
    ns = parse_config(doc, "mem").namespaces[0]
    assert ns.queues[0].forward_to == "out"  # resolved to the declared name
    assert ns.queues[0].forward_dead_lettered_messages_to == "dead"
    sub = ns.topics[0].subscriptions[0]
    assert sub.forward_to == "out"
    assert sub.dead_lettering_on_filter_evaluation_exceptions is False
    assert [(r.name, r.filter_type, r.action_expression) for r in sub.rules] == [
        ("none", "false", None),
        ("all", "true", "SET a = 1"),
    ]


def test_small_sizes_for_tests_and_wide_limits() -> None:
    ns = parse_config(
        queue_doc(
            MaxSizeInMegabytes=1,
            MaxDeliveryCount=100,
            DefaultMessageTimeToLive="P14D",
            DuplicateDetectionHistoryTimeWindow="P7D",
            LockDuration="PT5S",
        ),
        "mem",
    ).namespaces[0]
    q = ns.queues[0]
    assert (q.max_size_mb, q.max_delivery_count) == (1, 100)
    assert q.default_message_ttl_ms == 14 * 86_400_000
    assert q.duplicate_detection_window_ms == 7 * 86_400_000
    assert q.lock_duration_ms == 5_000


def test_comments_and_trailing_commas_are_tolerated(tmp_path: Path) -> None:
    text = """{
      /* block comment with "quotes" and // inside */
      "UserConfig": {
        "Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "a//b"},],},],  // trailing
      }
    }"""
    config = load_config(write(tmp_path, text))
    assert config.namespaces[0].queues[0].name == "a//b"  # "//" inside a string is not a comment


# ------------------------------------------------------------------------------------------------
# Errors: one line, "<file>: <JSON path>: <what>"
# ------------------------------------------------------------------------------------------------

NS = "UserConfig.Namespaces[0]"
Q = f"{NS}.Queues[0].Properties"
T = f"{NS}.Topics[0]"
SUB = f"{T}.Subscriptions[0]"
RULE = f"{SUB}.Rules[0].Properties"


INVALID = [
    # (document, JSON path, part of the message)
    (queue_doc(LockDuration="PT4S"), f"{Q}.LockDuration", "between PT5S and PT5M"),
    (queue_doc(LockDuration="PT6M"), f"{Q}.LockDuration", "between PT5S and PT5M"),
    (queue_doc(LockDuration="soon"), f"{Q}.LockDuration", "not a duration"),
    (queue_doc(LockDuration=60), f"{Q}.LockDuration", "expected a string, got a number"),
    (queue_doc(MaxDeliveryCount=0), f"{Q}.MaxDeliveryCount", "at least 1"),
    (queue_doc(MaxDeliveryCount="3"), f"{Q}.MaxDeliveryCount", "expected an integer, got a string"),
    (queue_doc(MaxDeliveryCount=2.5), f"{Q}.MaxDeliveryCount", "expected an integer"),
    (
        queue_doc(DuplicateDetectionHistoryTimeWindow="PT4S"),
        f"{Q}.DuplicateDetectionHistoryTimeWindow",
        "PT5S and P7D",
    ),
    (
        queue_doc(DuplicateDetectionHistoryTimeWindow="P8D"),
        f"{Q}.DuplicateDetectionHistoryTimeWindow",
        "PT5S and P7D",
    ),
    (queue_doc(DefaultMessageTimeToLive="PT0S"), f"{Q}.DefaultMessageTimeToLive", "out of range"),
    (queue_doc(DefaultMessageTimeToLive="-PT1H"), f"{Q}.DefaultMessageTimeToLive", "negative"),
    (
        queue_doc(MaxSizeInMegabytes=1000),
        f"{Q}.MaxSizeInMegabytes",
        "1024, 2048, 3072, 4096 or 5120",
    ),
    (queue_doc(MaxSizeInMegabytes=10240), f"{Q}.MaxSizeInMegabytes", "not a valid size"),
    (queue_doc(RequiresSession="yes"), f"{Q}.RequiresSession", "expected true or false"),
    (queue_doc(EnablePartitioning=1), f"{Q}.EnablePartitioning", "expected true or false"),
    (queue_doc(LockDuraton="PT1M"), f"{Q}.LockDuraton", "did you mean 'LockDuration'"),
    (queue_doc(ForwardTo="nowhere"), f"{Q}.ForwardTo", "not a queue or topic"),
    (
        queue_doc(ForwardDeadLetteredMessagesTo=5),
        f"{Q}.ForwardDeadLetteredMessagesTo",
        "expected a string",
    ),
    (document(Queues=[queue("bad name")]), f"{NS}.Queues[0].Name", "invalid name 'bad name'"),
    (document(Queues=[queue("x" * 261)]), f"{NS}.Queues[0].Name", "1-260 characters"),
    (document(Queues=[queue("q.")]), f"{NS}.Queues[0].Name", "ending with a letter or digit"),
    (document(Queues=[queue("a$b")]), f"{NS}.Queues[0].Name", "invalid name"),
    (document(Queues=[{"Properties": {}}]), f"{NS}.Queues[0].Name", "required property is missing"),
    (
        document(Queues=[queue("Orders"), queue("orders")]),
        f"{NS}.Queues[1].Name",
        "already used",
    ),
    (
        document(Queues=[queue("dup")], Topics=[topic("DUP")]),
        f"{NS}.Topics[0].Name",
        "already used",
    ),
    (document(Queues={"Name": "q"}), f"{NS}.Queues", "expected an array, got an object"),
    (
        document(Queues=[{"Name": "q", "Props": {}}]),
        f"{NS}.Queues[0].Props",
        "did you mean 'Properties'",
    ),
    (document(Name="sb"), f"{NS}.Name", "6-50 characters"),
    (document(Name="my-namespace-sb"), f"{NS}.Name", "'-sb'"),
    (document(PremiumMessagingPartitions=3), f"{NS}.PremiumMessagingPartitions", "1, 2 or 4"),
    (document(PremiumMessagingPartitions=8), f"{NS}.PremiumMessagingPartitions", "between 1 and 4"),
    (
        document(
            PremiumMessagingPartitions=2,
            Queues=[queue("q", EnablePartitioning=False)],
        ),
        f"{NS}.Queues[0].Properties.EnablePartitioning",
        "every queue and topic in it is partitioned",
    ),
    (
        document(Queues=[queue(f"q{i}", EnablePartitioning=True) for i in range(101)]),
        NS,
        "at most 100",
    ),
    (document(SharedAccessPolicies=[]), f"{NS}.SharedAccessPolicies", "at least one policy"),
    (
        document(SharedAccessPolicies=[{"KeyName": "k", "Key": "x", "Rights": ["Read"]}]),
        f"{NS}.SharedAccessPolicies[0].Rights[0]",
        "unknown right 'Read'",
    ),
    (
        document(SharedAccessPolicies=[{"KeyName": "k", "Rights": ["Send"]}]),
        f"{NS}.SharedAccessPolicies[0].Key",
        "required property is missing",
    ),
    (
        document(SharedAccessPolicies=[{"KeyName": "k", "Key": "x", "Rights": ["Send"]}] * 2),
        f"{NS}.SharedAccessPolicies[1].KeyName",
        "already defined",
    ),
    (topic_doc(subscription("a/b")), f"{SUB}.Name", "1-50 characters"),
    (topic_doc(subscription("s" * 51)), f"{SUB}.Name", "1-50 characters"),
    (
        topic_doc(subscription("s", RequiresDuplicateDetection=True)),
        f"{SUB}.Properties.RequiresDuplicateDetection",
        "unknown property",
    ),
    (
        topic_doc(subscription("s", LockDuration="PT10M")),
        f"{SUB}.Properties.LockDuration",
        "PT5S and PT5M",
    ),
    (
        topic_doc(subscription("s", ForwardTo="missing")),
        f"{SUB}.Properties.ForwardTo",
        "not a queue or topic",
    ),
    (
        topic_doc(subscription("s"), LockDuration="PT1M"),
        f"{T}.Properties.LockDuration",
        "unknown property",
    ),
    (
        document(Topics=[topic("t", subscription("s"), subscription("S"))]),
        f"{T}.Subscriptions[1].Name",
        "already defined",
    ),
    (rule_doc({"FilterType": "Sql"}), f"{RULE}.SqlFilter", "required for FilterType 'Sql'"),
    (rule_doc({"FilterType": "Regex"}), f"{RULE}.FilterType", "unknown filter type 'Regex'"),
    (
        rule_doc({"SqlFilter": {"SqlExpression": "1=1"}}),
        f"{RULE}.FilterType",
        "required property is missing",
    ),
    (
        rule_doc(
            {
                "FilterType": "Sql",
                "SqlFilter": {"SqlExpression": "1=1"},
                "CorrelationFilter": {"To": "x"},
            }
        ),
        f"{RULE}.CorrelationFilter",
        "does not go with FilterType 'Sql'",
    ),
    (
        rule_doc({"FilterType": "Sql", "SqlFilter": {"SqlExpression": " "}}),
        f"{RULE}.SqlFilter.SqlExpression",
        "empty",
    ),
    (
        rule_doc({"FilterType": "Sql", "SqlFilter": {"SqlExpression": "a = '" + "x" * 1030 + "'"}}),
        f"{RULE}.SqlFilter.SqlExpression",
        "at most 1024",
    ),
    (
        rule_doc({"FilterType": "Correlation", "CorrelationFilter": {}}),
        f"{RULE}.CorrelationFilter",
        "at least one",
    ),
    (
        rule_doc({"FilterType": "Correlation", "CorrelationFilter": {"Subject": "x"}}),
        f"{RULE}.CorrelationFilter.Subject",
        "unknown property",
    ),
    (
        rule_doc({"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"p": [1]}}}),
        f"{RULE}.CorrelationFilter.Properties.p",
        "string, number or boolean",
    ),
    (
        rule_doc({"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {}}),
        f"{RULE}.Action.SqlExpression",
        "missing",
    ),
    (
        topic_doc(subscription("s", *[rule("r", {"FilterType": "True"})] * 2)),
        f"{SUB}.Rules[1].Name",
        "already defined",
    ),
    (user_config(), "UserConfig.Namespaces", "at least one namespace"),
    ({"UserConfig": {}}, "UserConfig.Namespaces", "required property is missing"),
    ({}, "UserConfig", "required property is missing"),
    (user_config(Extra=1), "UserConfig.Extra", "unknown property"),
    (
        user_config(namespace(), namespace()),
        "UserConfig.Namespaces[1].Name",
        "already defined",
    ),
    (
        user_config(namespace(), Logging={"Type": "Syslog"}),
        "UserConfig.Logging.Type",
        "invalid logging type",
    ),
]


@pytest.mark.parametrize(("doc", "json_path", "fragment"), INVALID)
def test_invalid_config_names_file_and_json_path(
    tmp_path: Path, doc: object, json_path: str, fragment: str
) -> None:
    path = write(tmp_path, json.dumps(doc))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {json_path}: "), message
    assert fragment in message
    assert "\n" not in message
    assert (info.value.source, info.value.path) == (str(path), json_path)


def test_duplicate_json_key_is_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path, '{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Name": "other-ns"}]}}'
    )
    with pytest.raises(
        ConfigError, match=r"UserConfig\.Namespaces\[0\]\.Name: property is given more than once"
    ):
        load_config(path)


def test_invalid_json_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  "UserConfig": {\n    "Namespaces": [ , ]\n  }\n}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: line 3 column 21: invalid JSON: Expecting value"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "line 1 column 1: invalid JSON"),
        (
            '{"UserConfig": /* never closed',
            "line 1 column 16: invalid JSON: unterminated /* comment",
        ),
        ('{"a": NaN}', "invalid JSON: NaN is not valid JSON"),
        ("[1, 2", "invalid JSON"),
    ],
)
def test_unparsable_files(tmp_path: Path, text: str, fragment: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: ")
    assert fragment in str(info.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.json: cannot read file: No such file"):
        load_config(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="cannot read file"):
        load_config(tmp_path)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b'{"UserConfig": "\xff"}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary)


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + MICROSOFT_SAMPLE.encode())
    assert isinstance(load_config(path), Config)


# ------------------------------------------------------------------------------------------------
# Durations
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT1H", 3_600_000),
        ("PT1M", 60_000),
        ("PT20S", 20_000),
        ("PT5S", 5_000),
        ("PT0.5S", 500),
        ("PT0,25S", 250),
        ("PT1.0005S", 1_001),  # sub-millisecond rounds half up
        ("PT90M", 5_400_000),
        ("PT1H30M", 5_400_000),
        ("P1D", 86_400_000),
        ("P7D", 604_800_000),
        ("P1W", 604_800_000),
        ("P2W", 1_209_600_000),
        ("P1DT2H3M4.5S", 93_784_500),
        ("P1M", 30 * 86_400_000),  # months count 30 days, as .NET XmlConvert does
        ("P1Y", 365 * 86_400_000),
        ("pt1m", 60_000),
        (" PT1M ", 60_000),
        ("PT0S", 0),
        ("00:01:00", 60_000),
        ("01:00:00", 3_600_000),
        ("00:00:00.5", 500),
        ("00:00:01.1234567", 1_123),
        ("1.00:00:00", 86_400_000),
        ("2.03:04:05", 183_845_000),
        ("1:02:03:04", 93_784_000),
        ("01:30", 5_400_000),
        ("10675199.02:48:05.4775807", 922_337_203_685_477),  # TimeSpan.MaxValue
    ],
)
def test_parse_duration_ms(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    "text",
    [
        "",
        "P",
        "PT",
        "P1DT",
        "1H",
        "PT1X",
        "P1H",
        "PT-1S",
        "-PT1S",
        "PT1.S",
        "1 hour",
        "25:00:00",
        "00:60:00",
        "00:00:60",
        "1.2.3",
        "P99999999999D",
    ],
)
def test_parse_duration_ms_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(text)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "PT0S"),
        (500, "PT0.5S"),
        (5_000, "PT5S"),
        (300_000, "PT5M"),
        (3_600_000, "PT1H"),
        (86_400_000, "P1D"),
        (93_784_500, "P1DT2H3M4.5S"),
        (30_000, "PT30S"),  # not 3E+1S (Decimal.normalize)
        (1_200_000, "PT20M"),
        (100, "PT0.1S"),
    ],
)
def test_format_duration_ms_round_trips(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text
    assert parse_duration_ms(text) == ms


def test_truncated_json_error_is_a_whole_sentence(tmp_path: Path) -> None:
    """A file cut inside a string: json says "Unterminated string starting at" and expects
    the position after it; the message must not stop mid-sentence."""
    whole = json.dumps(user_config(namespace()), indent=2)
    path = write(tmp_path, whole[: whole.index("sbemulatorns") + 4])
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert text.startswith(f"{path}: line 5 column 17: invalid JSON: ")
    assert not text.endswith(" at")
    assert "Unterminated string starting here" in text and "truncated" in text
    path = write(tmp_path, whole[: whole.index("[") + 1])  # cut between values
    with pytest.raises(ConfigError, match=r"Expecting value \(the file ends before"):
        load_config(path)
