"""The forwarder against real LMDB stores, driven turn by turn (no server, no clock): the
crash window between the destination commit and the source deletion is replayed exactly."""

from __future__ import annotations

from pathlib import Path

from builders import incoming_message
from sbemu.config import parse_config
from sbemu.partitions.commits import GroupCommit
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.router import Router
from sbemu.partitions.specs import MAIN, entity_settings, queue_spec

NOW = 1_700_000_000_000


def config() -> object:
    doc = {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "Queues": [
                        {"Name": "src", "Properties": {"ForwardTo": "dst"}},
                        {"Name": "dst", "Properties": {"EnablePartitioning": True}},
                    ],
                }
            ]
        }
    }
    return parse_config(doc, "<forwarding tests>")


def open_router(data_dir: Path, cfg: object | None = None) -> Router:
    router = Router(data_dir, lambda: None)
    ns = (cfg or config()).namespaces[0]  # type: ignore[attr-defined]
    for q in ns.queues:
        router.add_entity(queue_spec(ns, q))
        router.apply_settings(ns.name, q.name, entity_settings(q))
    return router


def commit_all(router: Router) -> None:
    """Commit every dirty partition synchronously, with their completions (the server's
    commit turn, sbemu.partitions.commits, run inline)."""
    commits = GroupCommit(router)
    for _ in range(10):
        if not router.dirty:
            return
        commits.commit_dirty()


def message(i: int) -> IncomingMessage:
    return incoming_message(message_id=f"m{i}", partition_key=f"k{i}", tail=b"", size=10)


def counts(router: Router, name: str) -> int:
    entity = router.entities[("sbemulatorns", name)]
    total = 0
    for b in entity.partitions:
        stored = len(b.peek(MAIN, 0, 1_000_000))  # what the store holds (pending changes too)
        assert sum(b.queues[MAIN].counts) == stored  # the index's counters agree
        total += stored
    return total


def close(router: Router) -> None:
    router.close()


def test_crash_between_destination_commit_and_source_delete(tmp_path: Path) -> None:
    router = open_router(tmp_path)
    src = router.entities[("sbemulatorns", "src")]
    errors: list[object] = []
    src.send([message(i) for i in range(10)], NOW, errors.append)
    commit_all(router)
    assert errors == [None] and counts(router, "src") == 10
    router.run_pending(NOW)  # the forwarder enqueues at dst with markers
    dst = router.entities[("sbemulatorns", "dst")]
    # commit only the destination partitions: the "crash" comes before the source commit
    for broker in [b for b in router.take_dirty() if b in dst.partitions]:
        taken = broker.take_commit()
        assert taken is not None
        broker.store.commit(taken[0])
    close(router)

    router = open_router(tmp_path)  # restart: both copies are stored, markers too
    assert counts(router, "src") == 10 and counts(router, "dst") == 10
    router.run_pending(NOW)
    commit_all(router)
    commit_all(router)
    assert counts(router, "src") == 0 and counts(router, "dst") == 10  # never twice
    dst = router.entities[("sbemulatorns", "dst")]
    assert all(not b.store.forward_markers() for b in dst.partitions)
    # each message sits on the partition its PartitionKey names [P9]
    from sbemu.partitions.keys import partition_for_key

    for broker in dst.partitions:
        for rec in broker.peek(MAIN, 0, 1_000_000):
            assert partition_for_key(rec.partition_key, len(dst.partitions)) == broker.partition_id
            assert rec.original_sequence_number is not None and rec.transfer_hops == 1
    close(router)


def test_stale_markers_are_removed_at_start(tmp_path: Path) -> None:
    router = open_router(tmp_path)
    dst = router.entities[("sbemulatorns", "dst")]
    ghost = b"sbemulatorns/src/0/main/" + (12345).to_bytes(8, "big")
    dst.partitions[3].put_forward_markers([ghost], True)
    commit_all(router)
    close(router)
    router = open_router(tmp_path)
    assert router.forwarder.clean_stale_markers() == 1
    commit_all(router)
    assert not router.entities[("sbemulatorns", "dst")].partitions[3].store.forward_markers()
    close(router)


def _plain_then_forwarding(tmp_path: Path) -> tuple[Router, object]:
    """A router whose "src" does not forward yet (so a caught-up receiver gets its new messages
    before their commit lands), and the settings that make it forward to "dst"."""
    doc = {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "Queues": [{"Name": "src", "Properties": {}}, {"Name": "dst"}],
                }
            ]
        }
    }
    router = open_router(tmp_path, parse_config(doc, "<forwarding tests>"))
    forwarding = config().namespaces[0].queues[0]  # type: ignore[attr-defined]
    assert forwarding.name == "src"
    return router, entity_settings(forwarding)


def _early_message_then_forward_to(tmp_path: Path) -> tuple[Router, object, list[object]]:
    """A message put in line before its commit (early delivery), then ForwardTo set on its
    queue while that commit is on its way, and a forwarding turn run."""
    router, forwarding = _plain_then_forwarding(tmp_path)
    src = router.entities[("sbemulatorns", "src")]
    broker = src.partitions[0]
    assert broker.take_next(MAIN, NOW, True) is None  # a receiver looked: caught up
    errors: list[object] = []
    src.send([message(1)], NOW, errors.append)
    assert broker.has_ready_any(MAIN)  # in line already, its commit not yet landed
    router.apply_settings("sbemulatorns", "src", forwarding)  # type: ignore[arg-type]
    router.run_pending(NOW)
    assert errors == []
    return router, src, errors


def test_forwarding_switched_on_waits_for_a_message_put_in_line_before_its_commit(
    tmp_path: Path,
) -> None:
    router, src, errors = _early_message_then_forward_to(tmp_path)
    assert counts(router, "dst") == 0  # not taken before its own commit landed
    commit_all(router)  # the source commit lands; the forwarder goes on after it
    assert errors == [None]
    router.run_pending(NOW)
    commit_all(router)
    commit_all(router)
    assert counts(router, "src") == 0 and counts(router, "dst") == 1
    close(router)


def test_a_send_whose_commit_fails_is_not_forwarded(tmp_path: Path) -> None:
    """The message was in line, but its commit failed: its sender is told so, and it must not
    turn up at the forwarding destination either."""
    from sbemu.partitions.store import StoreUnavailable

    router, src, errors = _early_message_then_forward_to(tmp_path)
    broker = src.partitions[0]
    taken = broker.take_commit()
    assert taken is not None
    broker.commit_done(taken[1], StoreUnavailable("disk gone"))  # reloads from its store
    assert len(errors) == 1 and errors[0] is not None
    router.run_pending(NOW)
    commit_all(router)
    commit_all(router)
    assert counts(router, "src") == 0 and counts(router, "dst") == 0
    close(router)
