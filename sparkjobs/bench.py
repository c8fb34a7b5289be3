"""How fast the reporting job is: events/s, time per micro-batch over a run, lag under traffic.

    .venv/bin/python -m sparkjobs.bench [--events 1000000] [--partitions 4] [--master local[2]]
                                        [--max-records-per-batch 250000] [--keep DIR]
                                        [--lag-seconds 60 --rate 2000]

1. Throughput: writes `--events` well-formed log records (enqueued / delivered / completed|
   abandoned|deadlettered per message) straight into fresh partition stores with
   PartitionStore (as the broker would, in batched transactions), then runs the job from
   scratch (Trigger.AvailableNow, `--max-records-per-batch` per micro-batch) and prints events/s
   end to end and the time of the first and last micro-batches (they must not grow with the
   history: each batch merges only its own events). The JVM start is excluded (reported).
2. Lag (`--lag-seconds` > 0): starts `sbemu serve`, sends `--rate` msg/s to queue.1 with a
   python-qpid-proton client (no SDK), runs the job with `--follow --interval 1`, and prints
   the lag from a message's send to the batch that puts it into `traffic_by_minute` (the
   oldest message of each batch; median and max after a 15 s warm-up, and once Spark is warm:
   from the third batch with events on, after the JVM/worker warm-up batch and the batch that
   catches up with what was sent meanwhile).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

from sparkjobs.synthetic_logs import Traffic, write_logs

_HZ = os.sysconf("SC_CLK_TCK")


def process_cpu() -> dict[str, float]:
    """CPU seconds (user + system, reaped children included) of this process and its
    descendants, by role: "driver" (this Python process), "jvm" (Spark's JVM: planning,
    scheduling, Arrow transfer), "python workers" (Spark's Python workers and the data source
    planner under the JVM: decoding and Parquet writing), "other"."""
    procs: dict[int, tuple[int, str, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        procs[int(name)] = (int(fields[1]), comm, sum(int(x) for x in fields[11:15]) / _HZ)
    me = os.getpid()
    out = {"driver": 0.0, "jvm": 0.0, "python workers": 0.0, "other": 0.0}
    for pid, (_ppid, comm, cpu) in procs.items():
        chain: list[str] = []
        p = pid
        while p in procs and p != me and len(chain) < 64:
            chain.append(procs[p][1])
            p = procs[p][0]
        if p != me:
            continue  # not ours
        if pid == me:
            role = "driver"
        elif comm == "java":
            role = "jvm"
        elif "java" in chain:
            role = "python workers"
        else:
            role = "other"
        out[role] += cpu
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def generate(
    data_dir: str,
    events: int,
    partitions: int,
    *,
    namespace: str = "benchns",
    entity: str = "bench.queue",
) -> int:
    """Write `events` log records spread evenly over `partitions`; returns how many."""
    counts = [
        events // partitions + (1 if pid < events % partitions else 0) for pid in range(partitions)
    ]
    return write_logs(
        data_dir, namespace, entity, counts, Traffic(), commit_every=20_000, durable=False
    )


def _throughput(
    spark: Any, work: str, events: int, partitions: int, per_batch: int, verbose: bool
) -> None:
    from sparkjobs import report

    data, out = os.path.join(work, "data"), os.path.join(work, "reports")
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    t = time.monotonic()
    n = generate(data, events, partitions)
    print(
        f"generated {n:,} log records in {partitions} partition(s) "
        f"in {time.monotonic() - t:.1f}s ({work})",
        flush=True,
    )
    cpu0, load0 = process_cpu(), loadavg()
    last = [cpu0]

    def log(line: str) -> None:
        if not verbose:
            return
        now = process_cpu()
        spent = ", ".join(f"{k} {v:.2f}" for k, v in cpu_delta(last[0], now).items() if v > 0.005)
        last[0] = now
        print(f"{line}; CPU-s since the last line: {spent}", flush=True)

    result = report.run(
        spark, source="lmdb", path=data, out=out, max_records_per_batch=per_batch, log=log
    )
    cpu = cpu_delta(cpu0, process_cpu())
    assert result.total_events == n, (result.total_events, n)
    total = result.stream_seconds + result.tables_seconds
    times = result.batch_seconds
    print(
        f"report  {n:>12,} events in {total:7.1f}s = {n / total:>10,.0f} events/s end to end "
        f"({result.batches} batches of <= {per_batch:,}); load average {load0} -> {loadavg()}"
    )
    busy = sum(cpu.values())
    split = ", ".join(f"{k} {v / n * 1e6:.1f}" for k, v in cpu.items() if v > 0.005)
    print(
        f"cpu     {busy:.1f} CPU-s = {busy / n * 1e6:.1f} us/event ({split} us/event); "
        f"{n / busy:,.0f} events per CPU-second"
    )
    print(
        f"batch   first {times[0]:.2f}s, last {times[-1]:.2f}s (last/first "
        f"{times[-1] / times[0]:.2f}); median {statistics.median(times):.2f}s, "
        f"max {max(times):.2f}s"
    )
    if len(times) >= 4:
        k = max(2, len(times) // 10)
        head, tail = times[1 : 1 + k], times[-k:]
        print(
            f"batch   after warm-up: first {k} median {statistics.median(head):.2f}s, "
            f"last {k} median {statistics.median(tail):.2f}s "
            f"(ratio {statistics.median(tail) / statistics.median(head):.2f})"
        )


def _start_server(work: str) -> tuple[Any, int]:
    """sbemu (sbemu.testing's launcher) on free ports with its data dir under `work`."""
    from sbemu.testing import SbemuProcess, StartError

    server = SbemuProcess(data_dir=os.path.join(work, "lagdata"))
    try:
        return server, server.start().amqp_port
    except StartError as exc:
        raise SystemExit(f"bench: the server did not start: {exc}") from None


def _proton_sender(
    port: int, rate: int, seconds: float, sent_at: list[float], stop: threading.Event
) -> None:
    """Send `rate` msg/s to queue.1 for `seconds` (python-qpid-proton); record send times."""
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    tick = 0.05
    per_tick = max(1, int(rate * tick))

    class Sender(MessagingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.sender: Any = None
            self.due = 0
            self.t0 = 0.0
            self.accepted = 0
            self.closing = False

        def on_start(self, event: Any) -> None:
            conn = event.container.connect(
                f"amqp://127.0.0.1:{port}",
                user="RootManageSharedAccessKey",
                password="SAS_KEY_VALUE",
                sasl_enabled=True,
                allowed_mechs="PLAIN",
            )
            self.sender = event.container.create_sender(conn, "queue.1")
            self.t0 = time.monotonic()
            event.container.schedule(tick, self)

        def on_timer_task(self, event: Any) -> None:
            elapsed = time.monotonic() - self.t0
            if elapsed >= seconds or stop.is_set():
                self.closing = True  # close once every send is acknowledged
                self._maybe_close()
                return
            self.due = int(elapsed * rate) + per_tick
            self._send()
            event.container.schedule(tick, self)

        def on_sendable(self, event: Any) -> None:
            self._send()

        def on_accepted(self, event: Any) -> None:
            self.accepted += 1
            self._maybe_close()

        def _maybe_close(self) -> None:
            if self.closing and self.accepted >= len(sent_at):
                self.sender.connection.close()

        def _send(self) -> None:
            while not self.closing and len(sent_at) < self.due and self.sender.credit > 0:
                self.sender.send(Message(body=b"x" * 100, durable=True))
                sent_at.append(time.time())

    Container(Sender()).run()


def _lag(spark: Any, work: str, seconds: float, rate: int, verbose: bool = False) -> None:
    from sparkjobs import report

    proc, port = _start_server(work)
    sent_at: list[float] = []
    stop = threading.Event()
    lags: list[tuple[float, float]] = []  # (seconds since start, lag of the batch's oldest)
    seen = [0]
    t0 = time.time()

    def on_tables(total: int, rows: list[dict[str, Any]]) -> None:
        now = time.time()
        n = sum(r["enqueued"] for r in rows if r["entity"] == "queue.1")
        if n > seen[0] and seen[0] < len(sent_at):
            lags.append((now - t0, now - sent_at[seen[0]]))
        seen[0] = n

    sender = threading.Thread(target=_proton_sender, args=(port, rate, seconds, sent_at, stop))
    job = threading.Thread(
        target=lambda: report.run(
            spark,
            source="lmdb",
            path=os.path.join(work, "lagdata"),
            out=os.path.join(work, "lagout"),
            follow=True,
            interval_seconds=1.0,
            on_tables=on_tables,
            should_stop=stop.is_set,
            log=lambda line: (
                print(f"{time.time() - t0:6.1f}s {line}", flush=True) if verbose else None
            ),
        )
    )
    try:
        job.start()
        sender.start()
        sender.join()
        deadline = time.monotonic() + 60
        while seen[0] < len(sent_at) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop.set()
        job.join(120)
        proc.cleanup()
    warm = [lag for at, lag in lags if at > 15]
    print(f"lag     load average {loadavg()}")
    if verbose:
        print(
            "lag     per batch (s since start, lag s): "
            + ", ".join(f"({at:.1f}, {lag:.2f})" for at, lag in lags)
        )
    steady = [lag for _at, lag in lags[2:]]  # after the warm-up batch and the catch-up one
    if steady:
        print(
            f"lag     once Spark is warm (from the third batch with events on): median "
            f"{statistics.median(steady):.2f}s, p90 "
            f"{sorted(steady)[int(0.9 * (len(steady) - 1))]:.2f}s, max {max(steady):.2f}s "
            f"({len(steady)} batches)"
        )
    print(
        f"lag     {len(sent_at):,} messages at {len(sent_at) / seconds:,.0f} msg/s for "
        f"{seconds:.0f}s; {seen[0]:,} in traffic_by_minute; lag to traffic_by_minute after "
        f"warm-up: median {statistics.median(warm):.2f}s, max {max(warm):.2f}s "
        f"({len(warm)} batches)"
        if warm
        else "lag     no batch after the warm-up"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sparkjobs.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--events", type=int, default=1_000_000, help="0: skip the throughput run")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--master", default="local[2]")
    # a catch-up run's batches: big enough that Spark's fixed cost per batch (offset and commit
    # logs, planning, a job, ~0.5 s) stays small next to the events' own, small enough that a
    # batch's time and the driver's memory stay bounded (1M events: 4 batches)
    p.add_argument("--max-records-per-batch", type=int, default=250_000)
    p.add_argument("--lag-seconds", type=float, default=60.0, help="0: skip the lag run")
    p.add_argument("--rate", type=int, default=2000, help="msg/s sent in the lag run")
    p.add_argument("--verbose", action="store_true", help="print every batch and its phases")
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: temp dir)")
    args = p.parse_args(argv)

    from sparkjobs.session import build_session

    work = args.keep or tempfile.mkdtemp(prefix="sbemu-bench-")
    t = time.monotonic()
    spark = build_session(args.master, app_name="sbemu-bench")
    print(
        f"spark started in {time.monotonic() - t:.1f}s "
        f"({spark.sparkContext.master}, {spark.sparkContext.defaultParallelism} cores)",
        flush=True,
    )
    try:
        if args.events > 0:
            _throughput(
                spark, work, args.events, args.partitions, args.max_records_per_batch, args.verbose
            )
        if args.lag_seconds > 0:
            _lag(spark, work, args.lag_seconds, args.rate, args.verbose)
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
