"""Real disk faults for the fault tests: a small ext4 filesystem on a loop device, mounted where
the server keeps one entity (or its whole data dir), that the kernel itself turns read-only or
that stalls every write, and that comes back without restarting the server.

Why these mechanisms (device-mapper's `error`/`delay` targets are not in this kernel):
  * read-only: `/sys/fs/ext4/<dev>/trigger_fs_error` raises a real ext4 error, and with
    `errors=remount-ro` the kernel does what it does after a failed disk write: it aborts the
    journal and turns the filesystem read-only under the running server (writes, fsyncs,
    opens for writing and mkdir all fail with EROFS). `mount -o remount,ro` cannot do this
    while LMDB holds its files open for writing (EBUSY), and `blockdev --setro` only warns.
    An ext4 that took an error stays read-only until it is unmounted, so coming back is what
    an operator does: lazy-unmount, e2fsck, mount the repaired image again at the same path
    (the server's old descriptors keep failing; it must reopen its files by path).
  * an I/O error: the image sits on a small tmpfs (a thin-provisioned volume); once it is
    used up the loop device fails writes, fsync returns EIO, and ext4 goes read-only as above.
  * a stalled disk: `fsfreeze` blocks every write (write, fsync, mkdir, a write fault on a
    shared mapping) in the kernel until the filesystem is thawed: an fsync stall of exactly
    the length the test chooses, with reads still served from the page cache.

Needs root with CAP_SYS_ADMIN, loop devices, mkfs.ext4 and e2fsck; `available()` says why not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

TOOLS = ("mount", "umount", "losetup", "mkfs.ext4", "e2fsck", "fsfreeze")


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=60)


def available() -> str | None:
    """None when loop-mounted ext4 faults can be injected here, else why not."""
    if os.geteuid() != 0:
        return "needs root (mount, losetup)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    if not Path("/sys/fs/ext4").is_dir():
        return "no ext4 in this kernel"
    if not Path("/dev/loop-control").exists():
        return "no loop devices"
    return None


class LoopFs:
    """A small ext4 image (a sparse file in `workdir`) mounted at `mountpoint`."""

    def __init__(
        self, workdir: Path, mountpoint: Path, size_mb: int = 96, backing_mb: int | None = None
    ) -> None:
        # backing_mb: the image lives on a tmpfs of that size, a thin-provisioned device:
        # once the filesystem has written that much, the device fails writes with EIO (the
        # kernel then aborts the journal and turns the filesystem read-only)
        self.backing = Path(workdir) / "backing" if backing_mb else None
        self.backing_mb = backing_mb
        self.image = (self.backing or Path(workdir)) / "disk.img"
        self.mountpoint = Path(mountpoint)
        self.size_mb = size_mb
        self.device: str | None = None
        self._stale: list[str] = []  # loop devices of lazily unmounted faulty mounts
        self.frozen = False

    def mount(self) -> LoopFs:
        """Create the filesystem (first time) and mount it."""
        if self.backing is not None and not os.path.ismount(self.backing):
            self.backing.mkdir(parents=True, exist_ok=True)
            _run(
                "mount", "-t", "tmpfs", "-o", f"size={self.backing_mb}m", "tmpfs", str(self.backing)
            )
        if not self.image.exists():
            self.image.parent.mkdir(parents=True, exist_ok=True)
            with open(self.image, "wb") as f:
                f.truncate(self.size_mb << 20)
            _run("mkfs.ext4", "-q", "-F", "-E", "nodiscard", str(self.image))
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.device = _run("losetup", "--find", "--show", str(self.image)).stdout.strip()
        try:
            _run(
                "mount", "-t", "ext4", "-o", "errors=remount-ro", self.device, str(self.mountpoint)
            )
        except subprocess.CalledProcessError:
            _run("losetup", "-d", self.device, check=False)
            self.device = None
            raise
        return self

    def fail(self) -> None:
        """A real ext4 error: the kernel aborts the journal and remounts read-only."""
        assert self.device is not None
        name = os.path.basename(self.device)
        Path(f"/sys/fs/ext4/{name}/trigger_fs_error").write_text("sbemu fault test\n")
        if not self.read_only():
            raise RuntimeError(f"{self.mountpoint} did not turn read-only")

    def read_only(self) -> bool:
        """Whether writing a new file at the mount point fails with EROFS."""
        probe = self.mountpoint / ".rw-probe"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError as exc:
            import errno

            return exc.errno == errno.EROFS
        os.close(fd)
        os.unlink(probe)
        return False

    def repair(self) -> None:
        """What an operator does: unmount (lazily: the server still holds files there), check
        the filesystem and mount it again, writable, at the same path."""
        assert self.device is not None
        _run("umount", "-l", str(self.mountpoint))
        self._stale.append(self.device)
        _run("losetup", "-d", self.device, check=False)  # detaches once the last user closes
        self.device = None
        # e2fsck: 0 clean, 1 errors corrected (the error the fault recorded)
        r = _run("e2fsck", "-f", "-y", str(self.image), check=False)
        if r.returncode not in (0, 1):
            raise RuntimeError(f"e2fsck failed ({r.returncode}): {r.stdout[-500:]}{r.stderr}")
        self.mount()

    def _backs(self, device: str) -> bool:
        """Whether the loop device is still attached to this disk's image."""
        name = os.path.basename(device)
        try:
            backing = Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
        except OSError:
            return False  # detached already
        return backing == os.path.realpath(self.image)

    def grow_backing(self, size_mb: int) -> None:
        """Give the thin-provisioned device room again (what adding storage does)."""
        assert self.backing is not None
        _run("mount", "-o", f"remount,size={size_mb}m", str(self.backing))

    def freeze(self) -> None:
        """Stall every write to the filesystem (in the kernel) until thaw()."""
        _run("fsfreeze", "--freeze", str(self.mountpoint))
        self.frozen = True

    def thaw(self) -> None:
        _run("fsfreeze", "--unfreeze", str(self.mountpoint))
        self.frozen = False

    def cleanup(self) -> None:
        """Thaw, unmount and detach (best effort: a test that failed half-way still cleans)."""
        if self.frozen:
            _run("fsfreeze", "--unfreeze", str(self.mountpoint), check=False)
            self.frozen = False
        if self.device is not None:
            _run("umount", "-l", str(self.mountpoint), check=False)
            _run("losetup", "-d", self.device, check=False)
            self.device = None
        for dev in self._stale:
            if self._backs(dev):  # (its number may have gone to another test's disk since)
                _run("losetup", "-d", dev, check=False)
        self._stale.clear()
        if self.backing is not None and os.path.ismount(self.backing):
            _run("umount", "-l", str(self.backing), check=False)
