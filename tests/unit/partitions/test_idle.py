"""AutoDeleteOnIdle's tracker against real entities (LMDB stores), driven by the `now` the
tests pass in (no server, no clock): what counts as activity for queues, topics and
subscriptions, and idle clocks that go on across a restart."""

from __future__ import annotations

from pathlib import Path

from builders import incoming_message
from sbemu.config import parse_config
from sbemu.partitions.idle import (
    SAVE_INTERVAL_MS,
    IdleTracker,
    load_idle_times,
    save_idle_times,
)
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.router import Router
from sbemu.partitions.specs import entity_settings, queue_spec, topic_spec

NOW = 1_700_000_000_000
NS = "sbemulatorns"
WINDOW = 2_000


def config() -> object:
    idle = {"SbemuTestAutoDeleteOnIdle": "PT2S"}
    doc = {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": NS,
                    "Queues": [
                        {"Name": "q", "Properties": dict(idle)},
                        {"Name": "fwd", "Properties": {**idle, "ForwardTo": "plain"}},
                        {"Name": "plain", "Properties": {}},
                    ],
                    "Topics": [
                        {
                            "Name": "t",
                            "Properties": {},
                            "Subscriptions": [
                                {"Name": "quiet", "Properties": dict(idle)},
                                {"Name": "read", "Properties": dict(idle)},
                                {"Name": "ruled", "Properties": dict(idle)},
                                {"Name": "fwd", "Properties": {**idle, "ForwardTo": "plain"}},
                                {"Name": "never", "Properties": {}},
                            ],
                        },
                        {
                            "Name": "tw",
                            "Properties": dict(idle),
                            "Subscriptions": [{"Name": "s", "Properties": dict(idle)}],
                        },
                    ],
                }
            ]
        }
    }
    return parse_config(doc, "<idle tests>")


def open_router(data_dir: Path) -> Router:
    router = Router(data_dir, lambda: None, lambda v: b"", lambda v: b"")
    ns = config().namespaces[0]  # type: ignore[attr-defined]
    for q in ns.queues:
        router.add_entity(queue_spec(ns, q))
        router.apply_settings(ns.name, q.name, entity_settings(q))
    for t in ns.topics:
        router.add_entity(topic_spec(ns, t))
        router.apply_settings(ns.name, t.name, entity_settings(t))
    return router


def message() -> IncomingMessage:
    return incoming_message(message_id="m", tail=b"", size=10)


def names(keys: list[tuple[object, str | None]]) -> set[str]:
    return {f"{e.name}/{sub}" if sub else e.name for e, sub in keys}  # type: ignore[attr-defined]


def test_what_counts_as_activity(tmp_path: Path) -> None:
    router = open_router(tmp_path)
    try:
        t = router.entities[(NS, "t")]
        assert router.idle_entities(NOW) == []  # first seen: the clocks start
        t.send([message()], NOW + 500, lambda error: None)  # a send to the topic
        router.lookup(NS, "t/subscriptions/read")  # a receiver (or peek) attaching
        t.touch_subscription("ruled")  # a rule added through the admin API
        router.lookup(NS, "tw/subscriptions/s/$deadletterqueue")  # its DLQ counts for it
        assert router.idle_entities(NOW + 500) == []
        due = names(router.idle_entities(NOW + WINDOW))
        # the send to t kept neither t's subscriptions nor t (t has no window) alive; an
        # auto-forwarding queue or subscription is never idle; a subscription's activity
        # keeps its topic alive
        assert due == {"q", "t/subscriptions/quiet"}
        # reported once, while the deletion runs
        assert router.idle_entities(NOW + WINDOW + 100) == []
        due = names(router.idle_entities(NOW + 500 + WINDOW))
        assert due == {"t/subscriptions/read", "t/subscriptions/ruled", "tw"}
        # the topic goes with its subscriptions: tw/s is not reported on its own
    finally:
        router.close()


def test_an_open_receiver_keeps_a_subscription_and_its_topic(tmp_path: Path) -> None:
    router = open_router(tmp_path)
    try:
        _tw, view = router.lookup(NS, "tw/subscriptions/s")
        router.idle_entities(NOW)

        def tw_due(now_ms: int) -> set[str]:
            return {n for n in names(router.idle_entities(now_ms)) if n.startswith("tw")}

        view.consumers.append(object())  # type: ignore[arg-type]
        assert tw_due(NOW + 10 * WINDOW) == set()
        view.consumers.clear()
        assert tw_due(NOW + 11 * WINDOW - 1) == set()
        assert tw_due(NOW + 11 * WINDOW) == {"tw"}
    finally:
        router.close()


def test_a_refused_deletion_is_tried_again_after_another_window(tmp_path: Path) -> None:
    router = open_router(tmp_path)
    try:
        router.idle_entities(NOW)
        (key,) = [k for k in router.idle_entities(NOW + WINDOW) if k[0].name == "q"]
        router.idle.failed(key, NOW + WINDOW + 1)
        assert "q" not in names(router.idle_entities(NOW + 2 * WINDOW))
        assert "q" in names(router.idle_entities(NOW + 2 * WINDOW + 1))
    finally:
        router.close()


def test_idle_clocks_go_on_across_a_restart(tmp_path: Path) -> None:
    router = open_router(tmp_path)
    try:
        router.idle_entities(NOW)
        router.lookup(NS, "t/subscriptions/read")
        router.lookup(NS, "q")
        router.idle_entities(NOW + 1_000)  # q and t/read active at NOW + 1000
        times = router.idle.snapshot()
        assert times is not None and router.idle.snapshot() is None  # nothing new since
        assert times[(NS, "q", None)] == NOW + 1_000
        assert times[(NS, "t", "subscriptions/read")] == NOW + 1_000
        assert times[(NS, "t", "subscriptions/quiet")] == NOW
        entities = list(router.entities.values())
    finally:
        router.close()

    for clean, slack in ((True, 0), (False, SAVE_INTERVAL_MS)):
        save_idle_times(tmp_path, times, clean)
        assert load_idle_times(tmp_path) == (times, clean)
        tracker = IdleTracker()
        tracker.restore(*load_idle_times(tmp_path))
        # the first tick after the restart: idle since before it, not since the start
        assert tracker.due(entities, NOW + WINDOW + slack - 1) == []
        due = names(tracker.due(entities, NOW + WINDOW + slack))
        assert due == {"t/subscriptions/quiet", "t/subscriptions/ruled", "tw"}
        due = names(tracker.due(entities, NOW + 1_000 + WINDOW + slack))
        assert due == {"q", "t/subscriptions/read"}

    # without a saved file (or with an unreadable one) the clocks start at the start
    (tmp_path / "idle.json").write_text("{not json")
    tracker = IdleTracker()
    tracker.restore(*load_idle_times(tmp_path))
    assert tracker.due(entities, NOW + 50_000) == []
    assert len(tracker.due(entities, NOW + 50_000 + WINDOW)) == 5


def test_saved_times_apply_only_to_entities_there_at_start(tmp_path: Path) -> None:
    """An entity created after the restart (same name as one saved) starts a fresh clock."""
    router = open_router(tmp_path)
    try:
        q = router.entities[(NS, "q")]
        tracker = IdleTracker()
        tracker.restore({(NS, "q", None): NOW - 10 * WINDOW}, True)
        assert tracker.due([], NOW) == []  # first tick: q did not exist
        assert tracker.due([q], NOW + 1) == []  # q is created now
        assert names(tracker.due([q], NOW + 1 + WINDOW)) == {"q"}
    finally:
        router.close()


def test_a_stop_before_the_first_tick_keeps_the_saved_times(tmp_path: Path) -> None:
    tracker = IdleTracker()
    tracker.restore({(NS, "q", None): NOW}, False)
    assert tracker.snapshot(force=True) == {(NS, "q", None): NOW + SAVE_INTERVAL_MS}
