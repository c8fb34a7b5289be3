"""Machine faults over a real server: the store fills up (LMDB map reaching MaxSizeInMegabytes,
and a small filesystem), then room comes back. Sends get the errors the SDKs map, nothing
acknowledged is lost, nothing refused is ever delivered."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusError
from hardening.common import Server, drain_ids, make_config, queue_def

BODY = b"x" * 100_000


def _fill(conn_str: str, queue: str, limit: int = 400) -> tuple[list[str], list[str], set[str]]:
    """Send until refused; returns (acknowledged ids, refused ids, error types)."""
    acked, refused, kinds = [], [], set()
    with (
        ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client,
        client.get_queue_sender(queue) as sender,
    ):
        for i in range(limit):
            mid = f"m{i}"
            try:
                sender.send_messages(ServiceBusMessage(BODY, message_id=mid))
                acked.append(mid)
            except ServiceBusError as exc:
                refused.append(mid)
                kinds.add(type(exc).__name__)
                if len(refused) >= 5:
                    break
    return acked, refused, kinds


def test_full_store_refuses_with_quota_error_and_loses_nothing(tmp_path):
    srv = Server(tmp_path, make_config([queue_def("fullq", MaxSizeInMegabytes=4)])).start()
    try:
        acked, refused, kinds = _fill(srv.conn_str, "fullq")
        assert acked and refused, (len(acked), len(refused))
        assert kinds <= {"ServiceBusQuotaExceededError", "ServiceBusServerBusyError"}, kinds
        got = drain_ids(srv.conn_str, "fullq", wait=2)
        assert sorted(got) == sorted(acked), (set(got) - set(acked), set(acked) - set(got))
        assert srv.tracebacks() == []
    finally:
        srv.stop()


def test_full_store_accepts_again_once_messages_are_removed(tmp_path):
    srv = Server(tmp_path, make_config([queue_def("fullq", MaxSizeInMegabytes=4)])).start()
    try:
        acked, refused, _ = _fill(srv.conn_str, "fullq")
        assert acked and refused
        assert sorted(drain_ids(srv.conn_str, "fullq", wait=2)) == sorted(acked)
        acked2, _, _ = _fill(srv.conn_str, "fullq", limit=3)
        assert len(acked2) == 3  # accepting again
        assert srv.tracebacks() == []
    finally:
        srv.stop()
    srv.start()
    try:
        assert sorted(drain_ids(srv.conn_str, "fullq", wait=2)) == sorted(acked2)
    finally:
        srv.stop()


def _mount_tmpfs(path: Path, size_mb: int) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        return False
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], capture_output=True
    )
    return r.returncode == 0


def test_small_filesystem_full_then_bigger(tmp_path):
    mnt = tmp_path / "small"
    if not _mount_tmpfs(mnt, 12):
        pytest.skip("cannot mount a small tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        srv = Server(mnt / "w", make_config([queue_def("diskq")])).start()
        try:
            acked, refused, kinds = _fill(srv.conn_str, "diskq", limit=300)
            assert acked and refused, (len(acked), len(refused))
            assert kinds <= {"ServiceBusQuotaExceededError", "ServiceBusServerBusyError"}, kinds
            assert srv.alive() and srv.tracebacks() == []
            assert srv.health()["status"] == "healthy"
            subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
            # the fault went away: the partition serves again by itself, no restart (the SDK
            # retries the server-busy answers while it reopens its store)
            with (
                ServiceBusClient.from_connection_string(srv.conn_str) as client,
                client.get_queue_sender("diskq") as sender,
            ):
                for i in range(3):
                    sender.send_messages(ServiceBusMessage(b"after", message_id=f"after{i}"))
                    acked.append(f"after{i}")
        finally:
            srv.stop()
        srv.start()  # everything acknowledged is there, nothing refused
        try:
            got = drain_ids(srv.conn_str, "diskq", wait=2)
            assert sorted(got) == sorted(acked), (set(got) - set(acked), set(acked) - set(got))
        finally:
            srv.stop()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
