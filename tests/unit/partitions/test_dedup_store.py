"""Duplicate-detection history in a real LMDB partition store: written with the batch that
admits the message, read back after reopening, swept from the front of its time index."""

from __future__ import annotations

from pathlib import Path

from sbemu.partitions.dedup import history_key
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.writebatch import WriteBatch


def test_history_is_durable_and_swept(tmp_path: Path) -> None:
    store = PartitionStore(str(tmp_path / "p0"), map_size=64 << 20)
    batch = WriteBatch()
    batch.dedup.extend([(b"a", 1_000), (b"b", 2_000), (b"c", 3_000)])
    store.commit(batch)
    assert store.dedup_seen([b"a", b"b", b"c", b"x"], 0) == {b"a", b"b", b"c"}
    assert store.dedup_seen([b"a", b"b", b"c"], 2_000) == {b"b", b"c"}
    # re-admitting an id moves it in the time index (its old entry must not sweep it)
    again = WriteBatch()
    again.dedup.append((b"a", 5_000))
    store.commit(again)
    store.close()

    store = PartitionStore(str(tmp_path / "p0"), map_size=64 << 20)
    sweep = WriteBatch()
    sweep.dedup_sweep_before = 3_500
    store.commit(sweep)
    assert store.dedup_size() == 1
    assert store.dedup_seen([b"a", b"b", b"c"], 0) == {b"a"}
    store.close()


def test_long_message_ids_are_digested() -> None:
    long_id = "x" * 2000
    key = history_key(long_id)
    assert len(key) < 100 and key == history_key(long_id)
    assert history_key("short") == b"short"
