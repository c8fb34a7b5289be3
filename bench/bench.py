#!/usr/bin/env python
"""sbemu throughput benchmark: ``make bench`` (``.venv/bin/python bench/bench.py [options]``).

Starts its own server (``python -m sbemu serve`` on ephemeral ports, temporary data directory)
with a plain queue ``bench`` and a partitioned queue ``benchp`` (16 partitions), then for each
queue:

* proton: an event-driven python-qpid-proton client (``Container`` + ``MessagingHandler``, SASL
  PLAIN) sends ``--count`` durable messages of ``--size`` bytes keeping the link's credit window
  full; send msg/s counts only deliveries the broker *accepted*. Then a receiver with prefetch
  1000 and auto-accept (peek-lock + complete) takes them all back.
* sdk: the azure-servicebus sync SDK sends the same number in ``create_message_batch`` batches,
  then receives with ``receive_messages(max_message_count=500)`` (prefetch 500) and completes
  each message.

Every phase checks that each message sent was received exactly once (by an index carried in
the message) and that the queue is empty afterwards; the script exits 1 if any message is lost
(or a phase fails), 0 otherwise. Options: ``--count``, ``--size``, ``--only proton|sdk|latency``.

* latency: send-to-receive latency (p50, p99, max) at a fixed offered rate
  (``--latency-rate`` msg/s, default 1000, for ``--latency-seconds``, default 10) on each queue,
  driven by the rhea client in ``bench/node`` (``make bench`` installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbemu.testing import SbemuProcess, StartError

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
QUEUES = ("bench", "benchp")
START_TIMEOUT = 30.0
IDLE_TIMEOUT = 30.0  # seconds without progress before a phase is declared stuck
PROGRESS_FROM, PROGRESS_EVERY = 1_000_000, 60.0  # phases this long print progress each minute


# ------------------------------------------------------------------------------- server


def _queue(name: str, partitioned: bool) -> dict[str, Any]:
    props: dict[str, Any] = {
        "LockDuration": "PT1M",
        "MaxDeliveryCount": 10,
        "RequiresSession": False,
        "RequiresDuplicateDetection": False,
        "DeadLetteringOnMessageExpiration": False,
        "DefaultMessageTimeToLive": "PT1H",
        "DuplicateDetectionHistoryTimeWindow": "PT20S",
        "ForwardTo": "",
        "ForwardDeadLetteredMessagesTo": "",
        "MaxSizeInMegabytes": 1024,
    }
    if partitioned:
        props["EnablePartitioning"] = True
    return {"Name": name, "Properties": props}


# The topic of issue 4's bench: 5 subscriptions, mixed SQL and correlation filters. Each
# message i carries band = "abcd"[i % 4], color = red when i % 5 == 0, subject = blue when
# i % 3 == 0, so every subscription's expected count is known exactly.
TOPIC = "bencht"
SUBSCRIPTIONS: dict[str, tuple[dict[str, Any] | None, Any]] = {
    "all": (None, lambda i: True),
    "sql-even": (
        {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "i % 2 = 0"}},
        lambda i: i % 2 == 0,
    ),
    "sql-band": (
        {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "band IN ('a', 'b') AND i >= 0"}},
        lambda i: i % 4 in (0, 1),
    ),
    "corr-label": (
        {"FilterType": "Correlation", "CorrelationFilter": {"Label": "blue"}},
        lambda i: i % 3 == 0,
    ),
    "corr-prop": (
        {"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"color": "red"}}},
        lambda i: i % 5 == 0,
    ),
}


def _topic() -> dict[str, Any]:
    subs = []
    for name, (rule, _expect) in SUBSCRIPTIONS.items():
        sub: dict[str, Any] = {"Name": name, "Properties": {"LockDuration": "PT1M"}}
        if rule is not None:
            sub["Rules"] = [{"Name": "r", "Properties": rule}]
        subs.append(sub)
    return {"Name": TOPIC, "Properties": {}, "Subscriptions": subs}


def _config() -> dict[str, Any]:
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "Queues": [_queue("bench", False), _queue("benchp", True)],
                    "Topics": [_topic()],
                }
            ],
            "Logging": {"Type": "File"},
        }
    }


class Server(SbemuProcess):
    """``python -m sbemu serve`` (sbemu.testing) with the bench's configuration."""

    def __init__(self, workdir: Path, config: dict[str, Any] | None = None) -> None:
        self.workdir = workdir
        self.config_path = workdir / "config.json"
        self.config_path.write_text(json.dumps(config or _config(), indent=2))
        super().__init__(
            config=self.config_path, data_dir=workdir / "data", stderr=workdir / "server.stderr"
        )
        self.started_in = 0.0  # seconds from spawning the process to its ready document
        self.port = 0
        self.conn_str = ""

    def start(self) -> None:  # type: ignore[override]
        t0 = time.perf_counter()
        try:
            ready = super().start()
        except StartError as exc:
            raise SystemExit(f"bench: {exc}") from None
        self.started_in = time.perf_counter() - t0
        self.port, self.conn_str = ready.amqp_port, ready.connection_string

    def stop(self) -> int | None:  # type: ignore[override]
        try:
            return super().stop()
        except StartError:
            return self.kill()

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """The server's CPU time so far (user + system, all its threads), in seconds."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        """The server's resident memory (VmRSS), in MiB."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


# ------------------------------------------------------------------------------- backlog


def _backlog_config(count: int, size: int) -> dict[str, Any]:
    """Both queues sized for `count` messages (MaxSizeInMegabytes is per partition [P5])."""
    need_mb = count * (size + 1536) // (1024 * 1024)  # message + record + log + B-tree slack
    mb = next((m for m in (1024, 2048, 3072, 4096, 5120) if m >= need_mb), 5120)
    config = _config()
    queues = [_queue("bench", False), _queue("benchp", True)]
    for q in queues:
        q["Properties"]["MaxSizeInMegabytes"] = mb
        q["Properties"]["DefaultMessageTimeToLive"] = "P1D"  # every message has a timer
    config["UserConfig"]["Namespaces"][0]["Queues"] = queues
    return config


def _du_mb(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:  # lstat: a store's lock.mdb is a link to a reader table on tmpfs
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:  # removed while we walk (a store closing)
                continue
    return total / (1024 * 1024)


def _backlog(count: int, size: int, queues: list[str], keep: bool) -> int:
    """Fill `count` durable messages, restart, drain from the cold backlog (exactly once)."""
    failed = 0
    rows = []
    for q in queues:
        workdir = Path(tempfile.mkdtemp(prefix="sbemu-backlog-"))
        server = Server(workdir, _backlog_config(count, size))
        try:
            server.start()
            print(f"  {q}: filling {count} x {size} B (proton, durable) ...", flush=True)
            fill = _proton_phase(server.url, q, count, size, f"b-{q}", part="send")
            serving = server.rss_mb()
            rc = server.stop()
            disk = _du_mb(workdir / "data")
            print(f"  {q}: filled at {fill.send_rate:.0f} msg/s, RSS {serving:.0f} MiB, "
                  f"{disk:.0f} MiB on disk; restarting ...", flush=True)  # fmt: skip
            if rc not in (0, None):
                fill.errors.append(f"server exited with {rc} on SIGTERM")
            server.start()
            restarted, rss_restart = server.started_in, server.rss_mb()
            print(f"  {q}: listening {restarted:.2f} s after spawn, RSS {rss_restart:.0f} MiB; "
                  "draining ...", flush=True)  # fmt: skip
            # Expect what was acknowledged (a full store refuses sends with a clear error).
            drain = _proton_phase(
                server.url, q, fill.sent_ok or count, size, f"b-{q}", part="receive"
            )
            rss_drained = server.rss_mb()
            print(f"  {q}: drained {drain.received} at {drain.receive_rate:.0f} msg/s "
                  f"({drain.duplicates} dup, {drain.leftover} left), RSS {rss_drained:.0f} MiB",
                  flush=True)  # fmt: skip
        finally:
            server.stop()
            if not keep:
                shutil.rmtree(workdir, ignore_errors=True)
        ok = fill.sent_ok == count and drain.received == count and not drain.duplicates
        ok = ok and not drain.leftover and not fill.errors and not drain.errors
        failed += not ok
        rows.append(
            f"{q:<8} {count:>9} {fill.send_rate:>9.0f} {serving:>10.0f} {disk:>9.0f} "
            f"{restarted:>9.2f} {rss_restart:>12.0f} {drain.receive_rate:>9.0f} "
            f"{rss_drained:>10.0f} {count - drain.received:>5} {drain.duplicates:>4} "
            f"{drain.leftover:>5}  {'ok' if ok else 'FAILED ' + '; '.join(fill.errors + drain.errors)}"
        )
    print()
    print(
        "queue        count  fill/s  RSS serve  disk MiB  listen s  RSS restart  drain/s"
        "  RSS after  lost  dup  left  status"
    )
    print("-" * 118)
    print("\n".join(rows))
    return 1 if failed else 0


# ------------------------------------------------------------------------------- results


@dataclass
class Result:
    client: str
    queue: str
    count: int
    size: int
    send_rate: float = 0.0
    receive_rate: float = 0.0
    sent_ok: int = 0  # acknowledged (accepted) sends
    received: int = 0  # distinct messages received
    duplicates: int = 0
    leftover: int = 0  # still in the queue after the receive phase
    errors: list[str] = field(default_factory=list)
    latency: tuple[float, float, float] | None = None  # latency phase: p50, p99, max (ms)

    @property
    def lost(self) -> int:
        return self.count - self.received

    @property
    def ok(self) -> bool:
        return not self.errors and self.sent_ok == self.count and self.lost == 0


# ------------------------------------------------------------------------------- proton client


class _Seen:
    """The distinct message indexes received: a bitmap (a set of 10M ints would cost the
    bench process ~700 MB, more than the server it measures)."""

    def __init__(self) -> None:
        self._bits = bytearray()
        self._count = 0

    def add(self, index: int) -> bool:
        """Record `index`; False if it was already there (a duplicate)."""
        byte, bit = divmod(index, 8)
        if byte >= len(self._bits):
            self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
        if self._bits[byte] >> bit & 1:
            return False
        self._bits[byte] |= 1 << bit
        self._count += 1
        return True

    def __len__(self) -> int:
        return self._count


def _proton_phase(
    url: str, address: str, count: int, size: int, prefix: str, part: str = "both"
) -> Result:
    """Send then receive `count` messages; `part` "send" or "receive" runs one half only."""
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    result = Result("proton", address, count, size)
    payload = os.urandom(size)

    class Watchdog:
        """Stops the container when a phase makes no progress for IDLE_TIMEOUT seconds."""

        def __init__(self, handler: Any) -> None:
            self.handler = handler
            self.last = -1
            self.since = self.shown = time.monotonic()

        def on_timer_task(self, event: Any) -> None:
            progress = self.handler.progress()
            if count >= PROGRESS_FROM and time.monotonic() - self.shown >= PROGRESS_EVERY:
                self.shown = time.monotonic()  # a long backlog run says how far it is
                print(
                    f"    {address}: {progress}/{count} at {time.strftime('%H:%M:%S')}", flush=True
                )
            if progress != self.last:
                self.last, self.since = progress, time.monotonic()
            elif time.monotonic() - self.since > IDLE_TIMEOUT:
                self.handler.fail(f"no progress for {IDLE_TIMEOUT:.0f}s at {progress}/{count}")
                return
            if not self.handler.done:
                event.container.schedule(1.0, self)

    class Base(MessagingHandler):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.conn: Any = None
            self.done = False

        def connect(self, container: Any) -> Any:
            self.conn = container.connect(
                url, user=KEY_NAME, password=KEY, sasl_enabled=True, allowed_mechs="PLAIN"
            )
            container.schedule(1.0, Watchdog(self))
            return self.conn

        def finish(self) -> None:
            self.done = True
            if self.conn is not None:
                self.conn.close()

        def fail(self, why: str) -> None:
            result.errors.append(why)
            self.finish()

        def on_transport_error(self, event: Any) -> None:
            cond = event.transport.condition
            if not self.done:
                result.errors.append(f"transport error: {cond}")
            self.done = True

        def on_connection_error(self, event: Any) -> None:
            self.fail(f"connection error: {event.connection.remote_condition}")

        def on_link_error(self, event: Any) -> None:
            self.fail(f"link error: {event.link.remote_condition}")

    class Sender(Base):
        def __init__(self) -> None:
            super().__init__(auto_settle=True)
            self.sent = self.accepted = self.refused = 0
            self.t0 = self.t1 = 0.0

        def progress(self) -> int:
            return self.accepted + self.refused

        def on_start(self, event: Any) -> None:
            event.container.create_sender(self.connect(event.container), address)

        def on_link_opened(self, event: Any) -> None:
            if not self.t0:
                self.t0 = time.perf_counter()

        def on_sendable(self, event: Any) -> None:
            sender = event.sender
            while sender.credit and self.sent < count:
                msg = Message(
                    id=f"{prefix}-{self.sent}",
                    body=payload,
                    durable=True,
                    properties={"i": self.sent},
                )
                msg.inferred = True  # body as a data section, as the SDKs send bytes
                sender.send(msg)
                self.sent += 1

        def _settled(self) -> None:
            if self.accepted + self.refused == count:
                self.t1 = time.perf_counter()
                self.finish()

        def on_accepted(self, event: Any) -> None:
            self.accepted += 1
            self._settled()

        def on_rejected(self, event: Any) -> None:
            self.refused += 1
            if self.refused <= 3:
                result.errors.append(f"send rejected: {event.delivery.remote.condition}")
            self._settled()

        def on_released(self, event: Any) -> None:
            self.refused += 1
            if self.refused <= 3:
                result.errors.append("send released")
            self._settled()

    class Receiver(Base):
        def __init__(self, expected: int, idle_stop: float | None = None) -> None:
            super().__init__(prefetch=1000, auto_accept=True)
            self.expected = expected
            self.idle_stop = idle_stop
            self.seen = _Seen()
            self.messages = 0
            self.t0 = self.t1 = 0.0
            self.last_message = time.monotonic()

        def progress(self) -> int:
            return self.messages

        def on_start(self, event: Any) -> None:
            event.container.create_receiver(self.connect(event.container), address)
            if self.idle_stop is not None:
                event.container.schedule(self.idle_stop, self)

        def on_timer_task(self, event: Any) -> None:  # only for the leftover check
            if self.done:
                return
            if time.monotonic() - self.last_message >= self.idle_stop:
                self.finish()
            else:
                event.container.schedule(0.5, self)

        def on_link_opened(self, event: Any) -> None:
            if not self.t0:
                self.t0 = time.perf_counter()

        def on_message(self, event: Any) -> None:
            self.messages += 1
            self.last_message = time.monotonic()
            props = event.message.properties or {}
            index = props.get("i")
            if index is None or not self.seen.add(int(index)):
                result.duplicates += index is not None
            if self.expected and len(self.seen) >= self.expected:
                self.t1 = time.perf_counter()
                # Let auto-accept run for this delivery before closing.
                event.container.schedule(0, _Closer(self))

    class _Closer:
        def __init__(self, handler: Any) -> None:
            self.handler = handler

        def on_timer_task(self, event: Any) -> None:
            self.handler.finish()

    if part != "receive":
        sender = Sender()
        Container(sender).run()
        result.sent_ok = sender.accepted
        if sender.t1 > sender.t0:
            result.send_rate = sender.accepted / (sender.t1 - sender.t0)
        if result.errors or part == "send":
            return result

    receiver = Receiver(count)
    Container(receiver).run()
    result.received = len(receiver.seen)
    if receiver.t1 > receiver.t0:
        result.receive_rate = len(receiver.seen) / (receiver.t1 - receiver.t0)

    # Anything left in the queue (e.g. accepts that did not take effect)?
    check = Receiver(0, idle_stop=2.0)
    Container(check).run()
    result.leftover = check.messages
    return result


# ------------------------------------------------------------------------------- latency


NODE_CLIENT = Path(__file__).resolve().parent / "node" / "rhea-bench.js"


def _latency_phase(port: int, address: str, rate: int, seconds: float, size: int) -> Result:
    """Send-to-receive latency at a fixed offered rate, measured with the rhea client
    (``bench/node/rhea-bench.js latency``): one connection offers ``rate`` durable messages a
    second on a fixed schedule while a receiver on a second connection (credit 1000,
    auto-accept) takes them; latency = receive time minus *scheduled* send time. rhea, not
    python-qpid-proton, drives this phase: a Python client cannot keep a 1 ms schedule on a
    loaded 2-core machine and would measure itself."""
    count = max(1, round(rate * seconds))
    result = Result("latency", address, count, size)
    if shutil.which("node") is None or not (NODE_CLIENT.parent / "node_modules" / "rhea").exists():
        result.errors.append("needs Node.js and rhea (make bench installs them into bench/node)")
        return result
    cmd = [
        "node", str(NODE_CLIENT), "latency", str(port), address, str(rate), str(seconds),
        str(size), KEY_NAME, KEY,
    ]  # fmt: skip
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=seconds + 120, check=False
        )
        data = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, IndexError, json.JSONDecodeError) as exc:
        result.errors.append(f"latency client failed: {exc}")
        return result
    if data.get("error"):
        result.errors.append(str(data["error"]))
        return result
    result.sent_ok = int(data.get("accepted", 0))
    result.received = int(data.get("ok", 0))
    result.send_rate = result.receive_rate = float(rate)
    result.latency = (float(data["p50_ms"]), float(data["p99_ms"]), float(data["max_ms"]))
    return result


# ------------------------------------------------------------------------------- SDK client


def _sdk_phase(conn_str: str, address: str, count: int, size: int, prefix: str) -> Result:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
    from azure.servicebus.exceptions import MessageSizeExceededError

    result = Result("sdk", address, count, size)
    payload = os.urandom(size)
    try:
        with ServiceBusClient.from_connection_string(conn_str) as client:
            with client.get_queue_sender(address) as sender:
                sender.create_message_batch()  # opens the link before the clock starts
                t0 = time.perf_counter()
                batch = sender.create_message_batch()
                for i in range(count):
                    msg = ServiceBusMessage(
                        payload, message_id=f"{prefix}-{i}", application_properties={"i": i}
                    )
                    try:
                        batch.add_message(msg)
                    except MessageSizeExceededError:
                        sender.send_messages(batch)
                        result.sent_ok += len(batch)
                        batch = sender.create_message_batch()
                        batch.add_message(msg)
                if len(batch):
                    sender.send_messages(batch)
                    result.sent_ok += len(batch)
                result.send_rate = result.sent_ok / (time.perf_counter() - t0)

            seen: set[int] = set()
            with client.get_queue_receiver(
                address, prefetch_count=500, max_wait_time=5
            ) as receiver:
                receiver.peek_messages(max_message_count=1)  # link + management open first
                t0 = time.perf_counter()
                empty = 0
                while len(seen) < count and empty < int(IDLE_TIMEOUT / 5):
                    got = receiver.receive_messages(max_message_count=500, max_wait_time=5)
                    empty = 0 if got else empty + 1
                    for m in got:
                        receiver.complete_message(m)
                        index = (m.application_properties or {}).get(b"i")
                        if index is None or index in seen:
                            result.duplicates += index is not None
                        else:
                            seen.add(int(index))
                elapsed = time.perf_counter() - t0
            result.received = len(seen)
            result.receive_rate = len(seen) / elapsed if elapsed > 0 else 0.0
            if len(seen) < count:
                result.errors.append(f"receive stalled at {len(seen)}/{count}")

            with client.get_queue_receiver(
                address, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, max_wait_time=2
            ) as receiver:
                while True:
                    got = receiver.receive_messages(max_message_count=500, max_wait_time=2)
                    if not got:
                        break
                    result.leftover += len(got)
    except Exception as exc:  # report, do not hide: the phase fails
        result.errors.append(f"{type(exc).__name__}: {exc}")
    return result


def _topic_phase(conn_str: str, count: int, size: int) -> list[Result]:
    """SDK batches into the 5-subscription topic; each subscription drained (receive-and-delete)."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
    from azure.servicebus.exceptions import MessageSizeExceededError

    payload = os.urandom(size)
    send = Result("sdk", TOPIC, count, size)
    results = [send]
    try:
        with ServiceBusClient.from_connection_string(conn_str) as client:
            with client.get_topic_sender(TOPIC) as sender:
                sender.create_message_batch()
                t0 = time.perf_counter()
                batch = sender.create_message_batch()
                for i in range(count):
                    msg = ServiceBusMessage(
                        payload,
                        subject="blue" if i % 3 == 0 else "grey",
                        application_properties={
                            "i": i,
                            "band": "abcd"[i % 4],
                            "color": "red" if i % 5 == 0 else "green",
                        },
                    )
                    try:
                        batch.add_message(msg)
                    except MessageSizeExceededError:
                        sender.send_messages(batch)
                        send.sent_ok += len(batch)
                        batch = sender.create_message_batch()
                        batch.add_message(msg)
                if len(batch):
                    sender.send_messages(batch)
                    send.sent_ok += len(batch)
                send.send_rate = send.sent_ok / (time.perf_counter() - t0)
                send.received = count  # receive counts are per subscription below
            for name, (_rule, expect) in SUBSCRIPTIONS.items():
                wanted = {i for i in range(count) if expect(i)}
                r = Result("sdk", f"{TOPIC}/{name}", len(wanted), size, sent_ok=len(wanted))
                results.append(r)
                seen: set[int] = set()
                with client.get_subscription_receiver(
                    TOPIC,
                    name,
                    receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                    prefetch_count=1000,
                    max_wait_time=3,
                ) as receiver:
                    t0 = time.perf_counter()
                    last = t0
                    while True:
                        got = receiver.receive_messages(max_message_count=1000, max_wait_time=3)
                        if not got:
                            break
                        last = time.perf_counter()
                        for m in got:
                            index = int((m.application_properties or {}).get(b"i", -1))
                            if index in seen or index not in wanted:
                                r.duplicates += 1
                            seen.add(index)
                r.received = len(seen & wanted)
                r.receive_rate = r.received / (last - t0) if last > t0 else 0.0
                if r.received != len(wanted):
                    r.errors.append(f"got {r.received} of {len(wanted)} matching messages")
    except Exception as exc:
        send.errors.append(f"{type(exc).__name__}: {exc}")
    return results


# ------------------------------------------------------------------------------- main


def _table(results: list[Result]) -> str:
    head = f"{'client':<7} {'queue':<18} {'count':>7} {'size':>6} {'send msg/s':>11} {'receive msg/s':>14} {'lost':>5} {'dup':>4} {'left':>5}  status"
    rows = [head, "-" * len(head)]
    for r in results:
        status = "ok" if r.ok else "FAIL: " + "; ".join(r.errors or [f"sent_ok={r.sent_ok}"])
        rows.append(
            f"{r.client:<7} {r.queue:<18} {r.count:>7} {r.size:>6} {r.send_rate:>11.0f} "
            f"{r.receive_rate:>14.0f} {r.lost:>5} {r.duplicates:>4} {r.leftover:>5}  {status}"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="messages per phase [20000]")
    parser.add_argument("--size", type=int, default=1024, help="body bytes per message [1024]")
    parser.add_argument(
        "--only", choices=("proton", "sdk", "latency"), help="run one client / phase only"
    )
    parser.add_argument("--queue", choices=QUEUES, action="append", help="queue(s) to use [both]")
    parser.add_argument("--keep-data", action="store_true", help="keep the server's temp dir")
    parser.add_argument(
        "--topic-count", type=int, default=10_000, help="messages into the topic [10000; 0 = skip]"
    )
    parser.add_argument(
        "--backlog", type=int, metavar="N",
        help="instead: fill N durable messages per queue, restart, drain the cold backlog",
    )  # fmt: skip
    parser.add_argument(
        "--latency-rate",
        type=int,
        default=1000,
        help="offered msg/s of the latency phase [1000; 0 = skip]",
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=10.0, help="length of the latency phase [10]"
    )
    args = parser.parse_args(argv)
    if args.count <= 0 or args.size < 0:
        parser.error("--count must be > 0 and --size >= 0")
    if args.backlog is not None:
        if args.backlog <= 0:
            parser.error("--backlog must be > 0")
        print(f"sbemu bench --backlog {args.backlog}: RSS and disk in MiB", flush=True)
        return _backlog(args.backlog, args.size, args.queue or list(QUEUES), args.keep_data)

    workdir = Path(tempfile.mkdtemp(prefix="sbemu-bench-"))
    server = Server(workdir)
    server.start()
    print(f"sbemu bench: server on {server.url}, data in {workdir / 'data'}", flush=True)
    results: list[Result] = []
    try:
        for q in args.queue or QUEUES:
            if args.only in (None, "proton"):
                print(f"  proton {q}: {args.count} x {args.size} B ...", flush=True)
                results.append(_proton_phase(server.url, q, args.count, args.size, f"p-{q}"))
            if args.only in (None, "sdk"):
                print(f"  sdk    {q}: {args.count} x {args.size} B ...", flush=True)
                results.append(_sdk_phase(server.conn_str, q, args.count, args.size, f"s-{q}"))
        latency_queues = list(args.queue or QUEUES) if args.latency_rate > 0 else []
        if args.only in (None, "latency"):
            for q in latency_queues:
                print(
                    f"  latency {q}: {args.latency_rate} msg/s for {args.latency_seconds:g} s ...",
                    flush=True,
                )
                results.append(
                    _latency_phase(
                        server.port, q, args.latency_rate, args.latency_seconds, args.size
                    )
                )
        if args.topic_count > 0 and args.only in (None, "sdk"):
            print(
                f"  sdk    {TOPIC} (5 subscriptions): {args.topic_count} x {args.size} B ...",
                flush=True,
            )
            results.extend(_topic_phase(server.conn_str, args.topic_count, args.size))
    finally:
        cpu = server.cpu_seconds() if server.proc is not None and server.proc.poll() is None else 0
        rc = server.stop()
        if rc not in (0, None):
            print(f"bench: server exited with {rc} on SIGTERM", file=sys.stderr)
        if not args.keep_data:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(_table(results))
    print(f"server CPU time, all phases: {cpu:.2f} s")
    for r in results:
        if r.client == "latency" and r.latency is not None:
            p50, p99, worst = r.latency
            print(
                f"latency {r.queue}: {r.count} msgs at {args.latency_rate} msg/s offered (rhea): "
                f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms"
            )
    failed = [r for r in results if not r.ok]
    if failed:
        lost = sum(max(r.lost, 0) for r in failed)
        print(f"\nbench: {len(failed)} phase(s) failed; {lost} message(s) lost", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
