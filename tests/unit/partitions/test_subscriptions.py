"""Topic subscriptions: fan-out copies, rule actions, runtime rules and their persistence.

Copy semantics as Azure's "Topic filters and actions": a subscription gets one copy when any
rule without an action matches, plus one copy per matching rule with an action (that copy
alone carries the action's changes). Real LMDB in a temp dir, no server.
"""

from __future__ import annotations

import json

import pytest
from routing_harness import NOW, NS, RouterHarness, message, topic_spec

from sbemu.errors import EntityNotFound, QuotaExceeded, ServiceBusError
from sbemu.filters import MessageView
from sbemu.partitions.broker import DLQ_SUFFIX
from sbemu.partitions.subscriptions import (
    DEFAULT_RULE_NAME,
    FILTER_EXCEPTION_REASON,
    MAX_CORRELATION_FILTERS_PER_TOPIC,
    RuleDefinitionError,
    RuleSource,
    subscription_queue,
)
from sbemu.protocol.views import encode_property

TRUE = RuleSource(DEFAULT_RULE_NAME, "true")


def props(**user) -> MessageView:
    return MessageView(system={"MessageId": "m", "Label": None}, user=dict(user))


@pytest.fixture
def h(tmp_path):
    return RouterHarness(tmp_path)


def ids(h, topic, sub):
    return [rec.message_id for rec, _ in h.peek(topic, subscription_queue(sub))]


def test_fan_out_gives_each_matching_subscription_one_copy(h):
    spec = topic_spec(
        {
            "all": [TRUE],
            "red": [RuleSource("red", "sql", "color = 'red'")],
            "none": [RuleSource("none", "false")],
            "corr": [
                RuleSource("c", "correlation", correlation={"Label": "L", "Properties": {"k": "v"}})
            ],
        }
    )
    t = h.add(spec)
    h.send(t, message("m1", view=props(color="red")))
    h.send(t, message("m2", view=props(color="blue", k="v")))
    assert ids(h, t, "all") == ["m1", "m2"]
    assert ids(h, t, "red") == ["m1"]
    assert ids(h, t, "none") == []
    assert ids(h, t, "corr") == []  # Label L is missing: every correlation field must match
    # every copy of a message shares its sequence number across subscriptions [P10]
    seq_all = {rec.message_id: rec.sequence_number for rec, _ in h.peek(t, "subscriptions/all")}
    seq_red = {rec.message_id: rec.sequence_number for rec, _ in h.peek(t, "subscriptions/red")}
    assert seq_red["m1"] == seq_all["m1"]


def test_a_message_no_subscription_wants_is_accepted_and_dropped(h):
    t = h.add(topic_spec({"red": [RuleSource("red", "sql", "color = 'red'")]}))
    assert h.send(t, message("m", view=props(color="blue"))) == []
    assert ids(h, t, "red") == []


def test_rule_action_changes_only_its_own_copy(h):
    t = h.add(
        topic_spec(
            {
                "plain": [TRUE],
                "tagged": [
                    RuleSource("keep", "true"),
                    RuleSource("tag", "sql", "n > 1", action_expression="SET big = true; REMOVE n"),
                ],
            }
        )
    )
    h.send(t, message("m", view=props(n=5)))
    (plain,) = [rec for rec, _ in h.peek(t, "subscriptions/plain")]
    assert plain.property_overrides is None
    copies = [rec for rec, _ in h.peek(t, "subscriptions/tagged")]
    assert len(copies) == 2  # one for the plain match, one for the rule with an action
    untouched = [c for c in copies if not c.property_overrides]
    changed = [c for c in copies if c.property_overrides]
    assert len(untouched) == 1 and len(changed) == 1
    overrides = changed[0].property_overrides
    assert overrides["big"] == encode_property(True)
    assert overrides["n"] == b""  # removed on this copy only
    assert overrides["RuleName"] == encode_property("tag")


def test_a_filter_that_fails_to_evaluate_dead_letters_or_drops(h):
    bad = [RuleSource("bad", "sql", "n + 'x' > 1")]
    t = h.add(topic_spec({"dl": bad, "drop": bad}, name="t1"))
    t2 = h.add(topic_spec({"drop": bad}, name="t2", dead_letter_on_filter_exceptions=False))
    h.send(t, message("m", view=props(n=1)))
    h.send(t2, message("m", view=props(n=1)))
    (dead,) = [rec for rec, _ in h.peek(t, subscription_queue("dl") + DLQ_SUFFIX)]
    assert dead.message_id == "m" and dead.dead_letter_reason == FILTER_EXCEPTION_REASON
    assert ids(h, t, "dl") == []
    assert h.peek(t2, subscription_queue("drop") + DLQ_SUFFIX) == []
    assert ids(h, t2, "drop") == []


def test_runtime_rules_apply_at_once_and_persist_with_the_callers_time(h, tmp_path):
    spec = topic_spec({"s": [RuleSource("red", "sql", "color = 'red'")]})
    t = h.add(spec)
    subs = t.subscriptions
    subs.add_rule("S", RuleSource("blue", "sql", "color = 'blue'"), NOW + 5)
    h.send(t, message("b", view=props(color="blue")))
    assert ids(h, t, "s") == ["b"]
    stored = json.loads((h.router.entity_dir(NS, "t") / "rules.json").read_text())
    assert [(r["name"], r["created_ms"]) for r in stored["s"]] == [("red", 0), ("blue", NOW + 5)]
    subs.remove_rule("s", "RED")  # rule and subscription names are case-insensitive
    h.reopen(spec)  # stored rules win over the configuration's at the next start
    t = h.router.get_entity(NS, "t")
    assert [r.name for r in t.subscriptions.subscription("s").sources] == ["blue"]
    h.send(t, message("r", view=props(color="red")))
    assert ids(h, t, "s") == ["b"]
    assert not any(p.name.endswith(".tmp") for p in h.router.entity_dir(NS, "t").iterdir())


def test_rule_errors_change_nothing(h):
    t = h.add(topic_spec({"s": [TRUE]}))
    subs = t.subscriptions
    rules_json = h.router.entity_dir(NS, "t") / "rules.json"
    with pytest.raises(ServiceBusError, match="already exists") as exc:
        subs.add_rule("s", RuleSource("$default", "false"), NOW)
    assert exc.value.status_code == 409
    assert exc.value.condition == "com.microsoft:entity-already-exists"
    with pytest.raises(RuleDefinitionError, match="Rule 'broken'"):
        subs.add_rule("s", RuleSource("broken", "sql", "color = = 'x'"), NOW)
    with pytest.raises(EntityNotFound):
        subs.add_rule("missing", RuleSource("r", "true"), NOW)
    with pytest.raises(EntityNotFound, match="'nope' could not be found"):
        subs.remove_rule("s", "nope")
    assert not rules_json.exists()
    assert [r.name for r in subs.subscription("s").sources] == [DEFAULT_RULE_NAME]


def test_a_rules_file_that_cannot_be_written_changes_nothing(h, tmp_path):
    """A read-only or failing disk under rules.json: the admin API answers 503 and what is
    served stays what a restart would load (regression: the change used to stay in memory)."""
    from sbemu.partitions.subscriptions import SubscriptionSpec

    t = h.add(topic_spec({"s": [TRUE]}))
    subs = t.subscriptions
    subs.add_rule("s", RuleSource("red", "sql", "color = 'red'"), NOW)
    subs.rules_path = tmp_path / "gone" / "rules.json"  # its directory is not there: EIO-alike
    with pytest.raises(OSError):
        subs.add_rule("s", RuleSource("blue", "sql", "color = 'blue'"), NOW)
    with pytest.raises(OSError):
        subs.remove_rule("s", "red")
    with pytest.raises(OSError):
        subs.add_subscription(SubscriptionSpec("s2", (TRUE,), False))
    with pytest.raises(OSError):
        subs.remove_subscription("s")
    assert list(subs.by_name) == ["s"]
    assert [r.name for r in subs.subscription("s").sources] == [DEFAULT_RULE_NAME, "red"]
    assert [r.name for r in subs.subscription("s").rules] == [DEFAULT_RULE_NAME, "red"]


def test_correlation_filter_quota_per_topic(h, monkeypatch):
    import sbemu.partitions.subscriptions as subscriptions

    monkeypatch.setattr(subscriptions, "MAX_CORRELATION_FILTERS_PER_TOPIC", 2)
    assert MAX_CORRELATION_FILTERS_PER_TOPIC == 100_000  # Azure's quota, lowered for the test
    t = h.add(topic_spec({"s": [RuleSource("c0", "correlation", correlation={"Label": "a"})]}))
    t.subscriptions.add_rule("s", RuleSource("c1", "correlation", correlation={"Label": "b"}), NOW)
    with pytest.raises(QuotaExceeded, match="correlation filters"):
        t.subscriptions.add_rule(
            "s", RuleSource("c2", "correlation", correlation={"Label": "c"}), NOW
        )
    assert [r.name for r in t.subscriptions.subscription("s").sources] == ["c0", "c1"]


def test_partitioned_topic_keeps_all_copies_on_one_partition(h):
    t = h.add(topic_spec({"a": [TRUE], "b": [TRUE]}, partitions=4))
    for i in range(8):
        h.send(t, message(f"m{i}", partition_key=f"k{i}"))
    a = h.partitions_of(t, "subscriptions/a")
    b = h.partitions_of(t, "subscriptions/b")
    assert a == b and len(a) == 8  # [P10] a message lives on one partition across subscriptions
