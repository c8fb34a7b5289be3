"""Auto-forwarding (ForwardTo, ForwardDeadLetteredMessagesTo) between entities whose partitions
live in different LMDB environments, exactly once across a crash.

The source sub-queue is the outbox: a message sent to a queue (or copied to a subscription,
or dead-lettered into a DLQ) that forwards is stored there first, in the source partition's
own transaction, and acknowledged to its sender only then. The forwarder then moves it:

1. it takes the oldest ready messages of the source sub-queue (one step in flight per source
   sub-queue) and enqueues each at the destination, on the partition its key names [P9]
   (key-less messages on a partition derived from the source message, so a retry picks the
   same one), through the destination's own rules (filters, sessions, TTL);
2. in the same destination transaction it writes a marker naming the source message
   (namespace/entity/partition/sub-queue/sequence number);
3. after that commit the message is deleted from the source; after the source commit the
   marker is deleted at the destination.

A crash between 2 and 3 leaves the message at the source and the marker at the destination:
on restart the forwarder finds the marker and only deletes the source copy. A crash before 2
commits leaves nothing at the destination. So every forwarded message is in exactly one
place after a crash, never lost and never twice.

A forward that cannot be delivered (destination missing, disabled, full, session-less message
to a session entity, hop limit) moves the message to the source's transfer dead-letter queue
(`$Transfer/$DeadLetterQueue`) with Azure's reason; a destination partition that is offline
or failing is retried.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import QuotaExceeded, ServiceBusError
from .broker import DLQ_SUFFIX, PartitionBroker
from .completions import Done, join_completions
from .dedup import DuplicateHistory
from .entitystatus import ReceiverSettings
from .keys import partition_for_key, partition_key_of
from .records import IncomingMessage, MessageRecord
from .resend import ViewOf, incoming_from_record
from .transitions import Route

MAX_HOPS = 4  # Azure's limit on forwarding hops
STEP = 2_000  # messages per forwarding step of one source sub-queue (one commit per destination partition)
RETRY_MS = 1_000  # wait before retrying a destination partition that is unavailable
TRANSFER_DLQ_SUFFIX = "/$transfer/$deadletterqueue"

HOP_LIMIT_REASON = "MaxTransferHopCountExceeded"
# Azure's dead-letter description (the "Moving messages to the DLQ" table of its docs); a
# forwarding loop (ForwardTo itself, or a cycle) ends here after MAX_HOPS moves
HOP_LIMIT_DESCRIPTION = (
    "The maximum number of allowed hops when forwarding between queues has been exceeded."
)
NO_SESSION_REASON = "Session ID is null"
DISABLED_REASON = "MessagingEntityDisabled"
NOT_FOUND_REASON = "MessagingEntityNotFound"
FULL_REASON = "QuotaExceeded"


# ------------------------------------------------------------------ what the forwarder reads
# The forwarder is below the router (which owns it): it names what it uses of an entity and
# of the router (router.Entity, router.Router) in these Protocols instead of importing them.
class _Spec(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def requires_session(self) -> bool: ...
    @property
    def requires_duplicate_detection(self) -> bool: ...


class ForwardingEntity(Protocol):
    """What forwarding uses of a queue or topic (router.Entity), as source or destination."""

    touched: bool  # set on a destination: forwarding to it is activity (AutoDeleteOnIdle)

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> _Spec: ...
    @property
    def subscriptions(self) -> object: ...  # None for a queue
    @property
    def partitions(self) -> Sequence[PartitionBroker]: ...
    @property
    def histories(self) -> Sequence[DuplicateHistory]: ...  # per partition; empty: no dedup
    def receiver_settings(self, queue: str) -> ReceiverSettings: ...
    def routes_for(self, msg: IncomingMessage, now_ms: int) -> list[Route]: ...
    def check_sendable(self) -> None: ...


class ForwardingRouter(Protocol):
    """What forwarding uses of the router (router.Router) that owns it."""

    @property
    def entities(self) -> Mapping[tuple[str, str], ForwardingEntity]: ...
    @property
    def view_of_record(self) -> ViewOf | None: ...
    @property
    def encode_value(self) -> Callable[[object], bytes] | None: ...
    def wake(self) -> None: ...


def base_of(queue: str) -> str:
    """'main' or 'subscriptions/<name>' for a sub-queue or its (transfer) dead-letter queue."""
    for suffix in (TRANSFER_DLQ_SUFFIX, DLQ_SUFFIX):
        if queue.endswith(suffix):
            return queue[: -len(suffix)]
    return queue


def forward_target(entity: ForwardingEntity, queue: str) -> str | None:
    """Where a sub-queue forwards to: ForwardTo for a queue or subscription, and
    ForwardDeadLetteredMessagesTo for its dead-letter queue (None: it does not)."""
    settings = entity.receiver_settings(queue)
    if queue.endswith(TRANSFER_DLQ_SUFFIX):
        return None
    if queue.endswith(DLQ_SUFFIX):
        return settings.forward_dead_lettered_messages_to
    if entity.subscriptions is None and queue != "main":
        return None  # e.g. a topic's scheduled sub-queue
    return settings.forward_to


@dataclass(frozen=True, slots=True)
class _Source:
    entity: ForwardingEntity
    broker: PartitionBroker
    queue: str


# a message to enqueue at a destination: its record, marker, incoming form and routes there
_Move = tuple[MessageRecord, bytes, IncomingMessage, list[Route]]


@dataclass(slots=True)
class _Sorted:
    """One step's messages that still have something to do after the step's first pass."""

    # to enqueue, by destination partition (one commit each)
    groups: dict[PartitionBroker, list[_Move]] = field(default_factory=dict)
    # moved before a crash: the destination markers to delete once the source copies are gone
    done_markers: list[tuple[PartitionBroker, bytes]] = field(default_factory=list)
    # their destination partition is unavailable: made ready again, retried after RETRY_MS
    retry: list[MessageRecord] = field(default_factory=list)


class Forwarder:
    """Moves messages out of forwarding sub-queues; owned by the Router."""

    def __init__(self, router: ForwardingRouter) -> None:
        self.router = router
        self._pending: set[_Source] = set()
        self._busy: set[_Source] = set()
        self._retry_at: dict[_Source, int] = {}
        # committed markers at each destination partition, read at start-up and kept current
        self._markers: dict[PartitionBroker, set[bytes]] = {}
        self.transferred = 0
        self.transfer_dead_lettered = 0

    # ------------------------------------------------------------ set-up
    def load_markers(self, broker: PartitionBroker) -> None:
        """Read a partition's markers (those of forwards interrupted by a crash)."""
        found = broker.forward_markers()
        if found:
            self._markers[broker] = set(found)

    def clean_stale_markers(self) -> int:
        """At start-up, after every entity is loaded: delete markers whose source message is
        gone (the process died after the source commit, before the marker's deletion)."""
        sources: dict[bytes, tuple[PartitionBroker, str]] = {}
        for entity in self.router.entities.values():
            ns = entity.spec.namespace.lower()
            for broker in entity.partitions:
                for name in broker.queues:
                    key = f"{ns}/{entity.name.lower()}/{broker.partition_id}/{name}/".encode()
                    sources[key] = (broker, name)
        removed = 0
        for db, markers in self._markers.items():
            stale = []
            for marker in markers:
                source = sources.get(marker[:-8])
                if source is None or not source[0].contains(
                    source[1], int.from_bytes(marker[-8:], "big")
                ):
                    stale.append(marker)
            if stale:
                markers.difference_update(stale)
                db.put_forward_markers(stale, False)
                removed += len(stale)
        return removed

    def notify(self, entity: ForwardingEntity, broker: PartitionBroker, queue: str) -> None:
        """A sub-queue got ready messages: forward them if it forwards."""
        if forward_target(entity, queue) is not None:
            self._pending.add(_Source(entity, broker, queue))

    def rescan(self, entity: ForwardingEntity) -> None:
        """Settings changed: pick up every forwarding sub-queue with ready messages."""
        for broker in entity.partitions:
            for name in broker.queues:
                if forward_target(entity, name) is not None and broker.has_ready_any(name):
                    self._pending.add(_Source(entity, broker, name))

    def forget(self, entity: ForwardingEntity) -> None:
        """The entity was deleted: drop its sources."""
        for src in [
            s for s in self._pending | self._busy | set(self._retry_at) if s.entity is entity
        ]:
            self._pending.discard(src)
            self._busy.discard(src)
            self._retry_at.pop(src, None)
        for broker in entity.partitions:
            self._markers.pop(broker, None)

    @property
    def has_work(self) -> bool:
        return bool(self._pending)

    # ------------------------------------------------------------ work
    def pump(self, now_ms: int) -> None:
        """Start a step for every source with ready messages and no step in flight."""
        if not self._pending:
            return
        for src in list(self._pending):
            if src in self._busy or self._retry_at.get(src, 0) > now_ms:
                continue
            self._pending.discard(src)
            self._retry_at.pop(src, None)
            self._step(src, now_ms)

    def on_timer(self, now_ms: int) -> bool:
        """Whether a retry is due (the router then pumps)."""
        return any(at <= now_ms for at in self._retry_at.values())

    def _step(self, src: _Source, now_ms: int) -> None:
        """Take up to STEP ready messages of one source and move each as its destination
        allows: enqueued there (one commit per destination partition), dead-lettered, dropped
        as a duplicate, or made ready again for a retry."""
        target = self._target_now(src)
        if target is None:
            return
        recs = src.broker.take_ready(src.queue, STEP)
        if not recs:
            return
        entity = src.entity
        ns = entity.spec.namespace
        dest = self.router.entities.get((ns.lower(), target.lower()))
        # a marker names its source message: namespace/entity/partition/sub-queue/sequence
        prefix = (
            f"{ns.lower()}/{entity.name.lower()}/{src.broker.partition_id}/{src.queue}/".encode()
        )
        step = _Sorted()
        for rec in recs:
            marker = prefix + rec.sequence_number.to_bytes(8, "big")
            self._sort(src, dest, target, rec, marker, now_ms, step)
        self._finish_step(src, dest, step, now_ms)

    def _target_now(self, src: _Source) -> str | None:
        """Where the source forwards to, when it may take a step now (None: not now)."""
        entity, broker, queue = src.entity, src.broker, src.queue
        target = forward_target(entity, queue)
        sq = broker.queues.get(queue)
        if target is None or sq is None or not broker.health.serving:
            return None
        if (
            self.router.entities.get((entity.spec.namespace.lower(), entity.name.lower()))
            is not entity
        ):
            return None  # deleted
        if broker.in_line_before_commit(queue):
            # Put in line before its commit while the sub-queue did not forward yet (early
            # delivery; ForwardTo was set since): not stored yet, and its send may still
            # fail. The move's exactly-once steps need a stored message: go on after it lands.
            broker.after_commit(lambda _error: self._pending.add(src))
            return None
        return target

    def _sort(
        self,
        src: _Source,
        dest: ForwardingEntity | None,
        target: str,
        rec: MessageRecord,
        marker: bytes,
        now_ms: int,
        step: _Sorted,
    ) -> None:
        """Decide one message's move: dead-lettered or dropped now, or put in `step` (to
        enqueue, to retry, or only its source copy left to delete)."""
        broker, queue = src.broker, src.queue
        refusal = _refusal(dest, target, rec)
        if refusal is not None:
            self._dead_letter(src, rec, now_ms, *refusal)
            return
        assert dest is not None
        db = dest.partitions[_dest_partition(dest, rec, marker)]
        if marker in self._markers.get(db, ()):
            # applied before a crash: only the source copy is left to delete
            broker.forward_out(
                queue, rec.sequence_number, now_ms, reason=f"forwarded to {dest.name}"
            )
            step.done_markers.append((db, marker))
            self.transferred += 1
            return
        if not db.health.serving:
            step.retry.append(rec)
            return
        if not db.health.accepting:
            self._dead_letter_full(src, dest, [rec], now_ms)
            return
        dest.touched = True
        incoming = incoming_from_record(rec, self.router.view_of_record)
        incoming.original_sequence_number = (
            rec.original_sequence_number
            if rec.original_sequence_number is not None
            else rec.sequence_number
        )
        incoming.transfer_hops = rec.transfer_hops + 1
        routes = _carry_properties(dest.routes_for(incoming, now_ms), self._carried(rec))
        if db.health.quota_error(incoming.size * len(routes)) is not None:
            # checked before its MessageId enters the history
            self._dead_letter_full(src, dest, [rec], now_ms)
            return
        if dest.histories and not dest.histories[db.partition_id].admit([incoming], now_ms):
            # a duplicate at a destination with duplicate detection: dropped, as a send
            broker.forward_out(queue, rec.sequence_number, now_ms, reason="duplicate")
            return
        step.groups.setdefault(db, []).append((rec, marker, incoming, routes))

    def _finish_step(
        self, src: _Source, dest: ForwardingEntity | None, step: _Sorted, now_ms: int
    ) -> None:
        """Delete the markers of moves done before a crash, put the retries back, and enqueue
        each group at its destination partition (the source is busy until all are applied)."""
        broker = src.broker
        if step.done_markers:
            self._forget_markers(broker, step.done_markers)
        for rec in step.retry:
            broker.make_ready(src.queue, rec)
        if step.retry:
            self._retry_at[src] = now_ms + RETRY_MS
            self._pending.add(src)
        if not step.groups:
            self._after_step(src)
            return
        self._busy.add(src)
        step_done = join_completions(len(step.groups), lambda error: self._step_done(src))
        for db, items in step.groups.items():
            self._apply(src, db, dest, items, now_ms, step_done)  # type: ignore[arg-type]

    def _apply(
        self,
        src: _Source,
        db: PartitionBroker,
        dest: ForwardingEntity,
        items: list[_Move],
        now_ms: int,
        step_done: Done,
    ) -> None:
        """Enqueue one group at one destination partition with its markers (one commit)."""
        broker, queue = src.broker, src.queue
        keys = [marker for _, marker, _, _ in items]
        if db.health.quota_error(sum(inc.size * len(routes) for _, _, inc, routes in items)):
            # no room: refused before any marker is written
            self._dead_letter_full(src, dest, [rec for rec, _, _, _ in items], now_ms)
            step_done(None)
            return

        def applied(error: Exception | None) -> None:
            if error is None:
                self._markers.setdefault(db, set()).update(keys)
                for rec, _marker, _, _ in items:
                    broker.forward_out(
                        queue, rec.sequence_number, now_ms, reason=f"forwarded to {dest.name}"
                    )
                self.transferred += len(items)
                self._forget_markers(broker, [(db, k) for k in keys])
            elif isinstance(error, QuotaExceeded):
                self._dead_letter_full(src, dest, [rec for rec, _, _, _ in items], now_ms)
            else:  # the destination partition failed: the messages wait and are retried
                for rec, _marker, _, _ in items:
                    broker.make_ready(queue, rec)  # if it is still stored
                self._retry_at[src] = now_ms + RETRY_MS
                self._pending.add(src)
            step_done(None)

        db.enqueue(
            [incoming for _, _, incoming, _ in items],
            [routes for _, _, _, routes in items],
            now_ms,
            applied,
        )
        db.put_forward_markers(keys, True)

    def _carried(self, rec: MessageRecord) -> dict[str, bytes] | None:
        """Property changes a message carries on (abandon's properties to modify, and its
        dead-letter reason and description, which Azure keeps as application properties)."""
        carried = dict(rec.property_overrides or {})
        encode = self.router.encode_value
        if encode is not None:
            if rec.dead_letter_reason is not None:
                carried["DeadLetterReason"] = encode(rec.dead_letter_reason)
            if rec.dead_letter_description is not None:
                carried["DeadLetterErrorDescription"] = encode(rec.dead_letter_description)
        return carried or None

    def _forget_markers(
        self, broker: PartitionBroker, done: list[tuple[PartitionBroker, bytes]]
    ) -> None:
        """Once the source deletions are committed, delete the markers at the destinations."""

        def source_committed(error: Exception | None) -> None:
            if error is not None:
                return  # the source copies are still there: the markers must stay
            by_dest: dict[PartitionBroker, list[bytes]] = {}
            for db, key in done:
                by_dest.setdefault(db, []).append(key)
            for db, keys in by_dest.items():
                held = self._markers.get(db)
                if held is not None:
                    held.difference_update(keys)
                db.put_forward_markers(keys, False)

        broker.after_commit(source_committed)

    def _dead_letter(
        self, src: _Source, rec: MessageRecord, now_ms: int, reason: str, description: str
    ) -> None:
        """Move a message that cannot be forwarded to its source's transfer dead-letter queue."""
        tdlq = base_of(src.queue) + TRANSFER_DLQ_SUFFIX
        src.broker.forward_out(src.queue, rec.sequence_number, now_ms, tdlq, reason, description)
        self.transfer_dead_lettered += 1

    def _dead_letter_full(
        self,
        src: _Source,
        dest: ForwardingEntity,
        recs: Sequence[MessageRecord],
        now_ms: int,
    ) -> None:
        """Dead-letter messages refused because the destination has no room left."""
        description = f"The destination '{dest.name}' is full (MaxSizeInMegabytes reached)."
        for rec in recs:
            self._dead_letter(src, rec, now_ms, FULL_REASON, description)

    def _step_done(self, src: _Source) -> None:
        self._busy.discard(src)
        self._after_step(src)

    def _after_step(self, src: _Source) -> None:
        if src.queue in src.broker.queues and src.broker.has_ready_any(src.queue):
            self._pending.add(src)
            self.router.wake()


def _carry_properties(routes: list[Route], carried: dict[str, bytes] | None) -> list[Route]:
    """The routes with the carried property changes under each rule action's own."""
    if not carried:
        return routes
    return [
        Route(
            r.queue,
            {**carried, **(r.overrides or {})},
            r.dead_letter_reason,
            r.dead_letter_description,
        )
        for r in routes
    ]


def transfer_counts(entity: ForwardingEntity) -> dict[str, dict[str, int]]:
    """Per queue or subscription (by sub-queue name): messages waiting to be forwarded
    (Azure's TransferMessageCount) and in its transfer dead-letter queue
    (TransferDeadLetterMessageCount)."""
    out: dict[str, dict[str, int]] = {}
    for broker in entity.partitions:
        for name, sq in broker.queues.items():
            base = base_of(name)
            if name.endswith(TRANSFER_DLQ_SUFFIX):
                key = "transfer_dead_letter"
            elif forward_target(entity, name) is not None:
                key = "transfer"
            else:
                continue
            counts = out.setdefault(base, {"transfer": 0, "transfer_dead_letter": 0})
            counts[key] += sum(sq.counts)  # every stored message (any state)
    return out


def _refusal(
    dest: ForwardingEntity | None, target: str, rec: MessageRecord
) -> tuple[str, str] | None:
    """Why a message cannot be forwarded at all (reason, description), or None."""
    if dest is None:
        return NOT_FOUND_REASON, f"The auto-forwarding destination '{target}' does not exist."
    if rec.transfer_hops + 1 > MAX_HOPS:
        return HOP_LIMIT_REASON, HOP_LIMIT_DESCRIPTION
    try:
        dest.check_sendable()
    except ServiceBusError as exc:
        return DISABLED_REASON, exc.description
    if dest.spec.requires_session and rec.session_id is None:
        return (
            NO_SESSION_REASON,
            f"The destination '{dest.name}' requires sessions and the message has no SessionId.",
        )
    return None


def _dest_partition(dest: ForwardingEntity, rec: MessageRecord, marker: bytes) -> int:
    """[P9] the partition the message's key names at the destination; key-less messages go
    to a partition derived from the source message, the same on every retry."""
    n = len(dest.partitions)
    if n == 1:
        return 0
    try:
        key = partition_key_of(
            rec.session_id,
            rec.partition_key,
            rec.message_id,
            dest.spec.requires_duplicate_detection,
        )
    except ServiceBusError:
        key = None
    if key is not None:
        return partition_for_key(key, n)
    return zlib.crc32(marker) % n
