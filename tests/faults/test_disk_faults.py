"""Disk faults under a running server, injected for real (hardening/diskfaults.py): the data dir
(or one partition's directory) turns read-only because the kernel remounts it after a disk
error, and later is writable again; a thin-provisioned volume runs out and fsync gets EIO;
the disk stalls every write (fsfreeze) for seconds, under senders and under a receiver.

What must hold, in the issue's words: sends get the Service Bus errors the SDKs map
(server-busy, which they retry), nothing acknowledged is lost or duplicated, the partitions on
a healthy disk keep serving with low latency (commits run on worker threads, so a stalled
fsync does not block the event loop), service resumes by itself once the fault goes away, and
the server log never shows a traceback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusError
from hardening.common import (
    KEY,
    KEY_NAME,
    NAMESPACE,
    SdkProbe,
    Server,
    drain_ids,
    make_config,
    queue_def,
)
from hardening.diskfaults import LoopFs, available

from sbemu.partitions.keys import partition_for_key

pytestmark = pytest.mark.skipif(available() is not None, reason=f"disk faults: {available()}")

PARTITIONS = 16
FAULTY = 3  # the partition whose directory is on the faulty disk


def _mount(disk: LoopFs) -> None:
    """Mount the test disk, or skip where this machine refuses (no CAP_SYS_ADMIN, no loop)."""
    import subprocess

    try:
        disk.mount()
    except subprocess.CalledProcessError as exc:
        disk.cleanup()
        pytest.skip(f"cannot mount a loop-device ext4 here: {exc.stderr or exc}")


def _key_on(partition: int, n: int = 2) -> list[str]:
    """Partition keys that land on `partition` of a 16-partition entity."""
    keys, i = [], 0
    while len(keys) < n:
        if partition_for_key(f"k{i}", PARTITIONS) == partition:
            keys.append(f"k{i}")
        i += 1
    return keys


class Sender(threading.Thread):
    """Sends one message at a time, all along, with no SDK retries: every acknowledged
    MessageId is kept, every refusal counted by error type (what the SDK maps it to)."""

    def __init__(
        self,
        conn_str: str,
        queue: str,
        prefix: str,
        partition_key: Callable[[int], str | None] = lambda i: None,
        pause: float = 0.02,
        body_bytes: int = 0,
    ) -> None:
        super().__init__(daemon=True, name=f"sender-{prefix}")
        self.conn_str, self.queue, self.prefix = conn_str, queue, prefix
        self.partition_key = partition_key
        self.pause = pause
        self.body_bytes = body_bytes
        self.acked: list[str] = []
        self.errors: dict[str, int] = {}
        self.refused_keys: set[str | None] = set()
        self.crash: BaseException | None = None
        # stop by itself once this many sends were acknowledged (None: until stop()), so a
        # test decides how much it writes, not how fast its own thread gets to stop()
        self.stop_after: int | None = None
        self._cond = threading.Condition()
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            with (
                ServiceBusClient.from_connection_string(self.conn_str, retry_total=0) as client,
                client.get_queue_sender(self.queue) as sender,
            ):
                i = 0
                while not self._stop_event.is_set():
                    mid, key = f"{self.prefix}{i}", self.partition_key(i)
                    i += 1
                    try:
                        body = mid.encode().ljust(self.body_bytes, b".")
                        sender.send_messages(
                            ServiceBusMessage(body, message_id=mid, partition_key=key)
                        )
                    except ServiceBusError as exc:
                        with self._cond:
                            name = type(exc).__name__
                            self.errors[name] = self.errors.get(name, 0) + 1
                            self.refused_keys.add(key)
                            self._cond.notify_all()
                        self._stop_event.wait(0.1)
                        continue
                    with self._cond:
                        self.acked.append(mid)
                        if self.stop_after is not None and len(self.acked) >= self.stop_after:
                            self._stop_event.set()
                        self._cond.notify_all()
                    self._stop_event.wait(self.pause)
        except BaseException as exc:  # reported by the test
            self.crash = exc
            with self._cond:
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate() or self.crash is not None, timeout)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=60)
        assert not self.is_alive()


def _same(got: list[str], acked: list[str]) -> None:
    assert len(got) == len(set(got)), "duplicates delivered"
    assert set(got) == set(acked), (
        f"lost {sorted(set(acked) - set(got))[:10]}, "
        f"unexpected {sorted(set(got) - set(acked))[:10]}"
    )


def _serves_again_after_the_repair(srv: Server, disk: LoopFs, pinned: Sender, queue: str) -> None:
    """The operator repairs the disk; the partition comes back by itself (no restart): the
    pinned sender gets three more messages acknowledged, then stops by itself, and the
    entity is Available again. (A sender that went on at full speed until the test thread
    got to stop() it filled a repaired 84 MiB disk within a second on a loaded machine, see
    test_one_partition_disk_fills_up_then_takes_messages_again.)"""
    n = len(pinned.acked)
    pinned.stop_after = n + 3
    disk.repair()
    assert pinned.wait_for(lambda: len(pinned.acked) >= n + 3, 40), (pinned.errors, srv.stderr())
    assert _entity_status(srv, queue) == "Available"


def _each_once_then_none_after_a_restart(srv: Server, queue: str, acked: list[str]) -> None:
    """Every acknowledged message is received exactly once; after a clean restart none comes
    back; no traceback in the server log."""
    _same(drain_ids(srv.conn_str, queue), acked)
    assert srv.stop() == 0
    srv.start()
    assert drain_ids(srv.conn_str, queue) == []
    assert srv.tracebacks() == [], srv.tracebacks()


def _entity_status(srv: Server, name: str) -> str:
    """/health's status of an entity: Available, or Limited while a partition is out."""
    return next(e["status"] for e in srv.health()["entities"] if e["name"].lower() == name)


def test_one_partition_dir_turns_read_only_then_writable_again(tmp_path):
    """The disk under partition 3 of a 16-partition queue takes an error and the kernel turns
    it read-only while two senders run; then the operator repairs and remounts it."""
    srv = Server(tmp_path / "w", make_config([queue_def("roq", EnablePartitioning=True)]))
    disk = LoopFs(tmp_path, srv.data_dir / NAMESPACE.lower() / "roq" / f"partition-{FAULTY:02d}")
    _mount(disk)
    keys = _key_on(FAULTY)
    try:
        srv.start()
        probe = SdkProbe(srv.conn_str)
        probe.start()
        # keyless sends (round-robin) and sends pinned to the faulty partition, side by side
        keyless = Sender(srv.conn_str, "roq", "a")
        pinned = Sender(srv.conn_str, "roq", "p", partition_key=lambda i: keys[i % len(keys)])
        keyless.start()
        pinned.start()
        try:
            assert pinned.wait_for(lambda: len(pinned.acked) >= 5, 20), pinned.crash
            disk.fail()
            # the faulty partition answers server-busy; the other 15 keep taking sends
            assert pinned.wait_for(lambda: bool(pinned.errors), 20), (pinned.crash, pinned.acked)
            n = len(keyless.acked)
            assert keyless.wait_for(lambda: len(keyless.acked) >= n + 20, 20), keyless.errors
            rounds = probe.rounds
            assert probe.wait_rounds(rounds + 3, timeout=20), probe.errors
            stopping = threading.Thread(target=probe.stop)  # (its last receive wait overlaps)
            stopping.start()
            assert set(pinned.errors) == {"ServiceBusServerBusyError"}, pinned.errors
            assert set(keyless.errors) <= {"ServiceBusServerBusyError"}, keyless.errors
            assert srv.alive() and srv.tracebacks() == []
            assert disk.read_only() and _entity_status(srv, "roq") == "Limited"
            # the operator repairs the disk; the partition comes back by itself (no restart)
            _serves_again_after_the_repair(srv, disk, pinned, "roq")
        finally:
            keyless.stop()
            pinned.stop()
            probe.stop()
        assert keyless.crash is None and pinned.crash is None, (keyless.crash, pinned.crash)
        assert probe.errors == []
        acked = keyless.acked + pinned.acked
        _same(drain_ids(srv.conn_str, "roq"), acked)
        assert srv.tracebacks() == [], srv.tracebacks()
        # and a restart keeps what was acknowledged after the repair (nothing comes back)
        after = Sender(srv.conn_str, "roq", "r", partition_key=lambda i: keys[i % len(keys)])
        after.start()
        assert after.wait_for(lambda: len(after.acked) >= 5, 20)
        after.stop()
        assert srv.stop() == 0
        srv.start()
        _same(drain_ids(srv.conn_str, "roq"), after.acked)
        assert srv.tracebacks() == [], srv.tracebacks()
    finally:
        srv.stop()
        disk.cleanup()


def _admin(srv: Server, ca: Path) -> Any:
    from azure.servicebus.management import ServiceBusAdministrationClient

    conn = srv.conn_str.replace(f"localhost:{srv.port}", f"localhost:{srv.admin_port}")
    return ServiceBusAdministrationClient.from_connection_string(
        conn, connection_verify=str(ca), retry_total=0
    )


def _post(srv: Server, path: str) -> int:
    """POST on the admin port over plain HTTP (loopback) with a Manage SAS token, as a real
    client sends it; returns the status code."""
    import http.client

    from sbemu.auth.sas import make_sas_token

    token = make_sas_token(
        f"sb://localhost:{srv.admin_port}/", KEY_NAME, KEY, int(time.time()) + 3600
    )
    conn = http.client.HTTPConnection("127.0.0.1", srv.admin_port, timeout=10)
    try:
        conn.request("POST", path, headers={"Authorization": token})
        return conn.getresponse().status
    finally:
        conn.close()


def test_whole_data_dir_turns_read_only_then_writable_again(tmp_path):
    """Everything under the data dir is on the disk that fails: every partition store, the
    catalog and entity directories the admin API creates, idle.json and the log file."""
    from azure.core.exceptions import HttpResponseError

    config = make_config(
        [queue_def("dq", AutoDeleteOnIdle="PT1H")],
        topics=[
            {"Name": "dt", "Properties": {}, "Subscriptions": [{"Name": "s1", "Properties": {}}]}
        ],
    )
    config["UserConfig"]["Logging"]["Type"] = "File,Console"
    srv = Server(tmp_path / "w", config, log_level="info")
    disk = LoopFs(tmp_path, srv.data_dir)
    _mount(disk)
    log_file = srv.data_dir / "logs" / "sbemu.log"
    try:
        srv.start()
        ca = tmp_path / "ca.pem"  # off the faulty disk: the client reads it during the fault
        ca.write_bytes((srv.data_dir / "tls" / "rootCA.pem").read_bytes())
        sender = Sender(srv.conn_str, "dq", "d")
        sender.start()
        try:
            assert sender.wait_for(lambda: len(sender.acked) >= 5, 20), sender.crash
            with _admin(srv, ca) as admin:
                admin.create_queue("madebefore")
            disk.fail()
            assert sender.wait_for(lambda: bool(sender.errors), 20), sender.crash
            assert set(sender.errors) == {"ServiceBusServerBusyError"}, sender.errors
            # the admin API cannot create an entity on a read-only disk: a clear 503, no 500
            with _admin(srv, ca) as admin, pytest.raises(HttpResponseError) as refused:
                admin.create_queue("madeduring")
            assert refused.value.status_code == 503, refused.value
            with _admin(srv, ca) as admin, pytest.raises(HttpResponseError) as refused:
                admin.create_subscription("dt", "sdur")
            assert refused.value.status_code == 503, refused.value
            with _admin(srv, ca) as admin, pytest.raises(HttpResponseError) as refused:
                admin.delete_queue("madebefore")
            assert refused.value.status_code == 503, refused.value
            assert _post(srv, f"/entities/{NAMESPACE}/dq/status/Disabled") == 503
            assert srv.health()["status"] in ("healthy", "degraded", "unhealthy")
            assert srv.alive() and srv.tracebacks() == [], srv.tracebacks()
            disk.repair()
            n = len(sender.acked)
            assert sender.wait_for(lambda: len(sender.acked) >= n + 3, 40), (
                sender.errors,
                srv.stderr(),
            )
            with _admin(srv, ca) as admin:
                admin.create_queue("madeafter")
                names = {q.name for q in admin.list_queues()}
                admin.create_subscription("dt", "safter")
                subs = {x.name for x in admin.list_subscriptions("dt")}
            assert {"madebefore", "madeafter"} <= names and "madeduring" not in names, names
            assert subs == {"s1", "safter"}, subs
            # a topic send reaches the subscriptions there are, nothing else
            with (
                ServiceBusClient.from_connection_string(srv.conn_str) as client,
                client.get_topic_sender("dt") as topic_sender,
            ):
                topic_sender.send_messages(ServiceBusMessage(b"t", message_id="t1"))
            for sub in ("s1", "safter"):
                with (
                    ServiceBusClient.from_connection_string(srv.conn_str) as client,
                    client.get_subscription_receiver("dt", sub, max_wait_time=5) as rcv,
                ):
                    got = rcv.receive_messages(max_message_count=5, max_wait_time=5)
                    assert [str(m.message_id) for m in got] == ["t1"], sub
                    for m in got:
                        rcv.complete_message(m)
        finally:
            sender.stop()
        assert sender.crash is None, sender.crash
        _same(drain_ids(srv.conn_str, "dq"), sender.acked)
        assert srv.tracebacks() == [], srv.tracebacks()
        assert srv.stop() == 0
        # the log file is written again after the repair (reopened on the new mount), and
        # the failure was reported once on stderr, not as a traceback per record
        text = log_file.read_text(errors="replace")
        assert "could not be written for a while" in text and "INFO sbemu: stopped" in text, text
        assert srv.stderr(100_000).count("cannot write the log file") == 1, srv.stderr()
        srv.start()
        with _admin(srv, ca) as admin:
            names = {q.name for q in admin.list_queues()}
            subs = {x.name for x in admin.list_subscriptions("dt")}
        assert {"madebefore", "madeafter"} <= names and "madeduring" not in names, names
        assert subs == {"s1", "safter"}, subs
        assert drain_ids(srv.conn_str, "dq") == []
        assert srv.tracebacks() == [], srv.tracebacks()
    finally:
        srv.stop()
        disk.cleanup()


STALL_S = 3.0  # how long the disk stalls every write
# A loop held up by the stall stands still for all of it (3 s, seen before the fix); a loop
# that is only slowed by the shared 2-core machine answers far sooner. Measured: /health
# median 1.7 ms, max 0.13 s; SDK round trips 0.21 s, as before the stall.
HELD_UP_S = STALL_S / 2


class HealthProbe(threading.Thread):
    """GET /health every 20 ms (the admin port is served by the same event loop as AMQP):
    each answer's time shows whether the loop was held up."""

    def __init__(self, srv: Server) -> None:
        super().__init__(daemon=True, name="health-probe")
        self.srv = srv
        self.times: list[tuple[float, float]] = []  # (when it started, how long it took)
        self.errors: list[str] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.02):
            t0 = time.monotonic()
            try:
                self.srv.health()
            except Exception as exc:  # reported by the test
                self.errors.append(repr(exc))
                return
            self.times.append((t0, time.monotonic() - t0))

    def between(self, start: float, end: float) -> list[float]:
        return [took for at, took in self.times if start <= at <= end]

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


def test_a_stalled_disk_delays_only_its_own_entity_and_loses_nothing(tmp_path):
    """Every write to the disk under one queue stalls for STALL_S (fsfreeze): its sends wait
    for their commit and are acknowledged once the disk moves again, while a client of a
    queue on another disk keeps its round trips fast (commits run on worker threads, so the
    event loop never waits for the stalled fsync)."""
    srv = Server(tmp_path / "w", make_config([queue_def("slowq")]))
    disk = LoopFs(tmp_path, srv.data_dir / NAMESPACE.lower() / "slowq")
    _mount(disk)
    try:
        srv.start()
        probe = SdkProbe(srv.conn_str, pause=0.01)
        probe.start()
        health = HealthProbe(srv)
        health.start()
        sender = Sender(srv.conn_str, "slowq", "s", pause=0.0)
        sender.start()
        try:
            assert sender.wait_for(lambda: len(sender.acked) >= 10, 20), sender.crash
            assert probe.wait_rounds(3, timeout=30), probe.errors
            disk.freeze()
            frozen_at = time.monotonic()
            before_rounds, before_acked = probe.rounds, len(sender.acked)
            # the stalled queue's sender waits (its send is not acknowledged before the
            # commit), the probe on the healthy disk goes on
            assert not sender.wait_for(lambda: len(sender.acked) > before_acked + 1, STALL_S)
            stalled = probe.latencies[before_rounds : probe.rounds]
            disk.thaw()
            thawed_at = time.monotonic()
            stalled_for = thawed_at - frozen_at
            n = len(sender.acked)
            assert sender.wait_for(lambda: len(sender.acked) >= n + 10, 20), sender.crash
        finally:
            if disk.frozen:
                disk.thaw()
            sender.stop()
            probe.stop()
            health.stop()
        assert probe.errors == [] and sender.crash is None, (probe.errors, sender.crash)
        assert health.errors == [], health.errors
        # the event loop answered /health all along: never held up by the stalled commit
        loop_times = health.between(frozen_at, thawed_at)
        assert len(loop_times) >= 20, len(loop_times)
        assert max(loop_times) < HELD_UP_S, sorted(loop_times)[-5:]
        assert sender.errors == {}, sender.errors  # a stall is a delay, not an error
        # the probe kept going while the disk stood still, with sub-second round trips
        assert len(stalled) >= 3, (len(stalled), stalled_for)
        assert max(stalled) < HELD_UP_S, sorted(stalled)[-5:]
        _each_once_then_none_after_a_restart(srv, "slowq", sender.acked)
    finally:
        srv.stop()
        disk.cleanup()


def test_one_partition_disk_fails_writes_with_eio_then_gets_room(tmp_path):
    """The disk under partition 3 is a thin-provisioned volume that runs out of backing
    store while large messages are pinned to it: fsync fails with EIO (then ext4 goes
    read-only). Room is added and the disk repaired; the partition serves again by itself."""
    srv = Server(tmp_path / "w", make_config([queue_def("eioq", EnablePartitioning=True)]))
    disk = LoopFs(
        tmp_path,
        srv.data_dir / NAMESPACE.lower() / "eioq" / f"partition-{FAULTY:02d}",
        backing_mb=16,
    )
    _mount(disk)
    keys = _key_on(FAULTY)
    try:
        srv.start()
        keyless = Sender(srv.conn_str, "eioq", "a", pause=0.05)
        pinned = Sender(
            srv.conn_str,
            "eioq",
            "p",
            partition_key=lambda i: keys[i % len(keys)],
            pause=0.0,
            body_bytes=200_000,
        )
        keyless.start()
        pinned.start()
        try:
            # about 16 MiB of 200 KB messages fill the backing store: then EIO
            assert pinned.wait_for(lambda: bool(pinned.errors), 60), (
                pinned.crash,
                len(pinned.acked),
            )
            assert disk.read_only()
            n = len(keyless.acked)
            assert keyless.wait_for(lambda: len(keyless.acked) >= n + 10, 20), keyless.errors
            assert set(pinned.errors) == {"ServiceBusServerBusyError"}, pinned.errors
            assert set(keyless.errors) <= {"ServiceBusServerBusyError"}, keyless.errors
            assert srv.alive() and srv.tracebacks() == []
            assert _entity_status(srv, "eioq") == "Limited"
            disk.grow_backing(256)
            _serves_again_after_the_repair(srv, disk, pinned, "eioq")
        finally:
            keyless.stop()
            pinned.stop()
        assert keyless.crash is None and pinned.crash is None, (keyless.crash, pinned.crash)
        assert "Input/output error" in srv.stderr(100_000), srv.stderr()
        _each_once_then_none_after_a_restart(srv, "eioq", keyless.acked + pinned.acked)
    finally:
        srv.stop()
        disk.cleanup()


def test_one_partition_disk_fills_up_then_takes_messages_again(tmp_path):
    """The disk under partition 3 is a small filesystem that 200 KB messages pinned to it
    fill up. The store keeps DISK_RESERVE of it free: short of that, the partition refuses new
    messages with server-busy (the other 15 keep accepting) and no commit fails. The queue
    can then be drained (its deletes commit in the reserve), and the partition takes messages
    again by itself. Regression (issue 15, the EIO test hanging in loaded runs): the disk
    filled up completely, LMDB could not commit even the deletes that would make room (a short
    write, which it reports as an I/O error), so the partition failed every commit for good
    and a receive-and-delete drain got the same messages again every second."""
    import shutil

    from sbemu.partitions.diskroom import DISK_RESERVE

    srv = Server(tmp_path / "w", make_config([queue_def("fullq", EnablePartitioning=True)]))
    where = srv.data_dir / NAMESPACE.lower() / "fullq" / f"partition-{FAULTY:02d}"
    disk = LoopFs(tmp_path, where, size_mb=48)  # about 40 MiB free: some 100 messages fit
    _mount(disk)
    keys = _key_on(FAULTY)
    pinned_on = lambda i: keys[i % len(keys)]  # noqa: E731
    try:
        srv.start()
        keyless = Sender(srv.conn_str, "fullq", "a", pause=0.05)
        pinned = Sender(
            srv.conn_str, "fullq", "p", partition_key=pinned_on, pause=0.0, body_bytes=200_000
        )
        pinned.stop_after = 1_000  # a bound: 200 MB would not fit
        keyless.start()
        pinned.start()
        try:
            assert pinned.wait_for(lambda: bool(pinned.errors), 120), (
                pinned.crash,
                len(pinned.acked),
            )
            pinned.stop()
            assert set(pinned.errors) == {"ServiceBusServerBusyError"}, pinned.errors
            assert len(pinned.acked) >= 50, len(pinned.acked)  # (the disk took its share)
            # the reserve is still free: what must commit can
            usage = shutil.disk_usage(where)
            assert usage.free > min(DISK_RESERVE, usage.total // 4) // 2, usage
            n = len(keyless.acked)
            assert keyless.wait_for(lambda: len(keyless.acked) >= n + 10, 20), keyless.errors
        finally:
            keyless.stop()
            pinned.stop()
        assert keyless.crash is None and pinned.crash is None, (keyless.crash, pinned.crash)
        assert set(keyless.errors) <= {"ServiceBusServerBusyError"}, keyless.errors
        # every acknowledged message is there once, and receiving them makes room again
        _same(drain_ids(srv.conn_str, "fullq"), keyless.acked + pinned.acked)
        after = Sender(
            srv.conn_str, "fullq", "r", partition_key=pinned_on, pause=0.0, body_bytes=200_000
        )
        after.stop_after = 20
        after.start()
        assert after.wait_for(lambda: len(after.acked) >= 20, 30), (after.errors, after.crash)
        after.stop()
        stderr = srv.stderr(1_000_000)
        assert "commit failed" not in stderr and srv.tracebacks() == [], stderr[-3000:]
        assert srv.stop() == 0
        srv.start()  # nothing drained comes back; what was sent after is all there
        _same(drain_ids(srv.conn_str, "fullq"), after.acked)
        assert srv.tracebacks() == [], srv.tracebacks()
    finally:
        srv.stop()
        disk.cleanup()


def test_a_receiver_on_a_stalled_disk_does_not_hold_up_the_event_loop(tmp_path):
    """A receiver reading from the queue whose disk stalls: its deliveries may wait, the
    event loop (and so every other client) must not. Regression: LMDB's reader table was a
    shared mapping of lock.mdb on that disk, and a read transaction's write to its slot
    waited in ext4_page_mkwrite until the thaw (the loop stood still 3 s); it now lives on
    tmpfs (partitions/lockfile.py)."""
    srv = Server(tmp_path / "w", make_config([queue_def("slowq")]))
    disk = LoopFs(tmp_path, srv.data_dir / NAMESPACE.lower() / "slowq")
    _mount(disk)
    try:
        srv.start()
        with (
            ServiceBusClient.from_connection_string(srv.conn_str) as client,
            client.get_queue_sender("slowq") as sender,
        ):
            sender.send_messages([ServiceBusMessage(b"x", message_id=f"m{i}") for i in range(50)])
        health = HealthProbe(srv)
        health.start()
        received: list[str] = []
        try:
            disk.freeze()
            frozen_at = time.monotonic()
            with (
                ServiceBusClient.from_connection_string(srv.conn_str) as client,
                client.get_queue_receiver("slowq", max_wait_time=1) as receiver,
            ):
                while time.monotonic() < frozen_at + STALL_S:
                    received += [
                        str(m.message_id) for m in receiver.receive_messages(10, max_wait_time=0.5)
                    ]
                disk.thaw()
                thawed_at = time.monotonic()
        finally:
            if disk.frozen:
                disk.thaw()
            health.stop()
        loop_times = health.between(frozen_at, thawed_at)
        assert health.errors == [] and loop_times, health.errors
        # peek-lock deliveries need no commit: all 50 arrived while the disk stood still
        assert sorted(set(received)) == sorted(f"m{i}" for i in range(50)), len(received)
        assert max(loop_times) < HELD_UP_S, sorted(loop_times)[-5:]
        assert srv.tracebacks() == [], srv.tracebacks()
    finally:
        srv.stop()
        disk.cleanup()
