"""Load and abuse figures: thousands of concurrent AMQP connections (bounded by `ulimit -n`),
a thousand links on one connection (the default limit) and the next one refused, stuck
handshakes cut by the handshake timeout; an azure-servicebus client is served throughout.

    python -m hardening.load --connections 3000      # make load ARGS=...
"""

from __future__ import annotations

import argparse
import resource
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from . import amqpraw as raw
from .common import SdkProbe, Server, fd_count, make_config, queue_def, rss_parts_kb


def _open_conn(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(raw.handshake("plain"))
    buf = b""
    while not any(f.code == raw.BEGIN for f in raw.parse(buf)[0]):
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError(f"closed during handshake: {raw.parse(buf)[0]}")
        buf += chunk
    return s


def _heap_mib(pid: int) -> float:
    return rss_parts_kb(pid).get("RssAnon", 0) / 1024


def run(connections: int, workdir: Path, log: Any = print) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 200
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, want), hard))
        soft = min(hard, want)
    connections = min(connections, soft - 200)
    shutil.rmtree(workdir, ignore_errors=True)
    env = {"SBEMU_HANDSHAKE_TIMEOUT": "2"}
    srv = Server(workdir, make_config([queue_def("loadq")]), env=env).start()
    probe = SdkProbe(srv.conn_str)
    probe.start()
    out: dict[str, Any] = {}
    try:
        if not probe.wait_rounds(3):
            raise RuntimeError(f"probe: {probe.errors}")
        out["heap_before_mib"] = _heap_mib(srv.pid)
        t0 = time.monotonic()
        held = [_open_conn(srv.port) for _ in range(connections)]
        out["open_seconds"] = time.monotonic() - t0
        out["connections"] = srv.health()["connections"]
        out["heap_peak_mib"] = _heap_mib(srv.pid)
        r0 = probe.rounds
        served = probe.wait_rounds(r0 + 3, timeout=60)
        out["probe_served_while_held"] = served
        log(
            f"load: {len(held)} connections open in {out['open_seconds']:.1f} s; server counts "
            f"{out['connections']}; heap {out['heap_before_mib']:.1f} -> "
            f"{out['heap_peak_mib']:.1f} MiB; SDK client served: {served}"
        )
        for s in held:
            s.close()
        deadline = time.monotonic() + 30
        while srv.health()["connections"] > 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        out["heap_after_mib"] = _heap_mib(srv.pid)
        out["fds_after"] = fd_count(srv.pid)
        # a second round: a leak grows again, allocator high-water does not
        held = [_open_conn(srv.port) for _ in range(connections)]
        for s in held:
            s.close()
        deadline = time.monotonic() + 30
        while srv.health()["connections"] > 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        out["heap_after_second_round_mib"] = _heap_mib(srv.pid)
        log(
            f"load: heap after closing them {out['heap_after_mib']:.1f} MiB; after a second "
            f"round of {connections} {out['heap_after_second_round_mib']:.1f} MiB"
        )

        # links: the default limit on one connection, then refusals
        s = _open_conn(srv.port)
        limit = 1000
        s.sendall(b"".join(raw.attach_frame(f"l{i}", i, True, "loadq") for i in range(limit + 10)))
        buf, frames = b"", []
        deadline = time.monotonic() + 30
        while (
            len([f for f in frames if f.code == raw.ATTACH]) < limit + 10
            and time.monotonic() < deadline
        ):
            s.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
            frames = raw.parse(buf)[0]
        refused = [
            f
            for f in frames
            if f.code == raw.DETACH and f.error() == "amqp:resource-limit-exceeded"
        ]
        out["links_attached"] = len([f for f in frames if f.code == raw.ATTACH]) - len(refused)
        out["links_refused"] = len(refused)
        s.close()

        # stuck handshakes
        stuck = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(200)]
        for s in stuck:
            s.sendall(raw.SASL_HEADER)
        t0 = time.monotonic()
        closed = 0
        for s in stuck:
            s.settimeout(max(0.1, t0 + 10 - time.monotonic()))
            try:
                while s.recv(4096):
                    pass
                closed += 1
            except (TimeoutError, ConnectionResetError):
                pass
            s.close()
        out["stuck_handshakes_closed"] = closed
        out["stuck_close_seconds"] = time.monotonic() - t0
        log(
            f"load: links on one connection: {out['links_attached']} attached, "
            f"{out['links_refused']} refused (resource-limit-exceeded); stuck SASL handshakes "
            f"closed {closed}/200 within {out['stuck_close_seconds']:.1f} s; heap after "
            f"{out['heap_after_mib']:.1f} MiB, fds {out['fds_after']}"
        )
    finally:
        probe.stop()
        out["probe_errors"] = probe.errors
        out["tracebacks"] = srv.tracebacks()
        srv.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hardening.load")
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--workdir", default=".hardening/load")
    args = parser.parse_args(argv)
    r = run(args.connections, Path(args.workdir))
    print(f"load: probe errors {len(r['probe_errors'])}, tracebacks {len(r['tracebacks'])}")
    ok = (
        not r["probe_errors"]
        and not r["tracebacks"]
        and r["probe_served_while_held"]
        and r["links_refused"] == 10
        and r["stuck_handshakes_closed"] == 200
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
