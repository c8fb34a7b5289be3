"""LMDB's reader table on tmpfs (partitions/lockfile.py), over real LMDB and real processes:
every process that opens a store shares one table, a copied store gets its own, a regular
lock file in use by another process is left alone, closed and left-over tables are removed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import lmdb
import pytest

from sbemu.partitions import lockfile
from sbemu.partitions.store import PartitionStore
from sbemu.partitions.writebatch import WriteBatch

pytestmark = pytest.mark.skipif(
    not os.access(lockfile.LOCK_DIR, os.W_OK), reason="no writable /dev/shm"
)


def _target(store_dir) -> str:
    st = os.stat(store_dir / "data.mdb")
    return os.path.join(lockfile.LOCK_DIR, f"{lockfile.PREFIX}{st.st_dev:x}-{st.st_ino:x}.lock")


def _holder(store_dir) -> subprocess.Popen[str]:
    """Another process with the store open read-only (as the Spark jobs' log reader does),
    holding a read transaction until its stdin closes."""
    code = textwrap.dedent(f"""
        import lmdb, sys
        env = lmdb.open({str(store_dir)!r}, readonly=True, lock=True, max_dbs=16)
        txn = env.begin()
        print("open", flush=True)
        sys.stdin.read()
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
    return proc


def _lock_files_of(pid: int) -> set[str]:
    fds = f"/proc/{pid}/fd"
    return {
        os.readlink(os.path.join(fds, fd))
        for fd in os.listdir(fds)
        if "lock" in os.readlink(os.path.join(fds, fd))
    }


def _commit_one(store: PartitionStore, seq: int) -> None:
    batch = WriteBatch()
    batch.put("q", seq, b"v")
    store.commit(batch)


def test_the_reader_table_lives_on_tmpfs_and_is_shared_by_every_process(tmp_path):
    path = tmp_path / "p0"
    store = PartitionStore(str(path), map_size=1 << 24)
    store.ensure_queues(["q"])
    _commit_one(store, 1)
    target = _target(path)
    assert os.readlink(path / "lock.mdb") == target and os.path.exists(target)
    reader = _holder(path)
    try:
        assert target in _lock_files_of(reader.pid)  # the same table as the writer's
        _commit_one(store, 2)
        store.close()
        assert os.path.exists(target)  # still open elsewhere: kept
        again = PartitionStore(str(path), map_size=1 << 24)
        assert os.readlink(path / "lock.mdb") == target
        assert [seq for seq, _ in again.scan("q", 0, 10, bytes)] == [1, 2]
    finally:
        reader.communicate("")
    again.close()
    assert not os.path.exists(target)  # the last user closed it: removed
    reopened = PartitionStore(str(path), map_size=1 << 24)  # made again through the link
    assert os.path.exists(target)
    reopened.close()


def test_a_copied_store_gets_a_table_of_its_own(tmp_path):
    store = PartitionStore(str(tmp_path / "a"), map_size=1 << 24)
    store.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b", symlinks=True)
    assert os.readlink(tmp_path / "b" / "lock.mdb") == _target(tmp_path / "a")
    copy = PartitionStore(str(tmp_path / "b"), map_size=1 << 24)
    assert os.readlink(tmp_path / "b" / "lock.mdb") == _target(tmp_path / "b")
    assert _target(tmp_path / "a") != _target(tmp_path / "b")
    copy.close()


def test_a_regular_lock_file_in_use_elsewhere_is_left_alone(tmp_path):
    path = tmp_path / "old"
    env = lmdb.open(str(path), max_dbs=16)  # a store from before: lock.mdb a regular file
    env.close()
    assert not os.path.islink(path / "lock.mdb")
    reader = _holder(path)
    try:
        store = PartitionStore(str(path), map_size=1 << 24)
        assert not os.path.islink(path / "lock.mdb")  # moving it would hide that reader
        store.close()
    finally:
        reader.communicate("")
    store = PartitionStore(str(path), map_size=1 << 24)  # nobody uses it now: moved
    assert os.readlink(path / "lock.mdb") == _target(path)
    store.close()


def test_left_over_tables_are_swept_unless_in_use(tmp_path):
    used = PartitionStore(str(tmp_path / "used"), map_size=1 << 24)
    held = _holder(tmp_path / "used")
    used.close()  # (this process must have no store open on a table it probes)
    left = os.path.join(lockfile.LOCK_DIR, f"{lockfile.PREFIX}test-{os.getpid():x}.lock")
    with open(left, "wb") as f:
        f.write(b"\0" * 64)
    try:
        for path in (left, _target(tmp_path / "used")):
            os.utime(path, (1_000, 1_000))  # untouched for ages
        now = 1_000 + lockfile.SWEEP_AGE_S + 1
        assert lockfile.sweep_lock_files(now) >= 1
        assert not os.path.exists(left)
        assert os.path.exists(_target(tmp_path / "used"))  # another process has it open
    finally:
        held.communicate("")
        if os.path.exists(left):
            os.unlink(left)
