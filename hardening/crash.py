"""Crash consistency: kill -9 at random moments under load, restart, check the invariants.

Workload (azure-servicebus, retries off so a send is never silently repeated): sends to a
queue, a partitioned queue (random partition keys), a session queue and a topic with two
subscriptions; scheduled messages; peek-lock receivers that complete, abandon or dead-letter;
a session receiver; transactions (proton) that send and complete together, committed or
aborted; a forwarding chain cfa -> cfb -> cfc (hardening/crashtx.py). After each kill the
forwarding chain's stores are checked as the kill left them (every message in exactly one
place), then the server restarts on the same data directory and:

- every acknowledged send is present exactly once per receivable copy (queue, or each
  subscription; main queue or dead-letter queue), unless its completion was confirmed;
- nothing whose completion was confirmed comes back;
- a message confirmed dead-lettered is in the dead-letter queue;
- no message id appears twice in one view; delivery counts never go down;
- a committed transaction is all there, an aborted or undischarged one none of it, one whose
  outcome the kill hid all or none;
- the partition logs agree: contiguous offsets, one `enqueued`/`scheduled` record per
  acknowledged send and view (at most one per hop of the forwarding chain, and none for an
  uncommitted transaction), a `completed` record for every confirmed completion;
- Spark's count-once: at the end, the partition logs are exported (`sbemu export-logs`, the files
  the Spark jobs read) and every acknowledged send is counted exactly once there.

    python -m hardening.crash --kills 60        # make crash-test
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import Server, make_config, queue_def
from .crashtx import (
    CHAIN,
    TX_QUEUE,
    TX_SOURCE,
    run_transactions,
    verify_forwarding_at_rest,
    verify_transactions,
)

QUEUES = ["cq", "cpq", "csq", TX_SOURCE, CHAIN[0]]  # what the SDK senders send to
TOPIC, SUBS = "ct", ["s1", "s2"]


def crash_config() -> dict[str, Any]:
    return make_config(
        [
            queue_def("cq", MaxDeliveryCount=100),
            queue_def("cpq", MaxDeliveryCount=100, EnablePartitioning=True),
            queue_def("csq", MaxDeliveryCount=100, RequiresSession=True),
            queue_def(TX_QUEUE),
            queue_def(TX_SOURCE, MaxDeliveryCount=100),
            queue_def(CHAIN[0], ForwardTo=CHAIN[1]),
            queue_def(CHAIN[1], ForwardTo=CHAIN[2], EnablePartitioning=True),
            queue_def(CHAIN[2], MaxDeliveryCount=100),
        ],
        topics=[
            {
                "Name": TOPIC,
                "Properties": {"EnablePartitioning": True},
                "Subscriptions": [
                    {"Name": s, "Properties": {"MaxDeliveryCount": 100}} for s in SUBS
                ],
            }
        ],
    )


def views_of(entity: str) -> list[str]:
    """Receivable copies of a message sent to `entity`."""
    if entity == CHAIN[0]:
        return [CHAIN[-1]]  # where the forwarding chain ends
    return [f"{TOPIC}/subscriptions/{s}" for s in SUBS] if entity == TOPIC else [entity]


@dataclass
class Ledger:
    """What the clients were told (only confirmed facts go in)."""

    acked: dict[str, str] = field(default_factory=dict)  # message id -> entity
    completed: set[tuple[str, str]] = field(default_factory=set)  # (view, id)
    # completions asked for but not confirmed (the kill came first): may or may not have happened
    in_doubt: set[tuple[str, str]] = field(default_factory=set)
    dead_lettered: set[tuple[str, str]] = field(default_factory=set)
    max_delivery: dict[tuple[str, str], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ops: Counter[str] = field(default_factory=Counter)
    # transactions: sends of aborted/undischarged ones (never stored); the sends of each one
    # whose discharge the kill left unanswered (all or none); the one being discharged
    tx_never: set[str] = field(default_factory=set)
    tx_doubt: list[list[str]] = field(default_factory=list)
    tx_open: tuple[list[str], list[tuple[str, str]], str] | None = None


def _sender(conn_str: str, ledger: Ledger, stop: threading.Event, rng: random.Random) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    try:
        with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
            senders = {e: client.get_queue_sender(e) for e in QUEUES}
            senders[TOPIC] = client.get_topic_sender(TOPIC)
            while not stop.is_set():
                entity = rng.choice(QUEUES + [TOPIC])
                batch = []
                for _ in range(rng.randint(1, 5)):
                    mid = uuid.uuid4().hex
                    kw: dict[str, Any] = {"message_id": mid}
                    if entity == "csq":
                        kw["session_id"] = f"s{rng.randint(0, 3)}"
                    elif entity == "cpq":
                        kw["partition_key"] = f"k{rng.randint(0, 40)}"
                    batch.append(ServiceBusMessage(f"crash-{mid}", **kw))
                if rng.random() < 0.15 and entity != "csq":
                    when = __import__("datetime").datetime.now(
                        __import__("datetime").timezone.utc
                    ) + __import__("datetime").timedelta(seconds=rng.uniform(0.2, 2))
                    senders[entity].schedule_messages(batch, when)
                    kind = "scheduled"
                else:
                    senders[entity].send_messages(batch if len(batch) > 1 else batch[0])
                    kind = "sent"
                with ledger.lock:
                    for m in batch:
                        ledger.acked[str(m.message_id)] = entity
                    ledger.ops[kind] += len(batch)
    except Exception:  # the kill: expected; everything not confirmed is in doubt
        return


def _receiver(
    conn_str: str, view: str, ledger: Ledger, stop: threading.Event, rng: random.Random
) -> None:
    from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient

    try:
        with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
            while not stop.is_set():
                if view == "csq":
                    rcv = client.get_queue_receiver(
                        "csq", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1
                    )
                elif view.startswith(TOPIC):
                    rcv = client.get_subscription_receiver(
                        TOPIC, view.rsplit("/", 1)[1], max_wait_time=1
                    )
                else:
                    rcv = client.get_queue_receiver(view, max_wait_time=1)
                with rcv:
                    for _ in range(20):
                        if stop.is_set():
                            return
                        msgs = rcv.receive_messages(max_message_count=10, max_wait_time=0.5)
                        if not msgs and view == "csq":
                            break
                        for msg in msgs:
                            key = (view, str(msg.message_id))
                            with ledger.lock:
                                ledger.max_delivery[key] = max(
                                    ledger.max_delivery.get(key, 0), msg.delivery_count or 0
                                )
                            r = rng.random()
                            if r < 0.6:
                                with ledger.lock:
                                    ledger.in_doubt.add(key)
                                rcv.complete_message(msg)
                                with ledger.lock:
                                    ledger.completed.add(key)
                                    ledger.ops["completed"] += 1
                            elif r < 0.85:
                                rcv.abandon_message(msg)
                                ledger.ops["abandoned"] += 1
                            else:
                                rcv.dead_letter_message(msg, reason="crash-test")
                                with ledger.lock:
                                    ledger.dead_lettered.add(key)
                                    ledger.ops["dead-lettered"] += 1
    except Exception:
        return


def browse(client: Any, view: str, dlq: bool) -> list[Any]:
    """Every message of a view (peek, paging by sequence number)."""
    from azure.servicebus import ServiceBusSubQueue

    sub = ServiceBusSubQueue.DEAD_LETTER if dlq else None
    out: list[Any] = []
    if True:
        if view.startswith(TOPIC):
            rcv = client.get_subscription_receiver(TOPIC, view.rsplit("/", 1)[1], sub_queue=sub)
        elif view == "csq" and not dlq:
            return browse_sessions(client)
        else:
            rcv = client.get_queue_receiver(view, sub_queue=sub)
        with rcv:
            seq = 0
            while True:
                page = rcv.peek_messages(max_message_count=250, sequence_number=seq)
                if not page:
                    return out
                out.extend(page)
                seq = max(m.sequence_number for m in page) + 1


def browse_sessions(client: Any) -> list[Any]:
    out: list[Any] = []
    for sid in (f"s{i}" for i in range(4)):
        with client.get_queue_receiver("csq", session_id=sid, max_wait_time=2) as rcv:
            seq = 0
            while True:
                page = rcv.peek_messages(max_message_count=250, sequence_number=seq)
                if not page:
                    break
                out.extend(page)
                seq = max(m.sequence_number for m in page) + 1
    return out


def verify(server: Server, ledger: Ledger) -> list[str]:
    """Check the invariants against the restarted server; returns violations."""
    problems: list[str] = []
    from azure.servicebus import ServiceBusClient

    present: dict[tuple[str, str], list[tuple[bool, int]]] = defaultdict(list)
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=3) as client:
        for entity in QUEUES + [TOPIC, TX_QUEUE]:
            for view in views_of(entity):
                for dlq in (False, True):
                    for m in browse(client, view, dlq):
                        present[(view, str(m.message_id))].append((dlq, m.delivery_count or 0))
    with ledger.lock:
        acked = dict(ledger.acked)
        completed = set(ledger.completed)
        in_doubt = set(ledger.in_doubt) - completed
        dead = set(ledger.dead_lettered)
        max_delivery = dict(ledger.max_delivery)
    for key, copies in present.items():
        if len(copies) > 1:
            problems.append(f"{key}: {len(copies)} copies")
        if key in completed:
            problems.append(f"{key}: completed (confirmed) but back")
        seen = max_delivery.get(key)
        if seen is not None and copies and max(c[1] for c in copies) < seen:
            problems.append(f"{key}: delivery count went down ({seen} -> {copies[0][1]})")
    for mid, entity in acked.items():
        for view in views_of(entity):
            key = (view, mid)
            if key in completed:
                continue
            if not present.get(key) and key in in_doubt:
                continue  # its completion was asked for and may have committed
            if not present.get(key) and entity == CHAIN[0]:
                continue  # still on its way along the chain: checked in the stores
            if not present.get(key):
                problems.append(f"{key}: acknowledged send lost")
            elif key in dead and not any(d for d, _ in present[key]):
                problems.append(f"{key}: confirmed dead-lettered but not in the DLQ")
    problems += verify_transactions(present, ledger)
    problems += verify_logs(server.data_dir, acked, completed, ledger)
    return problems


def verify_logs(
    data_dir: Path,
    acked: dict[str, str],
    completed: set[tuple[str, str]],
    ledger: Ledger | None = None,
) -> list[str]:
    from sbemu.logs import reader as reporting
    from sbemu.partitions.records import decode_log

    problems: list[str] = []
    enq: Counter[tuple[str, str]] = Counter()
    done: set[tuple[str, str]] = set()
    for part in reporting.discover_partitions(data_dir):
        start, end = reporting.log_start(part.path), reporting.log_end(part.path)
        expect = start
        for values in reporting.iter_log(part.path, start, end):
            for rawv in values:
                d = decode_log(rawv)
                if d["offset"] != expect:
                    problems.append(f"{part.key}: log offset {d['offset']} where {expect} expected")
                expect = d["offset"] + 1
                mid = d.get("message_id")
                if mid is None:
                    continue
                entity = d["entity"]
                queue = d["queue"]
                view = entity if queue == "main" else f"{entity}/{queue}"
                if d["event"] in ("enqueued", "scheduled") and not queue.endswith(
                    "deadletterqueue"
                ):
                    enq[(view, str(mid))] += 1
                elif d["event"] == "completed":
                    done.add((view, str(mid)))
    reporting.close_all()
    for mid, entity in acked.items():
        if entity == CHAIN[0]:  # one record at the source, at most one per later hop
            for hop, view in enumerate(CHAIN):
                n = enq.get((view, mid), 0)
                if n > 1 or (hop == 0 and n != 1):
                    problems.append(f"log: {(view, mid)} has {n} enqueued records")
            continue
        for view in views_of(entity):
            n = enq.get((view, mid), 0)
            if n != 1:
                problems.append(f"log: {(view, mid)} has {n} enqueued/scheduled records")
    if ledger is not None:
        with ledger.lock:
            never = set(ledger.tx_never)
        for mid in never:
            if enq.get((TX_QUEUE, mid)):
                problems.append(f"log: {mid} of an uncommitted transaction was logged")
    for key in completed:
        if key not in done:
            problems.append(f"log: confirmed completion of {key} not in the log")
    return problems


def export_and_count(
    data_dir: Path, export_dir: Path, acked: dict[str, str], ledger: Ledger
) -> tuple[list[str], int]:
    """Spark's count-once: export the partition logs (the exporter resumes where its last
    pass stopped, across the kills) and count the exported records as the Spark jobs would:
    each partition's offsets once and contiguous, every acknowledged send enqueued once per
    view, nothing of an uncommitted transaction. Returns (problems, records exported); no
    problems and 0 records without pyarrow (the spark extra)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return [], 0
    from sbemu.logs.export import export_logs
    from sbemu.logs.reader import close_all

    export_logs(data_dir, export_dir)
    close_all()  # (py-lmdb opens a path once per process: the stores are read directly next)
    problems: list[str] = []
    enq: Counter[tuple[str, str]] = Counter()
    records = 0
    for part_dir in sorted({p.parent for p in export_dir.rglob("*.parquet")}):
        offsets: list[int] = []
        for seg in sorted(part_dir.glob("*.parquet")):
            cols = pq.read_table(
                seg, columns=["offset", "entity", "queue", "event", "message_id"]
            ).to_pydict()
            offsets += cols["offset"]
            for entity, queue, event, mid in zip(
                cols["entity"], cols["queue"], cols["event"], cols["message_id"], strict=True
            ):
                if (
                    mid is not None
                    and event in ("enqueued", "scheduled")
                    and not queue.endswith("deadletterqueue")
                ):
                    view = entity if queue == "main" else f"{entity}/{queue}"
                    enq[(view, mid)] += 1
        records += len(offsets)
        if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            problems.append(f"export: {part_dir.name} offsets not each once and contiguous")
    for mid, entity in acked.items():
        views = [CHAIN[0]] if entity == CHAIN[0] else views_of(entity)
        for view in views:
            if enq.get((view, mid), 0) != 1:
                problems.append(f"export: {(view, mid)} counted {enq.get((view, mid), 0)} times")
    with ledger.lock:
        never = set(ledger.tx_never)
    problems += [
        f"export: {mid} of an uncommitted transaction counted"
        for mid in never
        if enq.get((TX_QUEUE, mid))
    ]
    return problems, records


def run(
    workdir: Path, kills: int, seed: int = 15, log: Any = print, sigterm: bool = False
) -> dict[str, Any]:
    """`kills` rounds of load then kill -9 (or SIGTERM with `sigterm`: the drain must exit 0
    within a few seconds) and a check of the invariants after each restart."""
    rng = random.Random(seed)
    shutil.rmtree(workdir, ignore_errors=True)
    server = Server(workdir, crash_config(), env={"SBEMU_KEEP_LOGS": "1"})
    export_dir = workdir / "export"
    exported = 0
    ledger = Ledger()
    problems: list[str] = []
    stop_times: list[float] = []
    t0 = time.monotonic()
    done = 0
    try:
        for round_no in range(1, kills + 1):
            server.start()
            stop = threading.Event()
            views = ["cq", "cpq", "csq", f"{TOPIC}/subscriptions/s1", f"{TOPIC}/subscriptions/s2"]
            threads = [
                threading.Thread(
                    daemon=True,
                    target=_sender,
                    args=(server.conn_str, ledger, stop, random.Random(rng.random())),
                )
                for _ in range(2)
            ]
            threads += [
                threading.Thread(
                    daemon=True,
                    target=_receiver,
                    args=(server.conn_str, v, ledger, stop, random.Random(rng.random())),
                )
                for v in views + [CHAIN[-1]]
            ]
            threads.append(
                threading.Thread(
                    daemon=True,
                    target=run_transactions,
                    args=(server.port, ledger, stop, random.Random(rng.random())),
                )
            )
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.5, 3.0))
            deadline = time.monotonic() + 15
            while round_no == 1 and time.monotonic() < deadline:  # every kind ran before the
                with ledger.lock:  # first kill (the bounded test's 2 kills cover them too)
                    if ledger.ops["tx committed"] and CHAIN[0] in ledger.acked.values():
                        break
                time.sleep(0.1)
            if sigterm:
                t_term = time.monotonic()
                rc = server.stop(timeout=30)
                exit_s = time.monotonic() - t_term
                stop_times.append(exit_s)
                if rc != 0:
                    problems.append(f"kill {round_no}: SIGTERM exit code {rc}")
            else:
                server.kill()
            done += 1
            stop.set()
            t_kill = time.monotonic()
            for t in threads:  # clients of the dead process fail; a straggler cannot reach
                t.join(timeout=max(0.1, t_kill + 3 - time.monotonic()))  # the next port
            if not sigterm:  # the chain as the kill left it (server down, stores read directly)
                with ledger.lock:
                    acked_now = dict(ledger.acked)
                    settled = ledger.completed | ledger.in_doubt
                found_rest = verify_forwarding_at_rest(server.data_dir, acked_now, settled)
                problems += [f"kill {round_no}: {p}" for p in found_rest]
                for p in found_rest[:10]:
                    log(f"crash:   kill {round_no}: {p}")
            t1 = time.monotonic()
            server.start()
            t2 = time.monotonic()
            found = verify(server, ledger)
            t3 = time.monotonic()
            server.stop()
            with ledger.lock:
                acked_now = dict(ledger.acked)
            found_export, exported = export_and_count(
                server.data_dir, export_dir, acked_now, ledger
            )
            found += found_export
            timing = f"(join {t1 - t_kill:.1f} s, start {t2 - t1:.1f} s, verify {t3 - t2:.1f} s)"
            problems += [f"kill {round_no}: {p}" for p in found]
            for p in found[:10]:
                log(f"crash:   kill {round_no}: {p}")
            log(
                f"crash: kill {round_no}/{kills}: acked {len(ledger.acked)}, "
                f"completed {len(ledger.completed)}, problems {len(found)} {timing}"
            )
            if len(problems) > 50:
                break
    finally:
        server.kill()
    tracebacks = server.tracebacks()
    return {
        "kills": done,
        "acked": len(ledger.acked),
        "completed": len(ledger.completed),
        "dead_lettered": len(ledger.dead_lettered),
        "ops": dict(ledger.ops),
        "exported_records": exported,
        "forwarded_acked": sum(1 for e in ledger.acked.values() if e == CHAIN[0]),
        "tx_in_doubt": len(ledger.tx_doubt),
        "problems": problems,
        "tracebacks": tracebacks,
        "seconds": time.monotonic() - t0,
        "sigterm_exit_seconds": stop_times,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hardening.crash")
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--workdir", default=".hardening/crash")
    parser.add_argument("--sigterm", action="store_true", help="SIGTERM (drain) instead of kill -9")
    args = parser.parse_args(argv)
    r = run(Path(args.workdir), args.kills, args.seed, sigterm=args.sigterm)
    if args.sigterm:
        print(f"crash: SIGTERM under load: exit took max {max(r['sigterm_exit_seconds']):.2f} s")
    how = "SIGTERM" if args.sigterm else "kill -9"
    print(
        f"crash: {r['kills']} {how} points in {r['seconds']:.0f} s; acknowledged sends "
        f"{r['acked']}, confirmed completions {r['completed']}, dead-letters "
        f"{r['dead_lettered']}; operations {r['ops']}"
    )
    print(
        f"crash: forwarding chain cfa -> cfb -> cfc: {r['forwarded_acked']} acknowledged sends "
        f"checked in the stores at every kill; transactions: {r['ops'].get('tx committed', 0)} "
        f"committed, {r['ops'].get('tx aborted', 0)} aborted, {r['tx_in_doubt']} cut by a kill "
        f"mid-discharge; exported log records counted once: {r['exported_records']}"
    )
    lost = sum(1 for p in r["problems"] if "lost" in p)
    dup = sum(
        1
        for p in r["problems"]
        if "copies" in p or "places" in p or "counted" in p or "records" in p
    )
    print(f"crash: duplicated {dup}")
    print(
        f"crash: lost {lost}, invariant violations {len(r['problems'])}, "
        f"tracebacks {len(r['tracebacks'])}"
    )
    for p in r["problems"][:50]:
        print("  -", p)
    return 1 if r["problems"] or r["tracebacks"] else 0


if __name__ == "__main__":
    sys.exit(main())
