#!/usr/bin/env python
"""Speed where users feel it: a test fixture's round trip and the Python SDK's own rates.

``make bench-sdk`` (``bench/sdk.py``). Two measurements, in alternating rounds (medians):

* **Fixture round trip**: what one test with a fresh server costs: start ``sbemu serve``
  (``sbemu.testing``) and wait for it, create a queue through ServiceBusAdministrationClient,
  send one message, receive it, complete it, delete the queue, stop the server. Both data-dir
  modes: ``durable`` (a data dir of its own, every commit fsynced: what the pytest plugin did
  before ``--ephemeral``) and ``ephemeral`` (``--ephemeral``: what it does now).
* **SDK rates**: the azure-servicebus SDK, sync and async, sends ``--count`` messages of
  ``--size`` bytes (batches from ``create_message_batch``) and receives them (peek-lock,
  prefetch 300, ``complete_message`` each): against sbemu durable, sbemu ephemeral, and the
  SDK's own ceiling, the in-memory forwarder (``bench/node/forwarder.js``: stores nothing and
  answers ``$cbs`` at once), so sbemu's figure reads against what the SDK itself can do here.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import FORWARDER, NODE_DIR, Forwarder  # noqa: E402

from sbemu.testing import SbemuProcess  # noqa: E402

QUEUE = "queue.1"  # in the embedded default configuration


def _clock(steps: dict[str, list[float]], name: str, t0: float) -> float:
    now = time.perf_counter()
    steps.setdefault(name, []).append((now - t0) * 1000)
    return now


def fixture_round_trip(ephemeral: bool, steps: dict[str, list[float]]) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.management import ServiceBusAdministrationClient

    t_all = t = time.perf_counter()
    server = SbemuProcess(ephemeral=ephemeral)
    try:
        ready = server.start()
        t = _clock(steps, "start", t)
        with ServiceBusAdministrationClient.from_connection_string(
            ready.admin_connection_string, connection_verify=str(ready.ca_file)
        ) as admin:
            admin.create_queue("fixture")
            t = _clock(steps, "create queue", t)
            with ServiceBusClient.from_connection_string(ready.connection_string) as client:
                with client.get_queue_sender("fixture") as sender:
                    sender.send_messages(ServiceBusMessage(b"x"))
                t = _clock(steps, "send (SDK open, send, close)", t)
                with client.get_queue_receiver("fixture", max_wait_time=10) as receiver:
                    (msg,) = receiver.receive_messages(max_message_count=1)
                    t = _clock(steps, "receive (SDK open, receive)", t)
                    receiver.complete_message(msg)
                    t = _clock(steps, "complete", t)
            # the SDK's own link and connection close (about 0.5 s each here, against the
            # in-memory forwarder as well: not the server's)
            t = _clock(steps, "close SDK clients", t)
            admin.delete_queue("fixture")
            t = _clock(steps, "delete queue", t)
        assert server.stop() == 0
        _clock(steps, "stop", t)
    finally:
        server.cleanup()
    _clock(steps, "total", t_all)


def sdk_sync(conn: str, count: int, size: int) -> tuple[float, float]:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    body = b"x" * size
    with ServiceBusClient.from_connection_string(conn) as client:
        t0 = time.perf_counter()
        with client.get_queue_sender(QUEUE) as sender:
            left = count
            while left:
                batch = sender.create_message_batch()
                while left:
                    try:
                        batch.add_message(ServiceBusMessage(body))
                    except ValueError:  # the batch is full
                        break
                    left -= 1
                sender.send_messages(batch)
        send_rate = count / (time.perf_counter() - t0)
        got = 0
        t0 = time.perf_counter()
        with client.get_queue_receiver(QUEUE, prefetch_count=300, max_wait_time=10) as receiver:
            while got < count:
                msgs = receiver.receive_messages(max_message_count=300, max_wait_time=10)
                if not msgs:
                    raise RuntimeError(f"sync receive stalled at {got}/{count}")
                for msg in msgs:
                    receiver.complete_message(msg)
                got += len(msgs)
        return send_rate, count / (time.perf_counter() - t0)


async def _sdk_async(conn: str, count: int, size: int) -> tuple[float, float]:
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.aio import ServiceBusClient

    body = b"x" * size
    async with ServiceBusClient.from_connection_string(conn) as client:
        t0 = time.perf_counter()
        async with client.get_queue_sender(QUEUE) as sender:
            left = count
            while left:
                batch = await sender.create_message_batch()
                while left:
                    try:
                        batch.add_message(ServiceBusMessage(body))
                    except ValueError:
                        break
                    left -= 1
                await sender.send_messages(batch)
        send_rate = count / (time.perf_counter() - t0)
        got = 0
        t0 = time.perf_counter()
        async with client.get_queue_receiver(
            QUEUE, prefetch_count=300, max_wait_time=10
        ) as receiver:
            while got < count:
                msgs = await receiver.receive_messages(max_message_count=300, max_wait_time=10)
                if not msgs:
                    raise RuntimeError(f"async receive stalled at {got}/{count}")
                for msg in msgs:
                    await receiver.complete_message(msg)
                got += len(msgs)
        return send_rate, count / (time.perf_counter() - t0)


def sdk_async(conn: str, count: int, size: int) -> tuple[float, float]:
    return asyncio.run(_sdk_async(conn, count, size))


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):>9.0f}" if values else "        -"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds [5]")
    parser.add_argument("--count", type=int, default=2000, help="messages per SDK phase [2000]")
    parser.add_argument("--size", type=int, default=1024, help="body bytes [1024]")
    args = parser.parse_args(argv)
    if not (NODE_DIR / "node_modules" / "rhea").exists() or not FORWARDER.exists():
        raise SystemExit("bench-sdk: run `make bench-sdk` (installs rhea into bench/node)")

    steps: dict[str, dict[str, list[float]]] = {"durable": {}, "ephemeral": {}}
    for rnd in range(args.rounds):
        for mode in ("durable", "ephemeral") if rnd % 2 == 0 else ("ephemeral", "durable"):
            fixture_round_trip(mode == "ephemeral", steps[mode])
        print(f"  fixture round {rnd + 1}: durable {steps['durable']['total'][-1]:.0f} ms, "
              f"ephemeral {steps['ephemeral']['total'][-1]:.0f} ms", flush=True)  # fmt: skip
    print("\nfixture round trip, medians (ms)      durable  ephemeral")
    for name in steps["durable"]:
        print(f"  {name:<32} {_median(steps['durable'][name])} {_median(steps['ephemeral'][name])}")

    rates: dict[str, list[float]] = {}
    durable = SbemuProcess()
    ephemeral = SbemuProcess(ephemeral=True)
    floor = Forwarder()
    try:
        targets: dict[str, Callable[[], str]] = {}
        targets["sbemu durable"] = lambda: durable.ready.connection_string  # type: ignore[union-attr]
        targets["sbemu ephemeral"] = lambda: ephemeral.ready.connection_string  # type: ignore[union-attr]
        targets["SDK ceiling (forwarder)"] = lambda: (
            f"Endpoint=sb://localhost:{floor.port};SharedAccessKeyName=k;SharedAccessKey=v;"
            "UseDevelopmentEmulator=true;"
        )
        durable.start()
        ephemeral.start()
        floor.start()
        for rnd in range(args.rounds):
            names = list(targets) if rnd % 2 == 0 else list(reversed(targets))
            for name in names:
                for flavour, run in (("sync", sdk_sync), ("async", sdk_async)):
                    send, receive = run(targets[name](), args.count, args.size)
                    rates.setdefault(f"{name}|{flavour}|send", []).append(send)
                    rates.setdefault(f"{name}|{flavour}|receive", []).append(receive)
                    print(f"  round {rnd + 1} {name:<24} {flavour:<5} send {send:>7.0f} msg/s,"
                          f" receive+complete {receive:>7.0f} msg/s", flush=True)  # fmt: skip
    finally:
        floor.stop()
        durable.cleanup()
        ephemeral.cleanup()
    print(f"\nPython SDK rates, medians of {args.rounds} rounds (msg/s, {args.size} B)"
          "   sync send  sync recv  async send  async recv")  # fmt: skip
    for name in targets:
        cells = [_median(rates[f"{name}|{f}|{k}"]) for f in ("sync", "async")
                 for k in ("send", "receive")]  # fmt: skip
        print(f"  {name:<50}" + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
