"""The transactional and auto-forwarding parts of the crash test (see hardening/crash.py).

Transactions (python-qpid-proton's transaction API: the Python Service Bus SDK has none): a
client declares a transaction, sends 1-4 messages to `txq` and receives and accepts up to 2
messages of `txc` in it, then commits (4 in 5) or aborts. What it was told goes in the ledger:

- committed (the discharge was accepted): its sends are acknowledged, its accepts completed;
- aborted, or never discharged when the kill came: none of its sends may ever appear;
- discharged but unanswered at the kill: all of its sends or none (`tx_doubt`), and its
  accepts may or may not have happened.

Forwarding: `cfa` forwards to `cfb`, which forwards to `cfc` (receivers complete, abandon and
dead-letter there). After each kill, before the restart, the stores of the three queues are
read directly: every acknowledged message sent to `cfa` is in exactly one place, counting a
source copy whose marker is already at its destination as gone (the forwarder deletes it on
restart), unless its completion at `cfc` was confirmed (or may have happened).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .common import KEY, KEY_NAME, NAMESPACE

TX_QUEUE, TX_SOURCE = "txq", "txc"
CHAIN = ["cfa", "cfb", "cfc"]
TX_TIMEOUT = 1.0  # seconds a transaction waits for messages to accept before its discharge


def run_transactions(port: int, ledger: Any, stop: threading.Event, rng: Any) -> None:
    """Transactions one after another on one connection until `stop` or the kill."""
    from proton import Message
    from proton.handlers import MessagingHandler, TransactionHandler
    from proton.reactor import Container

    class _Timer:
        def __init__(self, fn: Any) -> None:
            self.fn = fn

        def on_timer_task(self, event: Any) -> None:
            self.fn(event)

    class TxWorker(MessagingHandler, TransactionHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
            self.conn: Any = None
            self.sender: Any = None
            self.receiver: Any = None
            self.txn: Any = None
            self.sent: list[str] = []
            self.accepted: list[str] = []
            self.want = 0
            self.settled = 0
            self.phase = "idle"  # idle, open (declared), discharging
            self.timer: Any = None

        def on_start(self, event: Any) -> None:
            c = event.container
            self.conn = c.connect(
                f"amqp://{KEY_NAME}:{KEY}@127.0.0.1:{port}", allowed_mechs="PLAIN"
            )
            self.sender = c.create_sender(self.conn, TX_QUEUE)
            self.receiver = c.create_receiver(self.conn, TX_SOURCE)
            self._next(event)

        def _next(self, event: Any) -> None:
            if stop.is_set():
                self.conn.close()
                return
            self.sent, self.accepted, self.settled = [], [], 0
            self.want = rng.randint(0, 2)
            self.phase = "declaring"
            event.container.declare_transaction(self.conn, handler=self)

        def on_transaction_declared(self, event: Any) -> None:
            self.txn = event.transaction
            self.phase = "open"
            for _ in range(rng.randint(1, 4)):
                mid = uuid.uuid4().hex
                self.sent.append(mid)
                self.txn.send(self.sender, Message(id=mid, body=f"tx-{mid}", durable=True))
            if self.want:
                self.receiver.flow(self.want)
            self.timer = event.container.schedule(TX_TIMEOUT, _Timer(self._give_up_waiting))
            self._maybe_discharge()

        def _give_up_waiting(self, event: Any) -> None:
            self.want = len(self.accepted)
            self._maybe_discharge()

        def on_settled(self, event: Any) -> None:
            if event.link.is_sender and event.link.name == self.sender.name:
                self.settled += 1
                self._maybe_discharge()

        def on_message(self, event: Any) -> None:
            if self.phase != "open" or len(self.accepted) >= self.want:
                event.delivery.update(event.delivery.RELEASED)  # credit left over: not ours
                event.delivery.settle()
                return
            self.accepted.append(str(event.message.id))
            self.txn.accept(event.delivery)
            self._maybe_discharge()

        def _maybe_discharge(self) -> None:
            if self.phase != "open" or self.settled < len(self.sent):
                return
            if len(self.accepted) < self.want:
                return
            if self.timer is not None:
                self.timer.cancel()
            self.phase = "discharging"
            commit = rng.random() < 0.8
            with ledger.lock:
                ledger.tx_open = (
                    list(self.sent),
                    [(TX_SOURCE, m) for m in self.accepted],
                    "commit" if commit else "abort",
                )
            if commit:
                self.txn.commit()
            else:
                self.txn.abort()

        def on_transaction_committed(self, event: Any) -> None:
            with ledger.lock:
                for mid in self.sent:
                    ledger.acked[mid] = TX_QUEUE
                for key in self.accepted:
                    ledger.completed.add((TX_SOURCE, key))
                ledger.tx_open = None
                ledger.ops["tx committed"] += 1
                ledger.ops["tx sends"] += len(self.sent)
                ledger.ops["tx completes"] += len(self.accepted)
            self._next(event)

        def on_transaction_aborted(self, event: Any) -> None:
            with ledger.lock:
                ledger.tx_never.update(self.sent)
                ledger.tx_open = None
                ledger.ops["tx aborted"] += 1
            self._next(event)

        def on_transaction_commit_failed(self, event: Any) -> None:
            with ledger.lock:  # rolled back by the server: none of it
                ledger.tx_never.update(self.sent)
                ledger.tx_open = None
                ledger.ops["tx rolled back"] += 1
            self._next(event)

        def on_transaction_declare_failed(self, event: Any) -> None:
            self.conn.close()

        def on_transport_error(self, event: Any) -> None:
            self._lost()

        def on_disconnected(self, event: Any) -> None:
            self._lost()

        def _lost(self) -> None:
            """The kill: an open transaction is rolled back (none of it); one whose discharge
            was sent may have committed (all of it or none)."""
            with ledger.lock:
                if ledger.tx_open is not None:
                    sent, accepted, _how = ledger.tx_open
                    ledger.tx_doubt.append(sent)
                    ledger.in_doubt.update(accepted)
                    ledger.tx_open = None
                elif self.phase in ("open", "declaring"):
                    ledger.tx_never.update(self.sent)
            self.phase = "lost"
            if self.conn is not None:
                self.conn.close()
            if self.timer is not None:
                self.timer.cancel()

    try:
        Container(TxWorker()).run()
    except Exception:  # the kill
        return


def verify_transactions(present: dict[tuple[str, str], Any], ledger: Any) -> list[str]:
    """Atomicity of transactions after a restart (see the module docstring)."""
    problems: list[str] = []
    with ledger.lock:
        never = set(ledger.tx_never)
        doubt = [list(s) for s in ledger.tx_doubt]
    for mid in never:
        if present.get((TX_QUEUE, mid)):
            problems.append(f"tx: {mid} of an uncommitted transaction is stored")
    for sent in doubt:
        there = [m for m in sent if present.get((TX_QUEUE, m))]
        if there and len(there) != len(sent):
            problems.append(f"tx: {len(there)} of {len(sent)} sends of one transaction stored")
    return problems


def verify_forwarding_at_rest(
    data_dir: Path, acked: dict[str, str], settled: set[tuple[str, str]]
) -> list[str]:
    """Read the chain's stores of a killed server: each acknowledged message sent to `cfa`
    is in exactly one place (see the module docstring). `settled`: (view, id) completed or
    possibly completed at the end of the chain."""
    from sbemu.partitions.records import decode_message
    from sbemu.partitions.store import PartitionStore

    ns = quote(NAMESPACE.lower(), safe="")
    copies: Counter[str] = Counter()
    sources: list[tuple[bytes, str]] = []
    markers: set[bytes] = set()
    for name in CHAIN:
        base = data_dir / ns / name
        for part in sorted(base.glob("partition-*")):
            pid = int(part.name.split("-")[1])
            store = PartitionStore(str(part), map_size=64 << 20)
            try:
                markers.update(store.forward_markers())
                for queue, raws in store.load().queues.items():
                    for raw in raws:
                        rec = decode_message(raw)
                        mid = str(rec.message_id)
                        key = (
                            f"{NAMESPACE}/{name}/{pid}/{queue}/".encode()
                            + rec.sequence_number.to_bytes(8, "big")
                        )
                        sources.append((key, mid))
            finally:
                store.close()
    for key, mid in sources:
        if key not in markers:  # a copy whose marker is at the destination is already gone
            copies[mid] += 1
    problems: list[str] = []
    for mid, entity in acked.items():
        if entity != CHAIN[0]:
            continue
        n = copies.get(mid, 0)
        if n > 1:
            problems.append(f"forwarding: {mid} is in {n} places")
        elif n == 0 and (CHAIN[-1], mid) not in settled:
            problems.append(f"forwarding: acknowledged send {mid} lost along the chain")
    return problems
