"""Local transactions over the AMQP coordinator, driven by python-qpid-proton's transaction API
(the Python Service Bus SDK has none); results are checked with the azure-servicebus SDK.

Covered: committed sends become visible, staged sends are invisible before commit, aborted sends
are dropped, transactional accept + commit removes a message and + abort leaves it, a connection
closed without a discharge rolls back, and the partition-key rules of partitioned entities
[SB partitioning P15, P16]: one partition key per transaction (SessionId on session-aware
entities), a key-less message or a second key/session is refused (amqp:not-allowed) and dooms
the transaction, whose commit is then rejected with amqp:transaction:rollback and stores nothing.
A non-partitioned session-aware queue accepts several sessions in one transaction.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from integration_support import (
    KEY,
    KEY_NAME,
    NAMESPACE,
    PARTITIONS,
    body_text,
    partition_of,
    queue_def,
    receive_n,
)
from proton import Message, symbol
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

from sbemu.partitions.keys import partition_for_key

SBEMU_QUEUES = [
    queue_def("tx-commit"),
    queue_def("tx-invisible"),
    queue_def("tx-abort"),
    queue_def("tx-accept-commit"),
    queue_def("tx-accept-abort"),
    queue_def("tx-close-send"),
    queue_def("tx-close-accept"),
    queue_def("tx-multi-a"),
    queue_def("tx-multi-b"),
    queue_def("tx-pq", partitioned=True),
    queue_def("tx-pq-bad", partitioned=True),
    queue_def("tx-pq-accept", partitioned=True),
    queue_def("tx-psq", partitioned=True, RequiresSession=True),
    queue_def("tx-psq-bad", partitioned=True, RequiresSession=True),
    queue_def("tx-sq", RequiresSession=True),
    queue_def("tx-atomic-send"),
    queue_def("tx-atomic-lock"),
    queue_def("tx-atomic-send2"),
    queue_def("tx-atomic-pq", partitioned=True),
]

RUN_TIMEOUT = 20.0  # seconds for one proton client run
PARTITION_KEY = symbol("x-opt-partition-key")


# ------------------------------------------------------------------------------- proton client


@dataclass
class TxPlan:
    """What one transactional proton client does.

    ``sends``: (queue, message) pairs sent in the transaction; ``receive_from``/``receive_count``:
    messages received (prefetch 0, credit given after declare) and accepted in the transaction;
    ``outcome``: "commit", "abort" or "close" (close the connection without a discharge);
    ``gate``: when set, the client waits for it before the discharge and sets ``staged`` once
    every send is settled and every accept issued.
    """

    sends: Sequence[tuple[str, Message]] = ()
    receive_from: str | None = None
    receive_count: int = 0
    outcome: str = "commit"
    gate: threading.Event | None = None
    staged: threading.Event = field(default_factory=threading.Event)


class _Timer:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        self.fn(event)


class TxClient(MessagingHandler, TransactionHandler):
    def __init__(self, url: str, plan: TxPlan) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        self.url = url
        self.plan = plan
        self.result: str | None = None
        self.rejected: list[Any] = []  # conditions of rejected transactional sends
        self.send_states: list[Any] = []  # remote state of each settled send
        self.discharge_condition: Any = None
        self.received: list[Message] = []
        self.accepted = 0
        self.settled_sends = 0
        self.txn: Any = None
        self.conn: Any = None
        self.senders: dict[str, Any] = {}
        self.receiver: Any = None
        self.declared = False
        self.discharged = False
        self.watchdog: Any = None

    # -- set-up
    def on_start(self, event: Any) -> None:
        container = event.container
        self.conn = container.connect(self.url, allowed_mechs="PLAIN")
        for queue, _ in self.plan.sends:
            if queue not in self.senders:
                self.senders[queue] = container.create_sender(self.conn, queue)
        if self.plan.receive_from:
            self.receiver = container.create_receiver(self.conn, self.plan.receive_from)
        container.declare_transaction(self.conn, handler=self)
        self.watchdog = container.schedule(RUN_TIMEOUT, _Timer(self._on_timeout))

    def _on_timeout(self, event: Any) -> None:
        if self.result is None:
            self.result = "timeout"
        self._close()

    def _close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()  # a pending task would keep the container running
        if self.conn is not None:
            self.conn.close()
        # Stop the container even if the peer never answers the close.
        for link in (*self.senders.values(), self.receiver):
            if link is not None:
                link.close()

    # -- the transaction
    def on_transaction_declared(self, event: Any) -> None:
        self.declared = True
        self.txn = event.transaction
        for queue, msg in self.plan.sends:
            self.txn.send(self.senders[queue], msg)
        if self.receiver is not None and self.plan.receive_count:
            self.receiver.flow(self.plan.receive_count)
        self._maybe_discharge(event)

    def on_transaction_declare_failed(self, event: Any) -> None:
        self.result = "declare-failed"
        self._close()

    def on_settled(self, event: Any) -> None:
        if event.link.is_sender:
            self.settled_sends += 1
            self.send_states.append(event.delivery.remote_state)
            self._maybe_discharge(event)

    def on_rejected(self, event: Any) -> None:
        self.rejected.append(event.delivery.remote.condition)

    def on_message(self, event: Any) -> None:
        self.received.append(event.message)
        self.txn.accept(event.delivery)
        self.accepted += 1
        self._maybe_discharge(event)

    def _maybe_discharge(self, event: Any) -> None:
        if self.discharged or self.txn is None:
            return
        if self.settled_sends < len(self.plan.sends) or self.accepted < self.plan.receive_count:
            return
        self.plan.staged.set()
        if self.plan.gate is not None and not self.plan.gate.is_set():
            event.container.schedule(0.05, _Timer(self._maybe_discharge))
            return
        self.discharged = True
        if self.plan.outcome == "commit":
            self.txn.commit()
        elif self.plan.outcome == "abort":
            self.txn.abort()
        else:  # "close": walk away with the transaction open
            self.result = "closed"
            self._close()

    def on_transaction_committed(self, event: Any) -> None:
        self.result = "committed"
        self._close()

    def on_transaction_aborted(self, event: Any) -> None:
        self.result = "aborted"
        self._close()

    def on_transaction_commit_failed(self, event: Any) -> None:
        self.result = "commit-failed"
        self.discharge_condition = event.delivery.remote.condition
        self._close()


def proton_url(server: Any) -> str:
    return f"amqp://{KEY_NAME}:{KEY}@127.0.0.1:{server.port}"


def start_tx(server: Any, plan: TxPlan) -> tuple[TxClient, threading.Thread]:
    client = TxClient(proton_url(server), plan)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            Container(client).run()
        except BaseException as exc:  # noqa: BLE001 - surfaced by finish_tx
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return client, thread


def finish_tx(client: TxClient, thread: threading.Thread) -> TxClient:
    thread.join(RUN_TIMEOUT + 10)
    assert not thread.is_alive(), "the proton client did not finish"
    assert not thread.errors, thread.errors  # type: ignore[attr-defined]
    return client


def run_tx(server: Any, plan: TxPlan) -> TxClient:
    return finish_tx(*start_tx(server, plan))


def msg(body: str, *, key: str | None = None, session: str | None = None, **kw: Any) -> Message:
    annotations = {PARTITION_KEY: key} if key is not None else None
    return Message(body=body, annotations=annotations, group_id=session, durable=True, **kw)


def bodies(messages: Sequence[Message]) -> list[str]:
    """Bodies of proton-received messages (the SDK sends data sections: bytes)."""
    out = []
    for m in messages:
        body: Any = m.body
        out.append(body if isinstance(body, str) else bytes(body).decode())
    return out


def condition_name(cond: Any) -> str:
    return str(cond.name) if cond is not None else ""


# ------------------------------------------------------------------------------- SDK side


@pytest.fixture(scope="module")
def sdk(server):
    with ServiceBusClient.from_connection_string(
        server.conn_str, retry_total=1, retry_backoff_factor=0.2
    ) as client:
        yield client


def peek_all(client: ServiceBusClient, queue: str, *, session_id: str | None = None) -> list:
    with client.get_queue_receiver(queue, session_id=session_id, max_wait_time=2) as receiver:
        return receiver.peek_messages(max_message_count=50)


def take_all(
    client: ServiceBusClient, queue: str, n: int, *, session_id: str | None = None
) -> list:
    """Receive-and-delete ``n`` messages, then make sure nothing else is there."""
    with client.get_queue_receiver(
        queue,
        session_id=session_id,
        receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
        max_wait_time=3,
    ) as receiver:
        got = receive_n(receiver, n, timeout=15) if n else []
        extra = receiver.receive_messages(max_message_count=10, max_wait_time=0.3)
    assert len(got) == n, f"{queue}: received {len(got)} of {n}"
    assert extra == [], f"{queue}: unexpected extra messages {[body_text(m) for m in extra]}"
    return got


def send_sdk(client: ServiceBusClient, queue: str, *bodies: str) -> None:
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(b) for b in bodies])


# ------------------------------------------------------------------------------- plain queues


def test_committed_sends_become_visible(server, sdk):
    plan = TxPlan(sends=[("tx-commit", msg(f"c-{i}", id=f"c-{i}")) for i in range(3)])
    client = run_tx(server, plan)
    assert client.result == "committed", (client.result, client.rejected)
    assert client.rejected == []
    got = take_all(sdk, "tx-commit", 3)
    assert [body_text(m) for m in got] == ["c-0", "c-1", "c-2"]
    assert [m.message_id for m in got] == ["c-0", "c-1", "c-2"]


def test_sends_are_invisible_until_commit(server, sdk):
    gate = threading.Event()
    plan = TxPlan(sends=[("tx-invisible", msg(f"inv-{i}")) for i in range(2)], gate=gate)
    client, thread = start_tx(server, plan)
    try:
        assert plan.staged.wait(RUN_TIMEOUT), "the transactional sends were never settled"
        assert client.result is None
        # Settled (transactional-state accepted) yet staged: neither peekable nor receivable.
        assert peek_all(sdk, "tx-invisible") == []
        with sdk.get_queue_receiver("tx-invisible", max_wait_time=1) as receiver:
            assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []
            # A receiver waiting when another connection commits gets the messages promptly.
            gate.set()
            t0 = time.monotonic()
            got = receive_n(receiver, 2, timeout=10)
            waited = time.monotonic() - t0
            for m in got:
                receiver.complete_message(m)
            extra = receiver.receive_messages(max_message_count=5, max_wait_time=0.3)
    finally:
        gate.set()
        finish_tx(client, thread)
    assert client.result == "committed"
    assert sorted(body_text(m) for m in got) == ["inv-0", "inv-1"]
    assert extra == []
    assert waited < 5, f"committed messages reached a waiting receiver only after {waited:.1f}s"


def test_aborted_sends_are_dropped(server, sdk):
    plan = TxPlan(sends=[("tx-abort", msg(f"a-{i}")) for i in range(3)], outcome="abort")
    client = run_tx(server, plan)
    assert client.result == "aborted"
    assert client.settled_sends == 3 and client.rejected == []
    assert peek_all(sdk, "tx-abort") == []


def test_one_transaction_spans_two_queues(server, sdk):
    plan = TxPlan(
        sends=[
            ("tx-multi-a", msg("ma-0")),
            ("tx-multi-b", msg("mb-0")),
            ("tx-multi-a", msg("ma-1")),
        ]
    )
    client = run_tx(server, plan)
    assert client.result == "committed"
    assert [body_text(m) for m in take_all(sdk, "tx-multi-a", 2)] == ["ma-0", "ma-1"]
    assert [body_text(m) for m in take_all(sdk, "tx-multi-b", 1)] == ["mb-0"]


def test_transactional_accept_then_commit_removes_the_message(server, sdk):
    send_sdk(sdk, "tx-accept-commit", "ac-0", "ac-1")
    plan = TxPlan(receive_from="tx-accept-commit", receive_count=1)
    client = run_tx(server, plan)
    assert client.result == "committed"
    assert bodies(client.received) == ["ac-0"]
    assert [body_text(m) for m in peek_all(sdk, "tx-accept-commit")] == ["ac-1"]


def test_transactional_accept_then_abort_leaves_the_message(server, sdk):
    send_sdk(sdk, "tx-accept-abort", "aa-0")
    plan = TxPlan(receive_from="tx-accept-abort", receive_count=1, outcome="abort")
    client = run_tx(server, plan)
    assert client.result == "aborted"
    assert bodies(client.received) == ["aa-0"]
    peeked = peek_all(sdk, "tx-accept-abort")
    assert [body_text(m) for m in peeked] == ["aa-0"], "the rolled-back accept left it in place"
    # Receivable again (at the latest when the 5 s lock of the aborted accept expires).
    with sdk.get_queue_receiver("tx-accept-abort", max_wait_time=3) as receiver:
        got = receive_n(receiver, 1, timeout=15)
        assert [body_text(m) for m in got] == ["aa-0"]
        assert got[0].delivery_count >= 1
        receiver.complete_message(got[0])
        assert receiver.receive_messages(max_message_count=5, max_wait_time=0.3) == []


def test_connection_closed_without_discharge_rolls_back(server, sdk):
    send_sdk(sdk, "tx-close-accept", "ca-0")
    gate = threading.Event()
    plan = TxPlan(
        sends=[("tx-close-send", msg("cs-0")), ("tx-close-send", msg("cs-1"))],
        receive_from="tx-close-accept",
        receive_count=1,
        outcome="close",
        gate=gate,
    )
    client, thread = start_tx(server, plan)
    try:
        assert plan.staged.wait(RUN_TIMEOUT)
        assert peek_all(sdk, "tx-close-send") == []
    finally:
        gate.set()
        finish_tx(client, thread)
    assert client.result == "closed"
    assert bodies(client.received) == ["ca-0"]
    time.sleep(0.5)  # let the server see the close
    assert peek_all(sdk, "tx-close-send") == [], "staged sends of an undischarged transaction"
    assert [body_text(m) for m in peek_all(sdk, "tx-close-accept")] == ["ca-0"]


# ------------------------------------------------------------------------------- partitioned


def test_partitioned_same_partition_key_commits_on_one_partition(server, sdk):
    key = "order-42"
    plan = TxPlan(sends=[("tx-pq", msg(f"pk-{i}", key=key)) for i in range(5)])
    client = run_tx(server, plan)
    assert client.result == "committed", (client.result, client.rejected)
    got = take_all(sdk, "tx-pq", 5)
    assert [body_text(m) for m in got] == [f"pk-{i}" for i in range(5)]
    assert {m.partition_key for m in got} == {key}
    assert {partition_of(m.sequence_number) for m in got} == {partition_for_key(key, PARTITIONS)}


def _assert_doomed(client: TxClient, n_sends: int, n_rejected: int = 1) -> None:
    assert client.result == "commit-failed", (client.result, client.rejected)
    assert len(client.rejected) == n_rejected, client.rejected
    assert all(condition_name(c) == "amqp:not-allowed" for c in client.rejected), [
        (condition_name(c), c.description) for c in client.rejected
    ]
    assert condition_name(client.discharge_condition) == "amqp:transaction:rollback", (
        client.discharge_condition
    )
    assert client.settled_sends == n_sends


@pytest.mark.parametrize(
    "messages",
    [
        [msg("k-0", key="k1"), msg("nokey-1")],
        [msg("nokey-0")],
        [msg("k-0", key="k1"), msg("k-1", key="k1"), msg("k2-2", key="k2")],
    ],
    ids=["keyed-then-keyless", "keyless-only", "two-keys"],
)
def test_partitioned_keyless_or_second_key_dooms_the_transaction(server, sdk, messages):
    """P15: every transactional message needs a key, and one key per transaction."""
    client = run_tx(server, TxPlan(sends=[("tx-pq-bad", m) for m in messages]))
    _assert_doomed(client, len(messages))
    assert peek_all(sdk, "tx-pq-bad") == [], "nothing of a failed commit is stored"


def test_partitioned_doomed_transaction_can_still_be_aborted(server, sdk):
    """A refused send dooms the transaction; discharge(fail=true) is still accepted."""
    plan = TxPlan(sends=[("tx-pq-bad", msg("k-0", key="k1")), ("tx-pq-bad", msg("nokey"))])
    plan.outcome = "abort"
    client = run_tx(server, plan)
    assert client.result == "aborted", (client.result, client.discharge_condition)
    assert [condition_name(c) for c in client.rejected] == ["amqp:not-allowed"]
    assert peek_all(sdk, "tx-pq-bad") == []


def test_partitioned_transactional_accept_then_commit(server, sdk):
    """Settlements on a partitioned queue commit too (the receive side has no key rule)."""
    with sdk.get_queue_sender("tx-pq-accept") as sender:
        sender.send_messages(ServiceBusMessage("pa-0", partition_key="a"))
        sender.send_messages(ServiceBusMessage("pa-1", partition_key="b"))
    client = run_tx(server, TxPlan(receive_from="tx-pq-accept", receive_count=2))
    assert client.result == "committed"
    assert sorted(bodies(client.received)) == ["pa-0", "pa-1"]
    assert peek_all(sdk, "tx-pq-accept") == []


def test_partitioned_session_queue_one_session_commits(server, sdk):
    plan = TxPlan(sends=[("tx-psq", msg(f"s1-{i}", session="s1")) for i in range(3)])
    client = run_tx(server, plan)
    assert client.result == "committed", (client.result, client.rejected)
    got = take_all(sdk, "tx-psq", 3, session_id="s1")
    assert [body_text(m) for m in got] == ["s1-0", "s1-1", "s1-2"]
    assert {m.session_id for m in got} == {"s1"}
    assert {partition_of(m.sequence_number) for m in got} == {partition_for_key("s1", PARTITIONS)}


@pytest.mark.parametrize(
    "messages",
    [
        [msg("s1-0", session="s1"), msg("s2-0", session="s2")],
        [msg("s1-0", session="s1"), msg("none-0")],
        [msg("pk-only", key="s1")],
        [msg("s1-0", session="s1"), msg("s1-pk", session="s1", key="other")],
    ],
    ids=["two-sessions", "no-session-id", "partition-key-without-session", "key-differs"],
)
def test_partitioned_session_queue_rules(server, sdk, messages):
    """P16: a SessionId is required, a PartitionKey must equal it, one session per transaction."""
    client = run_tx(server, TxPlan(sends=[("tx-psq-bad", m) for m in messages]))
    _assert_doomed(client, len(messages))
    for session in sorted({m.group_id or "s1" for m in messages}):
        assert peek_all(sdk, "tx-psq-bad", session_id=session) == []


def test_non_partitioned_session_queue_accepts_two_sessions(server, sdk):
    plan = TxPlan(
        sends=[
            ("tx-sq", msg("s1-0", session="s1")),
            ("tx-sq", msg("s2-0", session="s2")),
            ("tx-sq", msg("s1-1", session="s1")),
        ]
    )
    client = run_tx(server, plan)
    assert client.result == "committed", (client.result, client.rejected)
    assert [body_text(m) for m in take_all(sdk, "tx-sq", 2, session_id="s1")] == ["s1-0", "s1-1"]
    assert [body_text(m) for m in take_all(sdk, "tx-sq", 1, session_id="s2")] == ["s2-0"]


# ------------------------------------------------------------------------------- atomicity
#
# A discharge rejected with amqp:transaction:rollback tells the client that nothing of the
# transaction happened: the server checks every staged operation (locks live, partitions in
# service) before it applies any of them.


def test_commit_failing_on_an_expired_lock_keeps_none_of_the_transaction(server, sdk):
    send_sdk(sdk, "tx-atomic-lock", "lk-0")
    gate = threading.Event()
    plan = TxPlan(
        sends=[("tx-atomic-send", msg("atomic-0"))],
        receive_from="tx-atomic-lock",
        receive_count=1,
        gate=gate,
    )
    client, thread = start_tx(server, plan)
    try:
        assert plan.staged.wait(RUN_TIMEOUT)
        server.advance_clock(6.0)  # the accepted message's lock (PT5S) expires before the commit
    finally:
        gate.set()
        finish_tx(client, thread)
    assert client.result == "commit-failed", client.result
    assert condition_name(client.discharge_condition) == "amqp:transaction:rollback"
    # The accept failed (its message is back after the lock expired); the send of the
    # rolled-back transaction must not be there either.
    leaked = [body_text(m) for m in peek_all(sdk, "tx-atomic-send")]
    assert leaked == [], f"rolled-back transaction's send was applied: {leaked}"


def _admin_post(server: Any, path: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.admin_port}{path}",
        data=b"",
        method="POST",
        headers=server.admin_headers(),
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_commit_failing_on_an_offline_partition_keeps_none_of_the_transaction(server, sdk):
    key = "atomic-key"
    pid = partition_for_key(key, PARTITIONS)
    gate = threading.Event()
    plan = TxPlan(
        sends=[("tx-atomic-send2", msg("atomic-1")), ("tx-atomic-pq", msg("p-1", key=key))],
        gate=gate,
    )
    client, thread = start_tx(server, plan)
    try:
        assert plan.staged.wait(RUN_TIMEOUT)
        _admin_post(server, f"/partitions/{NAMESPACE}/tx-atomic-pq/{pid}/offline")
    finally:
        gate.set()
        try:
            finish_tx(client, thread)
        finally:
            _admin_post(server, f"/partitions/{NAMESPACE}/tx-atomic-pq/{pid}/online")
    assert client.result == "commit-failed", client.result
    assert condition_name(client.discharge_condition) == "amqp:transaction:rollback"
    assert peek_all(sdk, "tx-atomic-pq") == []
    leaked = [body_text(m) for m in peek_all(sdk, "tx-atomic-send2")]
    assert leaked == [], f"rolled-back transaction's send was applied: {leaked}"
