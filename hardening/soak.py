"""Soak: steady mixed traffic for N minutes; resident memory, file descriptors and round-trip
latency sampled each minute must stay flat.

Traffic: SDK round-trip probes (send, receive, complete), a batch sender and a receive-and-
delete drainer on a partitioned queue, and short-lived connections opening and closing (the
pattern of serverless clients), all at once.

    python -m hardening.soak --minutes 10       # make soak ARGS="--minutes 10"
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import amqpraw as raw
from .common import SdkProbe, Server, fd_count, make_config, queue_def, rss_kb, rss_parts_kb


def _batch_traffic(conn_str: str, stop: threading.Event, counts: dict[str, int]) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode

    with (
        ServiceBusClient.from_connection_string(conn_str) as client,
        client.get_queue_sender("soakpq") as sender,
        client.get_queue_receiver(
            "soakpq", max_wait_time=1, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as rcv,
    ):
        while not stop.is_set():
            sender.send_messages([ServiceBusMessage(b"x" * 512) for _ in range(50)])
            counts["sent"] += 50
            got = 0
            while got < 50 and not stop.is_set():
                batch = rcv.receive_messages(max_message_count=50, max_wait_time=1)
                got += len(batch)
            counts["received"] += got


def _churn(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    """Connections that open, begin and go away (half of them without a close)."""
    i = 0
    while not stop.is_set():
        i += 1
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(raw.handshake("plain"))
            s.recv(65536)
            if i % 2:
                s.sendall(raw.close_frame())
        counts["connections"] += 1
        stop.wait(0.05)


def soak(minutes: float, workdir: Path, log: Any = print) -> dict[str, Any]:
    shutil.rmtree(workdir, ignore_errors=True)
    server = Server(workdir, make_config([queue_def("soakpq", EnablePartitioning=True)])).start()
    stop = threading.Event()
    counts: dict[str, int] = {"sent": 0, "received": 0, "connections": 0}
    probe = SdkProbe(server.conn_str, pause=0.02)
    workers = [
        threading.Thread(target=_batch_traffic, args=(server.conn_str, stop, counts), daemon=True),
        threading.Thread(target=_churn, args=(server.port, stop, counts), daemon=True),
    ]
    probe.start()
    for w in workers:
        w.start()
    samples = []
    t0 = time.monotonic()
    seen = 0
    try:
        for minute in range(1, int(max(1, minutes)) + 1):
            time.sleep(
                max(0.0, t0 + 60 * minute * (minutes / max(1, int(minutes))) - time.monotonic())
            )
            lat = probe.latencies[seen:]
            seen = len(probe.latencies)
            parts = rss_parts_kb(server.pid)
            s = {
                "minute": minute,
                "rss_mib": rss_kb(server.pid) / 1024,
                "fds": fd_count(server.pid),
                "anon_mib": parts.get("RssAnon", 0) / 1024,
                "file_mib": parts.get("RssFile", 0) / 1024,
                "p50_ms": 1000 * statistics.median(lat) if lat else float("nan"),
                "p99_ms": 1000
                * (
                    statistics.quantiles(lat, n=100)[98]
                    if len(lat) > 2
                    else max(lat, default=float("nan"))
                ),
                "round_trips": len(lat),
                **counts,
            }
            samples.append(s)
            log(
                f"soak: minute {minute}: RSS {s['rss_mib']:.1f} MiB (heap {s['anon_mib']:.1f}, "
                f"mapped store files {s['file_mib']:.1f}), fds {s['fds']}, "
                f"probe p50 {s['p50_ms']:.1f} ms p99 {s['p99_ms']:.1f} ms ({len(lat)} round "
                f"trips), sent {counts['sent']}, received {counts['received']}, "
                f"connections {counts['connections']}"
            )
    finally:
        stop.set()
        probe.stop()
        for w in workers:
            w.join(timeout=30)
        tracebacks = server.tracebacks()
        server.stop()
    first, last = samples[0], samples[-1]
    return {
        "samples": samples,
        "probe_errors": probe.errors,
        "tracebacks": tracebacks,
        "rss_growth_mib": last["rss_mib"] - first["rss_mib"],
        "heap_growth_mib": last["anon_mib"] - first["anon_mib"],
        "fd_growth": last["fds"] - first["fds"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hardening.soak")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--workdir", default=".hardening/soak")
    args = parser.parse_args(argv)
    r = soak(args.minutes, Path(args.workdir))
    print(
        f"soak: {len(r['samples'])} minutes; growth after minute 1: heap "
        f"{r['heap_growth_mib']:+.1f} MiB, RSS incl. mapped LMDB files "
        f"{r['rss_growth_mib']:+.1f} MiB; fd growth {r['fd_growth']:+d}; probe errors "
        f"{len(r['probe_errors'])}; tracebacks {len(r['tracebacks'])}"
    )
    # the heap must stay flat; mapped LMDB pages follow the (untrimmed) partition logs on disk
    flat = r["heap_growth_mib"] < 20 and r["fd_growth"] <= 5
    ok = flat and not r["probe_errors"] and not r["tracebacks"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
