"""logreader.iter_log reads exactly [start, end) in chunks, over a real LMDB store."""

from __future__ import annotations

import msgpack
import pytest

from sbemu.logs import reader as logreader
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.writebatch import WriteBatch


@pytest.fixture
def log_path(tmp_path):
    path = str(tmp_path / "partition-00")
    store = PartitionStore(path, map_size=64 << 20, durable=False)
    batch = WriteBatch()
    for offset in range(5, 50):  # a log trimmed below 5 starts there
        batch.log.append((offset, msgpack.packb({"offset": offset})))
    batch.meta["next_log_offset"] = 50
    store.commit(batch)
    store.close()
    yield path
    logreader.close_all()


@pytest.mark.parametrize("chunk", [1, 7, 45, 1000])
@pytest.mark.parametrize("start,end", [(5, 50), (5, 6), (12, 40), (49, 50), (30, 80), (50, 60)])
def test_ranges_and_chunks(log_path, chunk, start, end):
    chunks = list(logreader.iter_log(log_path, start, end, chunk=chunk))
    got = [msgpack.unpackb(v)["offset"] for c in chunks for v in c]
    assert got == list(range(start, min(end, 50)))
    assert all(0 < len(c) <= chunk for c in chunks)
