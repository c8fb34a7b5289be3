#!/usr/bin/env python
"""Lock renewals per second through azure-servicebus's sync client: ``make bench-renewals``.

What a pyamqp peer's `$management` link costs the server with the help it gets
(src/sbemu/protocol/replycopies.py: each renewal of a burst answered again, empty frames while
an answer waits for credit). A server on a temporary data dir (bench/bench.py's), one queue
with a 60 s lock; one receiver takes ``--messages`` messages (peek-lock) and then, for
``--seconds`` each:

* ``one thread``: renews their locks one after another (a lone renewer: one answer each);
* ``N threads``: ``--threads`` threads renew their share of the locks at once, as the
  AutoLockRenewer's workers do (every renewal part of a burst: copies go).

Each phase prints renewals per second and the server's CPU per renewal. To compare with the
help turned off, run the same script with ``PYTHONPATH`` pointing at a source tree whose
``wants_copies`` answers False (docs/sdk-suite.md has the figures and how they were taken).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Server  # noqa: E402  (bench/bench.py: the same server set-up)

QUEUE = "renewals"


def _config() -> dict[str, object]:
    queue = {
        "Name": QUEUE,
        "Properties": {"LockDuration": "PT1M", "MaxDeliveryCount": 10},
    }
    return {
        "UserConfig": {
            "Namespaces": [{"Name": "sbemulatorns", "Queues": [queue], "Topics": []}],
            "Logging": {"Type": "File"},
        }
    }


def _renew_for(receiver, messages, seconds: float, threads: int) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """Renewals done in `seconds` by `threads` threads, each renewing its share in turn."""
    counts = [0] * threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def work(k: int) -> None:
        mine = messages[k::threads]
        start.wait()
        i = 0
        try:
            while time.perf_counter() < stop_at[0]:
                receiver.renew_message_lock(mine[i % len(mine)])
                counts[k] += 1
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported: the phase fails
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    t0 = time.perf_counter()
    stop_at[0] = t0 + seconds
    start.wait()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"bench-renewals: a renewal failed: {errors[0]!r}")
    return sum(counts), elapsed


def main(argv: list[str] | None = None) -> int:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50, help="locks held [50]")
    parser.add_argument("--threads", type=int, default=5, help="renewing threads [5]")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a phase [5]")
    parser.add_argument("--json", action="store_true", help="print one JSON line per phase")
    args = parser.parse_args(argv)
    if args.messages < args.threads or args.threads < 1 or args.seconds <= 0:
        parser.error("--messages must be >= --threads >= 1 and --seconds > 0")

    server = Server(Path(tempfile.mkdtemp(prefix="sbemu-renewals-")), _config())
    server.start()
    try:
        with ServiceBusClient.from_connection_string(server.conn_str) as client:
            with client.get_queue_sender(QUEUE) as sender:
                sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(args.messages)])
            with client.get_queue_receiver(QUEUE, prefetch_count=args.messages) as receiver:
                got: list[object] = []
                while len(got) < args.messages:
                    got += receiver.receive_messages(args.messages - len(got), max_wait_time=5)
                receiver.renew_message_lock(got[0])  # the $management link opens first
                for threads in (1, args.threads):
                    cpu0 = server.cpu_seconds()
                    done, elapsed = _renew_for(receiver, got, args.seconds, threads)
                    cpu = server.cpu_seconds() - cpu0
                    row = {
                        "threads": threads,
                        "renewals": done,
                        "per_second": round(done / elapsed, 1),
                        "server_cpu_us_per_renewal": round(cpu / done * 1e6, 1) if done else None,
                    }
                    if args.json:
                        print(json.dumps(row), flush=True)
                    else:
                        print(
                            f"{threads} thread(s): {row['per_second']:>8} renewals/s, "
                            f"server CPU {row['server_cpu_us_per_renewal']} us per renewal",
                            flush=True,
                        )
                for m in got:
                    receiver.complete_message(m)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
