"""Config.json: Status, AutoDeleteOnIdle (and its test extension) and auto-forwarding checks."""

from __future__ import annotations

from typing import Any

import pytest

from sbemu.config import ConfigError, parse_config


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


def test_forwarding_chain_checks() -> None:
    ok = [
        q("a", ForwardTo="b"),
        q("b", ForwardTo="c"),
        q("c", ForwardTo="d"),
        q("d", ForwardTo="e"),
        q("e"),
    ]
    parse_config(doc(ok), "t")  # 4 hops: allowed
    with pytest.raises(ConfigError, match="chain of 5 hops"):
        parse_config(doc([*ok[:-1], q("e", ForwardTo="f"), q("f")]), "t")
    with pytest.raises(ConfigError, match="loop: a -> b -> a"):
        parse_config(doc([q("a", ForwardTo="b"), q("b", ForwardTo="a")]), "t")
    dlq_loop = [
        q("a", ForwardDeadLetteredMessagesTo="b"),
        q("b", ForwardTo="c"),
        q("c", ForwardTo="b"),
    ]
    with pytest.raises(ConfigError, match="loop"):
        parse_config(doc(dlq_loop), "t")
