"""Local transactions through the AMQP coordinator [AMQP 4, contract 7].

A client attaches a sender to the `coordinator` target, declares a transaction (we answer
`declared{txn-id}`), sends and settles with `transactional-state{txn-id}`, then discharges it.
Work inside a transaction is staged here, per connection, and only applied at commit: staged
sends are invisible until then and dropped on rollback; staged settlements (complete, abandon,
defer, dead-letter) are applied at commit and forgotten on rollback. Everything a commit applies
lands in the same event-loop turn, so each partition writes it in one LMDB transaction.
Closing the coordinator link (or the connection) rolls back what is still open.

The coordinator is served before the connection holds any authorisation, as Azure serves it:
the Java SDK attaches it without a `$cbs` token (its `createProducer(..., Coordinator, ...,
requiresAuthorization: false)`), on a fresh connection when `createTransaction()` comes first;
every transactional send or settlement is authorised by its own link. What a peer can grow
here is bounded instead: at most MAX_OPEN_TRANSACTIONS declared and not yet discharged per
connection, MAX_OPEN_TRANSACTIONS_UNAUTHENTICATED while it holds no authorisation (no SASL
PLAIN key, no live `$cbs` token); a declare past the bound is rejected with
amqp:resource-limit-exceeded and nothing is kept.

Partitioned entities [SB partitioning P15, P16]: every message sent in a transaction needs a
partition key (SessionId, PartitionKey, the transaction's via-partition-key, or MessageId on
entities with duplicate detection), and all messages of one transaction to that entity must
share it; so one transaction cannot span several sessions of a partitioned entity.
Non-partitioned entities accept any keys, across sessions, as Azure does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from proton import Condition, Delivery, Described, ulong

from ..errors import InvalidOperation, ServiceBusError
from ..partitions import Entity, IncomingMessage, join_completions
from .settlement import apply_settlement, condition_from_fields


class TransactionHost(Protocol):
    """What the coordinator needs of its connection: the time and a way to flush output."""

    on_output: Callable[[], None]  # ask the adapter to write what the engine has to send

    @property
    def now_ms(self) -> int:
        """The current time in Unix milliseconds."""

    def condition_for(self, exc: ServiceBusError) -> Condition:
        """The AMQP error a client sees for `exc` (counted for /metrics)."""


DECLARE = 0x31
DISCHARGE = 0x32
DECLARED = 0x33
TRANSACTIONAL_STATE = 0x34
ACCEPTED = 0x24
REJECTED = 0x25
RELEASED = 0x26
MODIFIED = 0x27
_SYMBOLIC = {
    "amqp:declare:list": DECLARE,
    "amqp:discharge:list": DISCHARGE,
    "amqp:accepted:list": ACCEPTED,
    "amqp:rejected:list": REJECTED,
    "amqp:released:list": RELEASED,
    "amqp:modified:list": MODIFIED,
}


def descriptor_code(value: object) -> int | None:
    """The numeric code of a described value's descriptor (numeric or symbolic)."""
    if not isinstance(value, Described):
        return None
    d = value.descriptor
    if isinstance(d, int):
        return int(d)
    return _SYMBOLIC.get(str(d))


@dataclass(eq=False)
class StagedSettlement:
    """A settlement to apply at commit."""

    entity: Entity
    token: Any
    outcome: int
    fields: list[Any]
    delivery: Delivery


@dataclass(eq=False)
class Transaction:
    """One declared transaction's staged work."""

    txn_id: bytes
    sends: list[tuple[Entity, list[IncomingMessage]]] = field(default_factory=list)
    settlements: list[StagedSettlement] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # partitioned entity -> its key
    failure: str | None = None  # a refused operation dooms the transaction


MAX_OPEN_TRANSACTIONS = 1000  # declared, not yet discharged, per connection
MAX_OPEN_TRANSACTIONS_UNAUTHENTICATED = 16  # while the connection holds no authorisation


class TransactionCoordinator:
    """The transactions of one connection; `authenticated` says whether the connection holds
    any authorisation now (None: always, for tests of the staging alone)."""

    _ids = itertools.count(1)

    def __init__(
        self, conn: TransactionHost, authenticated: Callable[[], bool] | None = None
    ) -> None:
        self.conn = conn
        self.open: dict[bytes, Transaction] = {}
        self._authenticated = authenticated

    def _room(self) -> int:
        """How many declared transactions this connection may hold now (module docstring)."""
        if self._authenticated is None or self._authenticated():
            return MAX_OPEN_TRANSACTIONS
        return MAX_OPEN_TRANSACTIONS_UNAUTHENTICATED

    # ------------------------------------------------------------ control messages
    def on_control(self, delivery: Delivery, body: object) -> None:
        """A declare or discharge arrived on the coordinator link."""
        code = descriptor_code(body)
        txn_id: bytes | None
        if code == DECLARE and len(self.open) >= self._room():
            self._reject(
                delivery,
                "amqp:resource-limit-exceeded",
                f"Cannot declare more than {self._room()} transactions open at once on one "
                "connection; discharge one first"
                + ("." if self._room() == MAX_OPEN_TRANSACTIONS else " (or authorise first)."),
            )
        elif code == DECLARE:
            txn_id = next(self._ids).to_bytes(8, "big")
            self.open[txn_id] = Transaction(txn_id)
            delivery.local.data = [txn_id]  # type: ignore[list-item]  # proton says list[int]; any AMQP values
            delivery.update(DECLARED)
            delivery.settle()
        elif code == DISCHARGE:
            fields = list(body.value or []) + [None, None]  # type: ignore[attr-defined]
            txn_id, fail = _txn_bytes(fields[0]), bool(fields[1])
            txn = self.open.pop(txn_id, None) if txn_id is not None else None
            if txn is None:
                self._reject(delivery, "amqp:transaction:unknown-id", "Unknown transaction id.")
            elif fail:
                delivery.update(Delivery.ACCEPTED)
                delivery.settle()
            elif txn.failure is not None:
                self._reject(
                    delivery,
                    "amqp:transaction:rollback",
                    f"The transaction was rolled back: {txn.failure}",
                )
            else:
                self._commit(txn, delivery)
        else:
            self._reject(delivery, "amqp:decode-error", "Expected declare or discharge.")
        self.conn.on_output()

    def _reject(self, delivery: Delivery, condition: str, description: str) -> None:
        delivery.local.condition = Condition(condition, description, {"txn": "sbemu"})
        delivery.update(Delivery.REJECTED)
        delivery.settle()

    def rollback_all(self) -> None:
        """The coordinator link or the connection went away: drop every open transaction."""
        self.open.clear()

    # ------------------------------------------------------------ staging
    def transaction(self, txn_id: object) -> Transaction:
        """The open transaction a transactional-state names."""
        key = _txn_bytes(txn_id)
        txn = self.open.get(key) if key is not None else None
        if txn is None:
            error = ServiceBusError("The transaction is unknown or already discharged.")
            error.condition = "amqp:transaction:unknown-id"
            raise error
        return txn

    def stage_send(self, txn: Transaction, entity: Entity, messages: list[IncomingMessage]) -> None:
        """Hold messages until commit, enforcing [P15, P16] on partitioned entities."""
        try:
            self._check_keys(txn, entity, messages)
        except ServiceBusError as exc:
            txn.failure = exc.description
            raise
        txn.sends.append((entity, messages))

    def fail(self, txn: Transaction, reason: str) -> None:
        """An operation inside the transaction was refused: it can only roll back now."""
        txn.failure = txn.failure or reason

    @staticmethod
    def _check_keys(txn: Transaction, entity: Entity, messages: list[IncomingMessage]) -> None:
        if entity.partitioned:
            for msg in messages:
                key = (
                    msg.session_id
                    or msg.partition_key
                    or msg.via_partition_key
                    or (
                        msg.message_id
                        if entity.spec.requires_duplicate_detection and not msg.message_id_assigned
                        else None
                    )
                )
                if key is None:
                    raise InvalidOperation(
                        f"A message sent to the partitioned entity '{entity.name}' within a "
                        "transaction must have a partition key (SessionId, PartitionKey or "
                        "MessageId)."
                    )
                if msg.session_id and msg.partition_key and msg.partition_key != msg.session_id:
                    raise InvalidOperation(
                        "The PartitionKey of a transactional message must equal its SessionId."
                    )
                first = txn.keys.setdefault(entity.name, key)
                if first != key:
                    raise InvalidOperation(
                        f"All messages sent to the partitioned entity '{entity.name}' within "
                        f"one transaction must share one partition key ('{first}', not "
                        f"'{key}'); a transaction cannot span sessions or partitions."
                    )

    def on_disposition(self, entity: Entity, token: Any, delivery: Delivery) -> None:
        """A settlement inside a transaction: staged now, applied at commit [contract 7]."""
        # proton types disposition data as list[int]; it holds decoded AMQP values.
        data: list[Any] = list(delivery.remote.data or []) + [None, None]
        inner = data[1]
        code = descriptor_code(inner)
        try:
            txn = self.transaction(data[0])
            if code is None:
                raise InvalidOperation("A transactional settlement needs an outcome.")
            fields = list(inner.value or []) + [None, None, None]
            details: Any = None
            if code == Delivery.MODIFIED:
                details = (bool(fields[1]), fields[2])
            elif code == Delivery.REJECTED:
                details = condition_from_fields(fields[0])
            self.stage_settlement(txn, StagedSettlement(entity, token, code, details, delivery))
        except ServiceBusError as exc:
            delivery.local.condition = self.conn.condition_for(exc)
            delivery.update(Delivery.REJECTED)
            delivery.settle()
            self.conn.on_output()
            return
        delivery.local.data = transactional_outcome(txn.txn_id, code)
        delivery.update(TRANSACTIONAL_STATE)
        delivery.settle()
        self.conn.on_output()

    def stage_settlement(self, txn: Transaction, staged: StagedSettlement) -> None:
        """Hold a settlement until commit; the lock must be live now."""
        txn.settlements.append(staged)

    # ------------------------------------------------------------ commit
    def _commit(self, txn: Transaction, delivery: Delivery) -> None:
        now_ms = self.conn.now_ms
        # Check everything first, so that a commit that cannot succeed applies nothing.
        try:
            for entity, messages in txn.sends:
                entity.check_send(messages)
            for staged in txn.settlements:
                staged.entity.check_lock(staged.token.int, now_ms)
        except ServiceBusError as exc:
            self._reject(delivery, "amqp:transaction:rollback", f"Commit failed: {exc.description}")
            return
        ops: list[Callable[[Callable[[Exception | None], None]], None]] = []
        # The ignores below: mypy cannot infer lambdas that bind through default arguments.
        for entity, messages in txn.sends:
            ops.append(lambda cb, e=entity, m=messages: e.send(m, now_ms, cb))  # type: ignore[misc]
        for s in txn.settlements:
            ops.append(
                lambda cb, s=s: apply_settlement(  # type: ignore[misc]
                    s.entity, s.token, s.outcome, s.fields, now_ms, cb
                )
            )
        if not ops:
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
            return

        def all_done(first: Exception | None) -> None:
            if first is not None:
                text = first.description if isinstance(first, ServiceBusError) else str(first)
                self._reject(delivery, "amqp:transaction:rollback", f"Commit failed: {text}")
            else:
                delivery.update(Delivery.ACCEPTED)
                delivery.settle()
            self.conn.on_output()

        one_done = join_completions(len(ops), all_done)

        for op in ops:
            try:
                op(one_done)
            except ServiceBusError as exc:
                one_done(exc)


def _txn_bytes(value: object) -> bytes | None:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return None


def transactional_outcome(txn_id: bytes, code: int) -> list[Any]:
    """The data of a transactional-state carrying an outcome (for our dispositions)."""
    return [txn_id, Described(ulong(code), [])]
