"""Where LMDB keeps a partition store's reader table: on tmpfs, not on the data disk.

LMDB's lock file (``lock.mdb`` beside ``data.mdb``) is a shared memory mapping: every read
transaction writes its reader slot there. On the data disk, that memory write is a write fault
on a file page, and the kernel may make it wait for the disk: always while the filesystem is
frozen (`fsfreeze`, which backup and VM-snapshot tools do for seconds), and wherever the
device needs stable pages while a page is written back (btrfs checksums, RAID, integrity).
The reads run on the event loop, so one such wait held up every client of the server
(tests/faults/test_disk_faults.py, a receiver on a frozen disk: the loop stood still 3 s in
ext4_page_mkwrite).

So ``lock.mdb`` is made a symbolic link to a file in /dev/shm (tmpfs: a write there never
waits on a disk). LMDB opens ``<store>/lock.mdb`` by its path, so every process that opens
the store (the server, `sbemu export-logs`, the Spark jobs' log reader) follows the link to
the same reader table, as LMDB requires. The file's name comes from the device and inode of
``data.mdb``, so it is the same for every process and never shared by two stores (a copied
data dir gets its own). The reader table is runtime state: when the link dangles (after a
reboot, or after the last user closed the store and the file was removed) LMDB creates the
file again through it.

A store whose lock file is a regular file that another process has open (LMDB's lock on its
first byte is held) is left alone: moving the reader table under a live reader would hide that
reader from the writer. Without /dev/shm nothing changes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os

__all__ = ["LOCK_DIR", "place_lock_file", "release_lock_file", "sweep_lock_files"]

LOCK_DIR = "/dev/shm"
LOCK_NAME = "lock.mdb"
PREFIX = "sbemu-lmdb-"
SWEEP_AGE_S = 3600  # a table nobody has open and untouched this long is left over: removed


def _held_by_another_process(path: str) -> bool:
    """Whether some other process has this LMDB lock file open: LMDB keeps an fcntl lock on
    its first byte for as long as the environment is open. (fcntl locks are per process:
    call it only while this process has no environment open on it.)"""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: leave it alone
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError:
        return True
    finally:
        os.close(fd)  # (drops the probe's lock)
    return False


def sweep_lock_files(now_s: float) -> int:
    """Remove the tables that processes which ended without closing their stores (kill -9, a
    crash, a test that never closed) left in LOCK_DIR: those nobody has open that were last
    changed over SWEEP_AGE_S before `now_s` (Unix seconds). The server runs it at start-up.
    Returns how many were removed."""
    try:
        names = [n for n in os.listdir(LOCK_DIR) if n.startswith(PREFIX) and n.endswith(".lock")]
    except OSError:
        return 0
    removed = 0
    for name in names:
        path = os.path.join(LOCK_DIR, name)
        with contextlib.suppress(OSError):
            if os.stat(path).st_mtime < now_s - SWEEP_AGE_S and release_lock_file(path):
                removed += 1
    return removed


def place_lock_file(store_dir: str, *, create: bool = True) -> str | None:
    """Before LMDB opens the store in `store_dir`: point its lock.mdb at the reader table's
    file in LOCK_DIR (see the module comment). Returns that file's path, or None when the lock
    file stays where it is (no /dev/shm, a read-only or failing disk, another process using a
    regular lock file, no data.mdb and `create` False). Never raises: opening the store
    reports the disk's errors."""
    if not os.path.isdir(LOCK_DIR) or not os.access(LOCK_DIR, os.W_OK | os.X_OK):
        return None
    try:
        # LMDB takes an empty data.mdb as a new environment: create it first so the reader
        # table can be named after it
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        fd = os.open(os.path.join(store_dir, "data.mdb"), flags, 0o644)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
    except OSError:
        return None
    target = os.path.join(LOCK_DIR, f"{PREFIX}{st.st_dev:x}-{st.st_ino:x}.lock")
    lock = os.path.join(store_dir, LOCK_NAME)
    try:
        if os.readlink(lock) == target:
            return target
        # a link to another store's table (a copied data dir, a disk mounted anew): not ours
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != errno.EINVAL or _held_by_another_process(lock):
            return None  # (EINVAL: a regular file, from before; replaced when nobody uses it)
    tmp = f"{lock}.{os.getpid()}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, lock)  # atomically: a concurrent opener sees the old or the new one
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
    return target


def release_lock_file(target: str | None) -> bool:
    """After this process closed the store: remove the reader table's file unless another
    process still has the store open (LMDB makes it again at the next open), so /dev/shm
    does not fill with the tables of stores long closed; True when it was removed. The probe's lock is held while the
    file is unlinked; a process that opened the file in that instant (between the probe and
    the unlink) would keep a table of its own, so this runs only where the store closes."""
    if target is None:
        return False
    try:
        fd = os.open(target, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        os.unlink(target)
    except OSError:
        return False  # another process has the store open: it keeps the table
    finally:
        os.close(fd)
    return True
