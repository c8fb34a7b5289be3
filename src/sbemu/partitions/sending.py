"""The send path of a queue or topic: which partition each send goes to, and how the sends of
one call are grouped so each partition stages its share with one enqueue.

Sends are routed by key [SB partitioning P6, P7] or round-robin [P8]; every send, alone or
several at once, goes one way: checked, grouped by partition, staged with one enqueue per
partition. The entity checks its Status before it hands sends here; what this module owns is
the partition choice (the round-robin turn and the batch key-less sends gather in) and the
per-partition checks (session ids, keys, health, duplicate detection).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidOperation, QuotaExceeded, ServiceBusError
from .broker import PartitionBroker
from .completions import join_completions
from .dedup import DuplicateHistory
from .keys import partition_for_key, partition_key_of
from .records import IncomingMessage
from .specs import MAIN, EntitySpec
from .subscriptions import Subscriptions
from .transitions import SCHEDULED_QUEUE, Route

QUEUE_ROUTE = Route(MAIN)
SCHEDULED_ROUTE = Route(SCHEDULED_QUEUE)

Settle = Callable[[list[int], Exception | None], None]


class _Group:
    """The sends of one Entity.send_many call staged with one enqueue on one partition, and
    their completion: once their commit landed (or failed) it reports their indices to the
    call's `settle` (the caller's one settlement object). A key-less group that its partition
    refused as full or failing is first staged again on the next partition in turn [P8]."""

    __slots__ = ("path", "settle", "indices", "msgs", "now_ms", "pid", "keyless", "attempt")

    def __init__(
        self,
        path: SendPath,
        settle: Settle,
        indices: list[int],
        msgs: list[IncomingMessage],
        now_ms: int,
        pid: int,
        keyless: bool,
    ) -> None:
        self.path = path
        self.settle = settle
        self.indices = indices
        self.msgs = msgs
        self.now_ms = now_ms
        self.pid = pid
        self.keyless = keyless
        self.attempt = 0

    def __call__(self, error: Exception | None) -> None:
        if error is not None and self.keyless and self.path.fail_over(self, error):
            return
        self.settle(self.indices, error)


class SendPath:
    """Where an entity's sends go and how they are staged (entity.Entity owns one)."""

    def __init__(
        self,
        spec: EntitySpec,
        partitions: list[PartitionBroker],
        subscriptions: Subscriptions | None,
        histories: list[DuplicateHistory],
    ) -> None:
        self.name = spec.name
        self.spec = spec
        self.partitions = partitions  # (an entity's partitions never change)
        self.subscriptions = subscriptions
        self.histories = histories  # durable duplicate detection (empty: not enabled)
        self._round_robin = 0
        self._keyless_pid: int | None = None
        # The partition key-less sends go to while its batch gathers: (partition, batch number)
        self._keyless_batch: tuple[int, int] | None = None

    def send(
        self,
        sends: list[list[IncomingMessage]],
        now_ms: int,
        settle: Settle,
    ) -> list[int]:
        """The one send path, once the entity let the sends in: check each send (session
        ids, keys, the partition's health), group the sends by partition and stage each group
        with one enqueue. A send whose messages name several partitions, and every send on an
        entity with duplicate detection (its history admits per send), is staged on its own at
        once. Returns the sequence numbers given (in staging order)."""

        needs_session = self.spec.requires_session
        alone = bool(self.histories)  # duplicate detection: every send on its own
        if len(self.partitions) == 1 and not alone:
            return self._send_one_partition(sends, now_ms, settle, needs_session)
        groups: dict[tuple[int, bool], tuple[list[IncomingMessage], list[int]]] = {}
        keyless: int | None = None
        available: set[int] = set()  # partitions checked in this call
        numbers: list[int] = []
        for i, msgs in enumerate(sends):
            try:
                if needs_session:
                    self._check_session_ids(msgs)
                pid = -1 if alone else self._partition_of(msgs)
                if pid is None:  # key-less: the call's partition in turn
                    if keyless is None:
                        keyless = self._keyless_partition()
                    pid = keyless
                    key = (pid, True)
                elif pid < 0:  # keys on several partitions, or a history: a send of its own
                    numbers.extend(self._send_alone(msgs, now_ms, settle, i))
                    continue
                else:
                    key = (pid, False)
                if pid not in available:
                    self.check_available(pid)
                    available.add(pid)
            except ServiceBusError as exc:
                settle([i], exc)
                continue
            group = groups.get(key)
            if group is None:
                groups[key] = (list(msgs), [i])
            else:
                group[0].extend(msgs)
                group[1].append(i)
        for (pid, is_keyless), (msgs, indices) in groups.items():
            numbers.extend(
                self._enqueue(_Group(self, settle, indices, msgs, now_ms, pid, is_keyless))
            )
        return numbers

    def _send_one_partition(
        self,
        sends: list[list[IncomingMessage]],
        now_ms: int,
        settle: Settle,
        needs_session: bool,
    ) -> list[int]:
        """send() on an entity of one partition without duplicate detection (the plain
        queue's send path): every send goes to partition 0, so only [P6]'s SessionId /
        PartitionKey rule and the partition's health are checked per send, and all are staged
        with one enqueue."""
        msgs: list[IncomingMessage] = []
        indices: list[int] = []
        checked = False
        for i, one in enumerate(sends):
            try:
                if needs_session:
                    self._check_session_ids(one)
                for msg in one:
                    sid, key = msg.session_id, msg.partition_key
                    if sid is not None and key is not None and key != sid:
                        partition_key_of(sid, key, None, False)  # raises [P6]'s error
                if not checked:
                    self.check_available(0)
                    checked = True
            except ServiceBusError as exc:
                settle([i], exc)
                continue
            if len(one) == 1:
                msgs.append(one[0])
            else:
                msgs.extend(one)
            indices.append(i)
        if not indices:
            return []
        return self._enqueue(_Group(self, settle, indices, msgs, now_ms, 0, False))

    def _send_alone(
        self, messages: list[IncomingMessage], now_ms: int, settle: Settle, index: int
    ) -> list[int]:
        """Stage one send message by message (its keys may name several partitions; key-less
        messages share one), through the duplicate history if the entity keeps one; raises
        what refuses it before anything is staged."""
        groups = self.route(messages)
        for pid in groups:
            self.check_available(pid)
        if self.histories:
            for pid, msgs in groups.items():  # a refused MessageId must not enter the history
                need = sum(
                    m.size * len(t) for m, t in zip(msgs, self.targets(msgs, now_ms), strict=True)
                )
                refused = self.partitions[pid].health.refuse_over_quota(need)
                if refused is not None:
                    raise refused
            groups = {
                pid: kept
                for pid, msgs in groups.items()
                if (kept := self.histories[pid].admit(msgs, now_ms))
            }
            if not groups:
                settle([index], None)
                return []
        joined = settle
        if len(groups) > 1:  # the send is reported once, after its last partition's commit
            done = join_completions(len(groups), lambda error: settle([index], error))
            joined = lambda _indices, error: done(error)  # noqa: E731
        numbers: list[int] = []
        for pid, msgs in groups.items():
            keyless = pid == self._keyless_pid
            numbers.extend(self._enqueue(_Group(self, joined, [index], msgs, now_ms, pid, keyless)))
        return numbers

    def _check_session_ids(self, messages: list[IncomingMessage]) -> None:
        for msg in messages:
            if msg.session_id is None:
                raise InvalidOperation(
                    f"The SessionId was not set on a message, and it cannot be sent to the "
                    f"entity '{self.name}'. Entities that have session support enabled can "
                    "only receive messages that have the SessionId set to a valid value."
                )

    def _partition_of(self, messages: list[IncomingMessage]) -> int | None:
        """The partition one send's messages are pinned to by their keys [P6, P7]: None for
        key-less messages (round-robin), -1 when they name several partitions."""
        n = len(self.partitions)
        dup = self.spec.requires_duplicate_detection
        pid: int | None = None
        if n == 1 and len(messages) == 1:
            msg = messages[0]
            if msg.session_id is None or msg.partition_key is None:
                return 0  # no [P6] conflict possible: the one partition
        for msg in messages:
            mid = None if msg.message_id_assigned else msg.message_id  # sender's id only
            key = partition_key_of(msg.session_id, msg.partition_key, mid, dup)
            if n == 1:
                continue  # still enforces [P6]'s SessionId/PartitionKey rule
            at = None if key is None else partition_for_key(key, n)
            if msg is messages[0]:
                pid = at
            elif at != pid:
                return -1
        return 0 if n == 1 else pid

    def _enqueue(self, group: _Group) -> list[int]:
        """Stage a group with one enqueue on its partition; `group` is its completion."""
        msgs = group.msgs
        broker = self.partitions[group.pid]
        got = broker.enqueue(msgs, self.targets(msgs, group.now_ms), group.now_ms, group)
        return [n for n in got if n is not None]

    def fail_over(self, group: _Group, error: Exception) -> bool:
        """Stage a key-less group its partition refused on the next partition in turn when
        that partition is full or failing [P8]; False when the error stands (another kind of
        failure, or every partition tried). The group reports through its own completion."""
        broker = self.partitions[group.pid]
        if broker.health.accepting and not isinstance(error, QuotaExceeded):
            return False
        if group.attempt + 1 >= len(self.partitions):
            return False
        try:
            nxt = self._next_round_robin()
            self.check_available(nxt)
        except ServiceBusError as exc:
            group.settle(group.indices, exc)
            return True
        group.pid = nxt
        group.attempt += 1
        self._enqueue(group)
        return True

    def check_available(self, pid: int) -> None:
        """A send pinned to a partition fails while it is out of service or full [P7]."""
        health = self.partitions[pid].health
        error = health.send_error()
        if error is None:
            return
        if (
            health.serving
            and not health.room_low
            and all(not p.health.accepting for p in self.partitions)
        ):
            raise QuotaExceeded(
                f"Every partition of '{self.name}' is full (MaxSizeInMegabytes reached)."
            )
        raise error

    def targets(self, messages: list[IncomingMessage], now_ms: int) -> list[list[Route]]:
        """Where each message goes: the queue, or the matching subscriptions of a topic (a
        topic's scheduled message waits in its scheduled sub-queue until it fires)."""
        subs = self.subscriptions
        if subs is None:
            return [[QUEUE_ROUTE]] * len(messages)
        return [
            [SCHEDULED_ROUTE]
            if msg.scheduled_enqueue_time_ms is not None and msg.scheduled_enqueue_time_ms > now_ms
            else subs.route(msg)
            for msg in messages
        ]

    def route(self, messages: list[IncomingMessage]) -> dict[int, list[IncomingMessage]]:
        """Group messages by partition; key-less messages of one send share one partition."""
        n = len(self.partitions)
        self._keyless_pid = None
        if n == 1:
            for msg in messages:  # still enforce [P6]'s SessionId/PartitionKey rule
                partition_key_of(msg.session_id, msg.partition_key, None, False)
            return {0: messages}
        dup = self.spec.requires_duplicate_detection
        groups: dict[int, list[IncomingMessage]] = {}
        keys: set[str] = set()
        keyless_pid: int | None = None
        self._keyless_pid = None
        for msg in messages:
            mid = None if msg.message_id_assigned else msg.message_id  # sender's id only
            key = partition_key_of(msg.session_id, msg.partition_key, mid, dup)
            if key is None:
                if keyless_pid is None:
                    keyless_pid = self._keyless_pid = self._keyless_partition()
                pid = keyless_pid
            else:
                keys.add(key)
                pid = partition_for_key(key, n)
            groups.setdefault(pid, []).append(msg)
        if dup and len(keys) > 1:
            raise InvalidOperation(
                "Batching brokered messages with distinct SessionId, PartitionKey, or MessageId "
                "is not supported for an entity with partitioning and duplicate detection enabled."
            )
        return groups

    def _keyless_partition(self) -> int:
        """[P8] Where key-less sends go: the partitions in turn, one commit's worth each.

        Sends that arrive while the partition chosen last is still gathering its next batch
        (its commit has not started: the partition is busy committing, or waits for a commit
        slot of the entity) join that batch; once the batch is handed to the committer the
        next send takes the next partition. One at a time (a sender waiting for each
        acknowledgement) that is plain round-robin; a stream of sends fills one commit per
        partition in turn instead of one small commit per partition per socket read, and
        each commit's acknowledgements are one contiguous run (one disposition frame)."""
        last = self._keyless_batch
        if last is not None:
            pid, number = last
            broker = self.partitions[pid]  # (an entity's partitions never change)
            if broker.batch_number == number and broker.health.serving and broker.health.accepting:
                return pid
        pid = self._next_round_robin()
        self._keyless_batch = (pid, self.partitions[pid].batch_number)
        return pid

    def _next_round_robin(self) -> int:
        """[P8] the next partition in turn that is in service and has room."""
        n = len(self.partitions)
        for _ in range(n):
            pid = self._round_robin % n
            self._round_robin += 1
            if self.partitions[pid].health.serving and self.partitions[pid].health.accepting:
                return pid
        return self._round_robin % n

    def check(self, messages: list[IncomingMessage]) -> None:
        """Raise the error a send of these messages would get now (keys, availability)."""
        for pid in self.route(messages):
            self.check_available(pid)

    def routes_for(self, msg: IncomingMessage, now_ms: int) -> list[Route]:
        """Where one message sent here goes (the queue, or the matching subscriptions)."""
        return self.targets([msg], now_ms)[0]
