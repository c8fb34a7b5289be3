"""Config.json: Status, AutoDeleteOnIdle (and its test extension) and auto-forwarding checks."""

from __future__ import annotations

from typing import Any

import pytest

from sbemu.config import ConfigError, QueueConfig, missing_forward_targets, parse_config


def doc(queues: list[dict[str, Any]], topics: list[dict[str, Any]] | None = None) -> dict:
    return {
        "UserConfig": {
            "Namespaces": [{"Name": "sbemulatorns", "Queues": queues, "Topics": topics or []}]
        }
    }


def q(name: str, **props: Any) -> dict[str, Any]:
    return {"Name": name, "Properties": props}


def test_status_per_kind() -> None:
    cfg = parse_config(doc([q("a", Status="receivedisabled")]), "t")
    assert cfg.namespaces[0].queues[0].status == "ReceiveDisabled"
    with pytest.raises(ConfigError, match="not a topic status"):
        parse_config(doc([], [{"Name": "t", "Properties": {"Status": "ReceiveDisabled"}}]), "t")
    sub = {"Name": "s", "Properties": {"Status": "SendDisabled"}}
    with pytest.raises(ConfigError, match="not a subscription status"):
        parse_config(doc([], [{"Name": "t", "Subscriptions": [sub]}]), "t")


def test_auto_delete_on_idle_minimum_and_extension() -> None:
    cfg = parse_config(
        doc([q("a", AutoDeleteOnIdle="PT10M"), q("b", SbemuTestAutoDeleteOnIdle="PT2S")]), "t"
    )
    assert [x.auto_delete_on_idle_ms for x in cfg.namespaces[0].queues] == [600_000, 2_000]
    with pytest.raises(ConfigError, match="AutoDeleteOnIdle"):
        parse_config(doc([q("a", AutoDeleteOnIdle="PT4M")]), "t")
    subs = [q("a", AutoDeleteOnIdle="PT10M"), q("b", SbemuTestAutoDeleteOnIdle="PT2S"), q("c")]
    cfg = parse_config(doc([], [{"Name": "t", "Subscriptions": subs}]), "t")
    got = [s.auto_delete_on_idle_ms for s in cfg.namespaces[0].topics[0].subscriptions]
    assert got == [600_000, 2_000, None]
    with pytest.raises(ConfigError, match="AutoDeleteOnIdle"):
        parse_config(
            doc([], [{"Name": "t", "Subscriptions": [q("a", AutoDeleteOnIdle="PT1M")]}]), "t"
        )


def test_forwarding_accepts_what_the_admin_api_accepts() -> None:
    """One rule with the admin API (sbemu.config.forwarding): the entity itself, loops and
    chains longer than Azure's 4 hops are accepted (a message stops after 4 hops in the
    transfer dead-letter queue); only a destination that does not exist is refused."""
    chain = [q(n, ForwardTo=nxt) for n, nxt in zip("abcde", "bcdef", strict=True)] + [q("f")]
    parse_config(doc(chain), "t")  # 5 hops
    cfg = parse_config(doc([q("a", ForwardTo="A")]), "t")  # itself, spelled as it is
    assert cfg.namespaces[0].queues[0].forward_to == "a"
    parse_config(doc([q("a", ForwardTo="b"), q("b", ForwardTo="a")]), "t")
    dlq_loop = [
        q("a", ForwardDeadLetteredMessagesTo="b"),
        q("b", ForwardTo="c"),
        q("c", ForwardTo="b"),
    ]
    parse_config(doc(dlq_loop), "t")
    sub = {"Name": "s", "Properties": {"ForwardTo": "a"}}
    parse_config(doc([q("a", ForwardTo="t")], [{"Name": "t", "Subscriptions": [sub]}]), "t")
    missing = {"Name": "s", "Properties": {"ForwardDeadLetteredMessagesTo": "nowhere"}}
    with pytest.raises(ConfigError, match="'nowhere' is not a queue or topic") as info:
        parse_config(doc([], [{"Name": "t", "Subscriptions": [missing]}]), "t")
    assert "Topics[0].Subscriptions[0].Properties.ForwardDeadLetteredMessagesTo" in str(info.value)
    # the same finding the admin API reports
    (found,) = missing_forward_targets([QueueConfig(name="a", forward_to="nowhere")])
    assert (
        str(found) == "The auto-forwarding destination 'nowhere' (ForwardTo of 'a') does not exist"
    )
