"""One partition over a real LMDB store, its commits run by the test as the committer runs
them: the set-up the broker tests share (store and broker, TTL, timers, counters, lazy writes,
sessions, the index layout). Time is a number the test passes in (`now`), never a clock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from builders import incoming_message, message_record  # noqa: F401  (message_record: the broker tests import it from here)
from sbemu.partitions.broker import DLQ_SUFFIX, PartitionBroker
from sbemu.partitions.records import IncomingMessage
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.subqueue import SubQueueSettings
from sbemu.partitions.transitions import Route

MAIN = "main"
DLQ = MAIN + DLQ_SUFFIX
# a queue with a 5 s lock, 3 deliveries, a 60 s default TTL that dead-letters, and its DLQ
SETTINGS = {
    MAIN: SubQueueSettings(5_000, 3, 60_000, True, DLQ),
    DLQ: SubQueueSettings(5_000, None, None, False, None),
}


def msg(i: int, ttl: int | None = None, **kw: Any) -> IncomingMessage:
    """Message number `i` (MessageId 'm<i>', a 10-byte body); `kw`: other IncomingMessage
    fields (session_id, scheduled_enqueue_time_ms, ...)."""
    fields: dict[str, Any] = {
        "message_id": f"m{i}",
        "ttl_ms": ttl,
        "tail": b"\x00Sw\xa1\x02hi",
        "size": 10,
    }
    fields.update(kw)
    return incoming_message(**fields)


def open_broker(
    path: Path | str,
    queues: dict[str, SubQueueSettings] = SETTINGS,
    *,
    entity: str = "q",
    partition_id: int = 0,
    partitioned: bool = False,
    map_size: int = 64 << 20,
    mark_dirty: Callable[[PartitionBroker], None] = lambda b: None,
    mark_lazy: Callable[[PartitionBroker], None] | None = None,
    store: PartitionStore | None = None,
) -> PartitionBroker:
    """A loaded broker over the store at `path` (or over `store`, opened by the caller)."""
    broker = PartitionBroker(
        store if store is not None else PartitionStore(str(path), map_size=map_size),
        namespace="ns",
        entity=entity,
        partition_id=partition_id,
        partitioned=partitioned,
        queues=queues,
        mark_dirty=mark_dirty,
        mark_lazy=mark_lazy,
    )
    broker.load()
    return broker


def commit(broker: PartitionBroker) -> None:
    """Commit what the broker staged (if anything) and run its completions."""
    taken = broker.take_commit()
    if taken:
        batch, callbacks = taken
        if batch:
            broker.commit_batch(batch)
        broker.commit_done(callbacks, None)


class Harness:
    """A broker whose group commits are run synchronously by the test, and reopened at will."""

    def __init__(
        self,
        path: Path,
        partition_id: int = 0,
        partitioned: bool = False,
        queues: dict[str, SubQueueSettings] = SETTINGS,
    ) -> None:
        self.path = path
        self.partition_id = partition_id
        self.partitioned = partitioned
        self.queues = queues
        self.open()

    def open(self) -> None:
        self.broker = open_broker(
            self.path, self.queues, partition_id=self.partition_id, partitioned=self.partitioned
        )
        self.store = self.broker.store

    def commit(self) -> None:
        commit(self.broker)

    def reopen(self) -> None:
        self.store.close()
        self.open()

    def send(self, *messages: IncomingMessage, now: int = 1000) -> list[int]:
        """Enqueue on the main queue and commit; the send is acknowledged only after it."""
        results: list[Exception | None] = []
        seqs = self.broker.enqueue(
            list(messages), [[Route(MAIN)]] * len(messages), now, results.append
        )
        assert results == []  # not acknowledged before the commit
        self.commit()
        assert results == [None]
        return seqs
