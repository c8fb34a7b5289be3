"""How long one request holds the server's event loop: the largest batch the limits let
through (4,500 messages in one transfer, Azure's count, on a plain and a 16-partition queue)
and a 99 MB message on a Premium queue, each sent a few times by a client in another process
while a watch on the server's loop measures how late a callback due every millisecond runs
(the loop held by one piece of work) and how much CPU the loop's thread used between two of
its runs (the same, without the machine's other load). Issue 35 asks for 50 ms at most.

    python -m hardening.loophold [--rounds 5] [--limit-ms 50]   # make loop-hold

The server runs in this process (sbemu.runtime.server.Server on uvloop, on a thread of its
own, durable stores in a temporary directory) so the watch runs on its loop; the client is a
python-qpid-proton process (`--client`), so it takes no GIL from the server. Exits 1 when the
worst lateness passes --limit-ms: run it on a quiet machine (the load average is printed);
tests/load/test_loop_hold.py runs the same measurement with a margin for a busy one.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sbemu.protocol import codec

from .amqpraw import KEY, KEY_NAME

PLAIN, PARTITIONED, BIG, BIG_SESSIONS = "plain", "partitioned", "big", "bigsessions"
BATCH = 4500  # Azure's count of messages in one batch
HEADER = b"\x00\x53\x70\xc0\x02\x01\x41"
# a data section holding a message with no MessageId (the service stamps one on each)
TINY = b"\x00\x53\x75\xa0\x06" + b"\x00\x53\x77\xa1\x01x"
BIG_SIZE = 99_000_000
EXPIRE_TTL_S = 4.0  # the `expire` case's time to live: past the send (1-2 s), within the watch


class LoopWatch:
    """A callback due every `interval` s on `loop`: the worst lateness of its runs (wall
    clock) and the most CPU the loop's thread used between two of them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float = 0.001) -> None:
        self.loop = loop
        self.interval = interval
        self.worst_late = 0.0
        self.worst_cpu = 0.0
        self.late_over_10ms = 0
        # the cyclic collector's longest pause (any thread: while it runs, it holds the GIL)
        self.worst_gc = 0.0
        self._gc_started = 0.0
        self._due = 0.0
        self._cpu = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def _collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.worst_gc = max(self.worst_gc, time.perf_counter() - self._gc_started)

    def start(self) -> None:
        """(on the loop's thread)"""
        gc.callbacks.append(self._collection)
        self._cpu = time.thread_time()
        self._due = self.loop.time() + self.interval
        self._handle = self.loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        now, cpu = self.loop.time(), time.thread_time()
        late, used = now - self._due, cpu - self._cpu
        self.worst_late = max(self.worst_late, late)
        self.worst_cpu = max(self.worst_cpu, used)
        self.late_over_10ms += late > 0.010
        self._cpu, self._due = cpu, now + self.interval
        self._handle = self.loop.call_at(self._due, self._tick)

    def take(self) -> dict[str, float]:
        """The figures since the last take (ms), and start again."""
        out = {
            "worst_late_ms": round(self.worst_late * 1000, 1),
            "worst_cpu_ms": round(self.worst_cpu * 1000, 1),
            "late_over_10ms": self.late_over_10ms,
            "worst_gc_ms": round(self.worst_gc * 1000, 1),
        }
        self.worst_late = self.worst_cpu = self.worst_gc = 0.0
        self.late_over_10ms = 0
        return out

    def stop(self) -> None:
        if self._collection in gc.callbacks:
            gc.callbacks.remove(self._collection)
        if self._handle is not None:
            self._handle.cancel()


def _config(premium: bool) -> dict[str, Any]:
    if premium:
        ns: dict[str, Any] = {
            "Name": "sbemulatorns",
            "PremiumMessagingPartitions": 1,
            "Queues": [
                {"Name": BIG, "Properties": {"MaxMessageSizeInKilobytes": 102_400}},
                {
                    "Name": BIG_SESSIONS,
                    "Properties": {"MaxMessageSizeInKilobytes": 102_400, "RequiresSession": True},
                },
            ],
        }
    else:
        ns = {
            "Name": "sbemulatorns",
            "Queues": [
                {"Name": PLAIN, "Properties": {}},
                {"Name": PARTITIONED, "Properties": {"EnablePartitioning": True}},
            ],
        }
    return {"UserConfig": {"Namespaces": [ns], "Logging": {"Type": "Console"}}}


class WatchedServer:
    """A real Server on a uvloop thread of this process, with a LoopWatch on its loop. The
    process's cyclic collector is set as `sbemu serve` sets its own (cli/gcpolicy.py: start-up
    frozen, a larger young generation) while the server runs, and put back at stop: with
    CPython's defaults a batch of 4,500 messages met full collections of 45-64 ms, which the
    served process does not run."""

    def __init__(self, workdir: Path, premium: bool) -> None:
        from sbemu.config import parse_config
        from sbemu.runtime.server import Server

        self.server = Server(
            parse_config(_config(premium), "loophold"),
            data_dir=workdir / "data",
            host="127.0.0.1",
            port=0,
            admin_port=0,
        )
        self.watch: LoopWatch | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thresholds = gc.get_threshold()

    def start(self) -> WatchedServer:
        import uvloop

        from sbemu.cli.gcpolicy import tune_for_serving

        loop = self._loop = uvloop.new_event_loop()
        started = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.server.start())
                self.watch = LoopWatch(loop)
                self.watch.start()
            except BaseException as exc:  # handed to the starting thread
                failed.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="loophold-server", daemon=True)
        self._thread.start()
        started.wait(60)
        if failed:
            raise failed[0]
        tune_for_serving()
        return self

    @property
    def port(self) -> int:
        return self.server.amqp_port

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        assert self.watch is not None
        loop.call_soon_threadsafe(self.watch.stop)
        asyncio.run_coroutine_threadsafe(self.server.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        gc.unfreeze()
        gc.set_threshold(*self._thresholds)


def batch_payload(kind: str) -> bytes:
    """A batch transfer of BATCH messages: `tiny` (no MessageId) or `sdk` (a MessageId and an
    application property each, as the SDKs' batches)."""
    if kind == "tiny":
        return HEADER + TINY * BATCH
    parts = []
    for i in range(BATCH):
        inner = (
            codec.enc_described(0x73, codec.enc_list([codec.enc_string(f"m-{i:06d}")]))
            + codec.enc_described(0x74, codec.enc_map([(codec.enc_string("n"), codec.enc_int(i))]))
            + codec.enc_described(0x75, codec.enc_binary(b"0123456789"))
        )
        parts.append(codec.enc_described(0x75, codec.enc_binary(inner)))
    return HEADER + b"".join(parts)


SESSION = "s-1"  # the session of the `session` case's messages


def _connect(port: int) -> Any:
    from proton.utils import BlockingConnection

    url = f"amqp://{KEY_NAME}:{KEY}@127.0.0.1:{port}"
    return BlockingConnection(url, sasl_enabled=True, allowed_mechs="PLAIN", timeout=300)


def run_client(port: int, queue: str, kind: str, rounds: int) -> dict[str, Any]:
    """Send `rounds` transfers of `kind` (tiny, sdk: a batch; big: a 99 MB message, in
    session SESSION on a session-enabled queue) to `queue`, each once the previous one was
    accepted, or receive `rounds` messages from it peek-locked, one at a time (credit 1),
    accepting each (recv; session: as a session receiver; again: each given back once
    (abandoned) and received again by a new receiver, so it is read back from the store); the
    milliseconds each took."""
    from proton import Message

    from .amqpraw import EncodedMessage

    if kind in ("recv", "session", "again"):
        return _receive(port, queue, kind, rounds)
    if kind in ("peek", "deferred", "schedule"):
        return _by_request(port, queue, kind, rounds)
    conn = _connect(port)
    sender = conn.create_sender(queue)
    took = []
    session = SESSION if queue == BIG_SESSIONS else None
    for _ in range(rounds):
        started = time.perf_counter()
        if kind in ("big", "bigttl"):
            message = Message(body=b"b" * BIG_SIZE, durable=True, group_id=session)
            if kind == "bigttl":
                message.ttl = EXPIRE_TTL_S
            sender.send(message, timeout=300)
        else:
            sender.send(EncodedMessage(batch_payload(kind)), timeout=120)
        took.append(round((time.perf_counter() - started) * 1000, 1))
        time.sleep(0.2)  # the loop idles between rounds: a hold is one request's
    conn.close()
    return {"accepted": len(took), "ack_ms": took}


def _receive(port: int, queue: str, kind: str, rounds: int) -> dict[str, Any]:
    from proton import symbol
    from proton.reactor import Filter

    options = None
    if kind == "session":
        options = Filter({symbol("com.microsoft:session-filter"): SESSION})
    took, sizes = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        if kind == "again":  # given back, then read back from the store by a new receiver
            conn = _connect(port)
            first = conn.create_receiver(queue)
            first.receive(timeout=300)
            first.release(delivered=True)  # modified, delivery failed: abandoned
            conn.close()
            time.sleep(0.3)  # (its change committed: the next read is the store's)
        conn = _connect(port)
        # (no prefetch: each receive() grants one credit, so no other message is locked)
        receiver = conn.create_receiver(queue, options=options)
        message = receiver.receive(timeout=300)
        receiver.accept()
        conn.close()
        took.append(round((time.perf_counter() - started) * 1000, 1))
        sizes.append(len(message.body))
    return {"accepted": len(took), "ack_ms": took, "sizes": sizes}


def _by_request(port: int, queue: str, kind: str, rounds: int) -> dict[str, Any]:
    """Each of `rounds` messages in a management answer: peeked (peek), or deferred and then
    received by its sequence number (deferred); with the Python SDK."""
    from azure.servicebus import ServiceBusClient

    conn_str = (
        f"Endpoint=sb://localhost:{port};SharedAccessKeyName={KEY_NAME};"
        f"SharedAccessKey={KEY};UseDevelopmentEmulator=true;"
    )
    took, sizes = [], []
    if kind == "schedule":
        return _schedule(conn_str, queue, rounds)
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_receiver(queue, max_wait_time=300) as receiver:
            next_seq = 0
            for _ in range(rounds):
                started = time.perf_counter()
                if kind == "peek":
                    [message] = receiver.peek_messages(1, sequence_number=next_seq)
                    next_seq = message.sequence_number + 1
                else:
                    [first] = receiver.receive_messages(1, max_wait_time=300)
                    receiver.defer_message(first)
                    time.sleep(0.3)  # (deferred and committed: the next read is the store's)
                    [message] = receiver.receive_deferred_messages([first.sequence_number])
                    receiver.complete_message(message)
                took.append(round((time.perf_counter() - started) * 1000, 1))
                body = message.body  # (an amqp-value: the bytes the sender gave)
                sizes.append(len(body if isinstance(body, bytes) else b"".join(body)))
    return {"accepted": len(took), "ack_ms": took, "sizes": sizes}


def _schedule(conn_str: str, queue: str, rounds: int) -> dict[str, Any]:
    """Each of `rounds` 99 MB messages scheduled (a `$management` request that carries it),
    then cancelled."""
    import datetime as dt

    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    took = []
    when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            for _ in range(rounds):
                started = time.perf_counter()
                [seq] = sender.schedule_messages(ServiceBusMessage(b"s" * BIG_SIZE), when)
                sender.cancel_scheduled_messages(seq)
                took.append(round((time.perf_counter() - started) * 1000, 1))
                time.sleep(0.2)
    return {"accepted": len(took), "ack_ms": took, "sizes": [BIG_SIZE] * len(took)}


def _client(port: int, queue: str, kind: str, rounds: int) -> dict[str, Any]:
    """Run the client in its own process (it takes no GIL from the server)."""
    out = subprocess.run(
        [sys.executable, "-m", "hardening.loophold", "--client", str(port), queue, kind,
         str(rounds)],
        capture_output=True, text=True, timeout=600, check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"client failed: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure(srv: WatchedServer, queue: str, kind: str, rounds: int) -> dict[str, Any]:
    """One case: the client's rounds against `srv`, and the watch's figures meanwhile. A
    receiving case (recv, session, again) first sends its rounds' 99 MB messages (not
    watched), then watches only their deliveries."""
    assert srv.watch is not None
    if kind in ("recv", "session", "again", "peek", "deferred", "purge"):
        _client(srv.port, queue, "big", rounds)
    if kind == "expire":
        _client(srv.port, queue, "bigttl", rounds)
    time.sleep(0.3)
    srv.watch.take()
    if kind == "purge":
        result = _purge(srv, queue)
    elif kind == "expire":
        result = _expired(srv, queue)
    else:
        result = _client(srv.port, queue, kind, rounds)
    held = srv.watch.take()
    return {"queue": queue, "kind": kind, **result, **held}


def _purge(srv: WatchedServer, queue: str) -> dict[str, Any]:
    """Purge `queue` through the admin API (the loopback CSRF token, as `sbemu purge`)."""
    from urllib.request import Request, urlopen

    base = f"http://127.0.0.1:{srv.server.admin_port}"
    with urlopen(base + "/api/session", timeout=30) as answer:
        token = json.loads(answer.read())["csrf"]
    request = Request(f"{base}/purge/sbemulatorns/{queue}", data=b"", method="POST",
                      headers={"X-CSRF-Token": token})  # fmt: skip
    started = time.perf_counter()
    with urlopen(request, timeout=300) as answer:
        purged = json.loads(answer.read())["total"]
    return {"accepted": purged, "ack_ms": [round((time.perf_counter() - started) * 1000, 1)]}


def _expired(srv: WatchedServer, queue: str) -> dict[str, Any]:
    """Wait until the messages of `queue` (sent with a TTL of EXPIRE_TTL_S) have expired: the
    server's timers fire them (its clock is real: nothing to advance); how many went."""
    from sbemu.partitions import message_counts

    loop = srv._loop
    assert loop is not None
    entity = next(e for (_, name), e in srv.server.router.entities.items() if name == queue)

    async def stored() -> int:
        return int(message_counts(entity)["active"])

    before = asyncio.run_coroutine_threadsafe(stored(), loop).result(30)
    started = time.perf_counter()
    deadline = time.monotonic() + EXPIRE_TTL_S + 60
    left = before
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = asyncio.run_coroutine_threadsafe(stored(), loop).result(30)
    took = round((time.perf_counter() - started) * 1000, 1)
    return {"accepted": before - left, "ack_ms": [took]}


CASES = (
    (False, PLAIN, "tiny"),
    (False, PLAIN, "sdk"),
    (False, PARTITIONED, "tiny"),
    (True, BIG, "big"),
    (True, BIG, "recv"),
    (True, BIG_SESSIONS, "session"),
    (True, BIG, "again"),
    (True, BIG, "peek"),
    (True, BIG, "deferred"),
    (True, BIG, "schedule"),
    (True, BIG, "purge"),
    (True, BIG, "expire"),
)


def run(rounds: int, cases: tuple[tuple[bool, str, str], ...] = CASES) -> list[dict[str, Any]]:
    results = []
    for premium in (False, True):
        chosen = [(queue, kind) for p, queue, kind in cases if p == premium]
        if not chosen:
            continue
        with tempfile.TemporaryDirectory(prefix="sbemu-loophold-") as tmp:
            srv = WatchedServer(Path(tmp), premium).start()
            try:
                for queue, kind in chosen:
                    results.append(
                        measure(
                            srv,
                            queue,
                            kind,
                            rounds if kind in ("tiny", "sdk") else max(1, rounds // 2),
                        )
                    )
            finally:
                srv.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--limit-ms", type=float, default=50.0)
    parser.add_argument(
        "--kinds",
        default="tiny,sdk,big,recv,session,again,peek,deferred,schedule,purge,expire",
        help="the cases to run (default: all)",
    )
    parser.add_argument("--client", nargs=4, metavar=("PORT", "QUEUE", "KIND", "ROUNDS"))
    args = parser.parse_args(argv)
    if args.client:
        port, queue, kind, rounds = args.client
        print(json.dumps(run_client(int(port), queue, kind, int(rounds))))
        return 0
    load = os.getloadavg()
    kinds = set(args.kinds.split(","))
    results = run(args.rounds, tuple(case for case in CASES if case[2] in kinds))
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores: quiet below 0.5)")
    print(
        f"{'queue':<12} {'transfer':<22} {'worst late':>11} {'worst CPU':>10} "
        f"{'worst GC':>9} {'acks (ms)'}"
    )
    names = {
        "tiny": "4,500 msgs, no ids",
        "sdk": "4,500 msgs, ids+props",
        "big": "99 MB message",
        "recv": "99 MB delivery",
        "session": "99 MB, a session's",
        "again": "99 MB, delivered again",
        "peek": "99 MB, peeked",
        "deferred": "99 MB, deferred, by seq",
        "schedule": "99 MB, scheduled",
        "purge": "99 MB, purged",
        "expire": "99 MB, expired",
    }
    worst = 0.0
    for r in results:
        worst = max(worst, r["worst_late_ms"])
        print(
            f"{r['queue']:<12} {names[r['kind']]:<22} {r['worst_late_ms']:>8.1f} ms "
            f"{r['worst_cpu_ms']:>7.1f} ms {r['worst_gc_ms']:>6.1f} ms {r['ack_ms']}"
        )
    print(f"worst loop hold {worst:.1f} ms (limit {args.limit_ms:.0f} ms)")
    return 0 if worst < args.limit_ms else 1


if __name__ == "__main__":
    sys.exit(main())
