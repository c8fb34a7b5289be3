"""kill -9 while large batches are taken in over several loop passes: all or none of each.

A batch of more than 500 messages is scanned a slice per event-loop pass and staged whole in
the last pass (sbemu.protocol.intake). A kill between those passes, or during the commit, must
leave each batch either whole or absent, and every acknowledged batch whole, on a plain and on a
16-partition queue."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hardening.common import Server, drain_ids, make_config, queue_def

pytest.importorskip("azure.servicebus")

BATCH = 1200  # > 500: taken in three scan passes, then staged in one
KILLS = 2
QUEUES = ["bq", "bpq"]


def _sender(conn_str: str, queue: str, acked: list[str], tried: list[str], stop: Any) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    n = 0
    try:
        with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
            with client.get_queue_sender(queue) as sender:
                while not stop.is_set():
                    batch_id = f"{queue}-{time.monotonic_ns()}-{n}"
                    n += 1
                    batch = sender.create_message_batch()
                    for i in range(BATCH):
                        batch.add_message(ServiceBusMessage(b"x", message_id=f"{batch_id}.{i}"))
                    tried.append(batch_id)
                    sender.send_messages(batch)
                    acked.append(batch_id)
    except Exception:  # the kill: the batch in flight is in doubt (all or none)
        pass


def test_kill9_during_multi_pass_batches_keeps_each_batch_whole(tmp_path: Path) -> None:
    config = make_config([queue_def("bq"), queue_def("bpq", EnablePartitioning=True)])
    server = Server(tmp_path / "srv", config)
    rng = random.Random(11)
    acked: dict[str, list[str]] = {q: [] for q in QUEUES}
    tried: dict[str, list[str]] = {q: [] for q in QUEUES}
    try:
        for _ in range(KILLS):
            server.start()
            stop = threading.Event()
            threads = [
                threading.Thread(
                    target=_sender,
                    args=(server.conn_str, q, acked[q], tried[q], stop),
                    daemon=True,
                )
                for q in QUEUES
            ]
            before = {q: len(acked[q]) for q in QUEUES}
            for t in threads:
                t.start()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                len(acked[q]) < before[q] + 2 for q in QUEUES
            ):
                time.sleep(0.02)  # polls the senders' progress: no event to wait on
            assert all(len(acked[q]) >= before[q] + 2 for q in QUEUES), (acked, server.stderr())
            time.sleep(rng.uniform(0.0, 0.05))  # a random point in the next batch's intake
            server.kill()
            stop.set()
            for t in threads:
                t.join(timeout=30)
        server.start()
        for q in QUEUES:
            ids = drain_ids(server.conn_str, q)
            assert len(ids) == len(set(ids)), f"{q}: duplicates"
            per_batch = Counter(mid.rsplit(".", 1)[0] for mid in ids)
            partial = {b: c for b, c in per_batch.items() if c != BATCH}
            assert not partial, f"{q}: batches stored in part: {partial}"
            missing = [b for b in acked[q] if per_batch.get(b) != BATCH]
            assert not missing, f"{q}: acknowledged batches missing: {missing}"
            assert set(per_batch) <= set(tried[q])
        assert server.tracebacks() == []
    finally:
        server.kill()
