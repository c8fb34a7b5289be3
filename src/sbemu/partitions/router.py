"""Entities and their partitions: routing sends, serving receivers, finding locks.

An Entity is a queue or topic made of one partition (not partitioned) or several
[SB partitioning P1-P3]. Sends are routed by key [P6, P7] or round-robin [P8]; a receiver
sees one EntityView that draws from every partition [P10]; lock tokens carry their partition
id so settlement goes straight to the right broker.

The router never reads a clock or touches a socket: callers pass `now_ms`. It asks for a
flush through the `wake` callable whenever a broker has pending writes or a view has
pending dispatch work; the server then calls run_pending() and commits dirty brokers.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path

from ..errors import (
    EntityAlreadyExists,
    EntityNotFound,
    ServiceBusError,
)
from . import registry
from .broker import PartitionBroker
from .commits import DirtyPartitions
from .completions import Done
from .dispatch import EntityView
from .entity import Entity
from .entitystatus import EntitySettings
from .forwarding import Forwarder, forward_target
from .idle import IdleTracker
from .layout import entity_dir, open_partitions, retire_entity_dir, stale_entity_dirs
from .purging import PurgeJob
from .records import MessageRecord
from .resend import ViewOf, incoming_from_record
from .specs import MIB, EntitySpec, resolve_view_name, with_scheduled
from .store import PartitionStore
from .subqueue import SessionLock, SubQueueSettings
from .subscriptions import Subscriptions, SubscriptionSpec, subscription_queue
from .transitions import Route

RELEASE_RESIDENT_MS = 2_000  # how often the partitions unmap the store pages they touched


def _forwards(entity: Entity, queue: str) -> bool:
    """Whether the entity's sub-queue forwards (ForwardTo, ForwardDeadLetteredMessagesTo)."""
    return forward_target(entity, queue) is not None


# settings for a sub-queue opened only to be purged (no receiver ever sees it)
UNNAMED_QUEUE_SETTINGS = SubQueueSettings(60_000, None, None, False, None)


def _notify_session_lost(lock: SessionLock) -> None:
    """Tell the receiver holding a session that its lock expired (it detaches the link)."""
    lock.owner.session_lost(lock)


class Router:
    """All entities of all namespaces, their partition brokers, and the pending-work sets."""

    def __init__(
        self,
        data_dir: Path,
        wake: Callable[[], None],
        encode_value: Callable[[object], bytes] | None = None,
        encode_symbol: Callable[[object], bytes] | None = None,
        view_of_record: ViewOf | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.view_of_record = view_of_record  # filter view of a stored message (fan-out)
        self._wake = wake
        self._encode_value = encode_value
        self.encode_value = encode_value  # encodes carried properties (forwarding)
        self._encode_symbol = encode_symbol
        self.log_bodies = False  # set before add_entity: bodies in the partition logs
        # set before add_entity: False opens the stores without fsync (sbemu serve --ephemeral)
        self.durable = True
        self.entities: dict[tuple[str, str], Entity] = {}
        self.to_commit = DirtyPartitions(wake)  # the group commit's to-do list
        self._pending_views: set[EntityView] = set()
        self._deferred_views: set[EntityView] = set()  # served in the next turn
        self._released_ms = 0
        self._release_next = 0  # the store whose pages go next (_release_resident)
        self._release_credit = 0.0  # the fraction of a store carried to the next tick
        # Called with (entity, sub-queue prefix or None) when an entity or subscription is
        # deleted at runtime: the server detaches the links on it (amqp:not-found).
        self.removal_listeners: list[Callable[[Entity, str | None], None]] = []
        self.forwarder = Forwarder(self)
        self.idle: IdleTracker[Entity] = IdleTracker()

    # ---------------------------------------------------------------- set-up
    def add_entity(self, spec: EntitySpec) -> Entity:
        """Open (or create) the partition stores of an entity and load them."""
        base = entity_dir(self.data_dir, spec.namespace, spec.name)
        partitions = open_partitions(
            spec, base, lambda pid, store: self._open_broker(spec, pid, store), self.durable
        )
        subscriptions = None
        if spec.kind == "topic":
            if self._encode_value is None or self._encode_symbol is None:
                raise ValueError("topics need value encoders for rule actions")
            subscriptions = Subscriptions(
                spec.name,
                spec.subscriptions,
                base / "rules.json",
                self._encode_value,
                self._encode_symbol,
            )
        entity = Entity(spec, partitions, subscriptions)
        entity.defer_dispatch = self._defer_dispatch
        for broker in partitions:
            broker.on_ready = self._ready_hook(entity, broker)
            broker.on_session_lost = _notify_session_lost
            broker.forwards = functools.partial(_forwards, entity)
            if subscriptions is not None:
                broker.fan_out = self._fan_out_hook(subscriptions)
        self.entities[(spec.namespace.lower(), spec.name.lower())] = entity
        return entity

    def _open_broker(self, spec: EntitySpec, pid: int, store: PartitionStore) -> PartitionBroker:
        """One partition's broker over its opened store, loaded (see layout.open_partitions)."""
        broker = PartitionBroker(
            store,
            namespace=spec.namespace,
            entity=spec.name,
            partition_id=pid,
            partitioned=spec.partitioned,
            queues=with_scheduled(spec),
            mark_dirty=self.to_commit.mark,
            mark_lazy=self.to_commit.mark_lazy,
        )
        broker.staging.log_bodies = self.log_bodies
        broker.health.max_bytes = spec.max_size_mb * MIB  # the quota, on stored byte counts
        broker.load()
        self.forwarder.load_markers(broker)
        return broker

    def _fan_out_hook(self, subscriptions: Subscriptions) -> Callable[[MessageRecord], list[Route]]:
        view_of = self.view_of_record

        def fan_out(rec: MessageRecord) -> list[Route]:
            return subscriptions.route(incoming_from_record(rec, view_of))

        return fan_out

    def wake(self) -> None:
        """Ask for a turn (run_pending and commits) soon."""
        self._wake()

    def _ready_hook(self, entity: Entity, broker: PartitionBroker) -> Callable[[str], None]:
        forwarder = self.forwarder

        def on_ready(queue: str) -> None:
            forwarder.notify(entity, broker, queue)
            if forwarder.has_work:
                self._wake()
            view = entity.views.get(queue)
            if view is not None and (view.consumers or view.session_waiters):
                self._pending_views.add(view)
                self._wake()

        return on_ready

    @property
    def dirty(self) -> set[PartitionBroker]:
        """Partitions with writes to commit in the next turn (see commits.DirtyPartitions)."""
        return self.to_commit.dirty

    def flush_lazy(self) -> None:
        """Make partitions with lazy writes only dirty: they commit in the next turn."""
        self.to_commit.flush_lazy()

    def tick_lazy(self) -> None:
        """The timer tick's share of the lazy writes (commits.DirtyPartitions.tick_lazy)."""
        self.to_commit.tick_lazy()

    # ---------------------------------------------------------------- lookup
    def lookup(self, namespace: str, path: str) -> tuple[Entity, EntityView]:
        """The entity and view a normalised path names; raises EntityNotFound."""
        ns = namespace.lower()
        names = [name for (n, name) in self.entities if n == ns]
        entity_name, sub = resolve_view_name(names, path)
        entity = self.entities[(ns, entity_name)]
        entity.touched = True
        view = entity.views.get(sub)
        if view is None:
            raise EntityNotFound(f"The messaging entity '{path}' could not be found.")
        entity.note_access(sub)  # a link attaching (AutoDeleteOnIdle)
        return entity, view

    # ---------------------------------------------------------------- turn work
    def _defer_dispatch(self, view: EntityView) -> None:
        """Serve `view` again in the next turn (a later loop pass), not in this one."""
        self._deferred_views.add(view)
        self._wake()

    def run_pending(self, now_ms: int) -> None:
        """Forward and serve views that got new messages since the last turn (and those a
        dispatch deferred to this turn)."""
        self.forwarder.pump(now_ms)
        if self._deferred_views:
            self._pending_views |= self._deferred_views
            self._deferred_views = set()
        while self._pending_views:
            views, self._pending_views = self._pending_views, set()
            for view in views:
                view.dispatch(now_ms)

    def has_pending(self) -> bool:
        """Whether views wait for a dispatch (run_pending has work)."""
        return bool(self._pending_views or self._deferred_views)

    def take_dirty(self) -> list[PartitionBroker]:
        """Brokers with writes to commit (lazy writes of theirs go along)."""
        return self.to_commit.take()

    def on_timer(self, now_ms: int) -> None:
        """Lock expiry, TTL expiry and scheduled activation on every partition."""
        if self.forwarder.on_timer(now_ms):
            self.forwarder.pump(now_ms)
        for entity in self.entities.values():
            for view in entity.views.values():
                if view.session_waiters:
                    view.expire_waiters(now_ms)
            for broker in entity.partitions:
                if not broker.health.serving and not (
                    broker.health.faulted and broker.recover(now_ms)
                ):
                    continue  # offline: its locks and timers wait until it is back
                broker.health.check_room(now_ms)
                deadline = broker.next_deadline()
                if deadline is not None and deadline <= now_ms:
                    broker.on_timer(now_ms)
        self._release_resident(now_ms)

    def _release_resident(self, now_ms: int) -> None:
        """Let go of the store pages the partitions touched, each store about every
        RELEASE_RESIDENT_MS (the backlog stays on disk and in the page cache, not in the
        server's resident set).

        Spread over the timer ticks, a few stores at a time in turn: releasing every store at
        once held the event loop for ~10 ms every 2 s with 18 stores (a latency spike for
        every message in flight then)."""
        elapsed = now_ms - self._released_ms
        if elapsed <= 0:
            return
        self._released_ms = now_ms
        stores = [b for e in self.entities.values() for b in e.partitions]
        if not stores:
            return
        # this tick's share of a full round per RELEASE_RESIDENT_MS (at least one store)
        due = (
            self._release_credit
            + len(stores) * min(elapsed, RELEASE_RESIDENT_MS) / RELEASE_RESIDENT_MS
        )
        count = min(len(stores), int(due))
        self._release_credit = due - count
        start = self._release_next % len(stores)
        for i in range(count):
            stores[(start + i) % len(stores)].release_resident()
        self._release_next = start + count

    def set_partition_online(self, namespace: str, entity: str, pid: int, online: bool) -> dict:
        """Operator command: take one partition out of service or bring it back."""
        found = self.entities.get((namespace.lower(), entity.lower()))
        if found is None:
            raise EntityNotFound(f"The messaging entity '{namespace}/{entity}' could not be found.")
        if not 0 <= pid < len(found.partitions):
            raise EntityNotFound(
                f"'{namespace}/{entity}' has partitions 0..{len(found.partitions) - 1}, not {pid}."
            )
        found.partitions[pid].set_online(online)
        return self.partition_status(found)

    def apply_settings(self, namespace: str, name: str, settings: EntitySettings) -> Entity:
        """(Re)apply an entity's runtime settings (Status, forwarding, idle deletion): they take
        effect at once, for open links too. Receivers that may no longer receive are detached
        with entity-disabled; receivers of a re-enabled entity are served again."""
        entity = self.entities.get((namespace.lower(), name.lower()))
        if entity is None:
            raise EntityNotFound(f"The messaging entity '{namespace}/{name}' could not be found.")
        entity.settings = settings
        self.forwarder.rescan(entity)
        for view in entity.views.values():
            if not view.receivable:
                continue
            try:
                entity.check_receive(view.queue)
            except ServiceBusError as exc:
                for consumer in list(view.consumers):
                    refuse = getattr(consumer, "refuse", None)
                    if refuse is not None:
                        refuse(exc)
                continue
            if view.consumers or view.session_waiters:
                self._pending_views.add(view)
        self._wake()
        return entity

    def idle_entities(self, now_ms: int) -> list[tuple[Entity, str | None]]:
        """Queues and topics (sub-queue None) and subscriptions (their sub-queue name) idle for
        their AutoDeleteOnIdle window: the server deletes them."""
        return self.idle.due(list(self.entities.values()), now_ms)

    @staticmethod
    def partition_status(entity: Entity) -> dict:
        """Health of an entity and each partition [P18: Limited when any is unhealthy]."""
        return registry.partition_status(entity)

    def close(self) -> None:
        """Close every store (after the final commit)."""
        for entity in self.entities.values():
            for broker in entity.partitions:
                broker.close()

    # ---------------------------------------------------------------- management (admin API)
    def entity_dir(self, namespace: str, name: str) -> Path:
        """Where an entity's partitions, manifest and rules live."""
        return entity_dir(self.data_dir, namespace, name)

    def get_entity(self, namespace: str, name: str) -> Entity | None:
        """An entity by namespace and name (any case), or None."""
        return self.entities.get((namespace.lower(), name.lower()))

    def _require(self, namespace: str, name: str) -> Entity:
        entity = self.get_entity(namespace, name)
        if entity is None:
            raise EntityNotFound(f"The messaging entity '{namespace}:{name}' could not be found.")
        return entity

    def _healthy_topic(self, namespace: str, topic: str) -> tuple[Entity, Subscriptions]:
        """A topic and its subscriptions for a subscription change; not-found, or 503 while
        a partition is down."""
        entity = self._require(namespace, topic)
        if entity.subscriptions is None:
            raise EntityNotFound(f"The messaging entity '{namespace}:{topic}' is not a topic.")
        self.check_healthy(entity)
        return entity, entity.subscriptions

    @staticmethod
    def check_healthy(entity: Entity) -> None:
        """[P17] management operations fail while a partition of the entity is unhealthy."""
        registry.check_healthy(entity)

    def create_entity(self, spec: EntitySpec, stamp: str) -> tuple[Entity, Path | None]:
        """A queue or topic created at runtime, empty: whatever lies where its directory goes
        (no live entity owns it) is moved aside first, named with ``stamp``; returns the
        entity and where that went (None: nothing was there). 409 when the name is taken."""
        if self.get_entity(spec.namespace, spec.name) is not None:
            raise EntityAlreadyExists(
                f"The messaging entity '{spec.namespace}:{spec.name}' already exists."
            )
        base = self.entity_dir(spec.namespace, spec.name)
        retired = retire_entity_dir(self.data_dir, base, stamp) if base.exists() else None
        return self.add_entity(spec), retired

    def drop_unnamed_subqueues(self, now_ms: int) -> dict[tuple[str, str], int]:
        """At start: purge the sub-queues a topic's stores hold that none of its subscriptions
        serves any more ({(namespace/topic, sub-queue): messages purged}); the commit loop
        commits what this staged."""
        dropped: dict[tuple[str, str], int] = {}
        for entity in self.entities.values():
            if entity.spec.kind != "topic":
                continue
            for broker in entity.partitions:
                gone = broker.drop_unnamed_queues(UNNAMED_QUEUE_SETTINGS, now_ms)
                for name, count in gone.items():
                    key = (f"{entity.spec.namespace}/{entity.name}", name)
                    dropped[key] = dropped.get(key, 0) + count
        return dropped

    def retire_stale(self, stamp: str) -> list[tuple[Path, Path]]:
        """Move aside every entity directory no live entity owns (at start, once the
        configured and catalogued entities are open): (old place, new place) for each."""
        live = [self.entity_dir(e.spec.namespace, e.name) for e in self.entities.values()]
        return [
            (base, retire_entity_dir(self.data_dir, base, stamp))
            for base in stale_entity_dirs(self.data_dir, live)
        ]

    def update_entity(self, spec: EntitySpec) -> Entity:
        """New settings for an existing entity; partitioning can never change [P4].

        Lock duration, delivery count, TTL and dead-lettering apply from the next lock or
        delivery; the spec's subscriptions must be the entity's current ones.
        """
        entity = self._require(spec.namespace, spec.name)
        self.check_healthy(entity)
        registry.update_entity(entity, spec)
        return entity

    def remove_entity(self, namespace: str, name: str) -> Entity:
        """Take an entity out of service (no new links, current ones detached with not-found).

        The caller waits for in-flight commits, then calls drop_entity_data().
        """
        entity = self._require(namespace, name)
        self.check_healthy(entity)
        del self.entities[(namespace.lower(), name.lower())]
        entity.deleted = True  # links still holding it get not-found
        self._retire_views(entity, None)
        self.forwarder.forget(entity)
        self.idle.forget(entity)
        return entity

    def _retire_views(self, entity: Entity, prefix: str | None) -> None:
        for listener in list(self.removal_listeners):
            listener(entity, prefix)
        for queue, view in list(entity.views.items()):
            if prefix is not None and not (queue == prefix or queue.startswith(prefix + "/")):
                continue
            waiters, view.session_waiters = view.session_waiters, []
            for waiter in waiters:
                waiter.callback(None)
            view.consumers.clear()
            self._pending_views.discard(view)
            self._deferred_views.discard(view)
            if prefix is not None:
                del entity.views[queue]

    def drop_entity_data(self, entity: Entity) -> None:
        """Close a removed entity's stores and delete its directory (after its last commit)."""
        for broker in entity.partitions:
            self.to_commit.forget(broker)
            broker.close()
        shutil.rmtree(self.entity_dir(entity.spec.namespace, entity.name), ignore_errors=True)

    def add_subscription(
        self,
        namespace: str,
        topic: str,
        spec: SubscriptionSpec,
        subqueues: dict[str, SubQueueSettings],
    ) -> Entity:
        """A subscription created at runtime: its sub-queues on every partition, its rules."""
        entity, subs = self._healthy_topic(namespace, topic)
        registry.add_subscription(namespace, topic, entity, subs, spec, subqueues)
        return entity

    def update_subscription(
        self,
        namespace: str,
        topic: str,
        spec: SubscriptionSpec,
        subqueues: dict[str, SubQueueSettings],
    ) -> Entity:
        """New delivery settings of a subscription (from the next lock or delivery)."""
        entity, subs = self._healthy_topic(namespace, topic)
        registry.update_subscription(entity, subs, spec, subqueues)
        return entity

    def remove_subscription(
        self, namespace: str, topic: str, name: str, now_ms: int, done: Done
    ) -> None:
        """Delete a subscription: detach its links, delete its messages and rules."""
        entity, subs = self._healthy_topic(namespace, topic)
        subs.subscription(name)  # raises EntityNotFound
        prefix = subscription_queue(name)
        self._retire_views(entity, prefix)
        self.idle.forget(entity, prefix)
        registry.remove_subscription(entity, subs, name, now_ms, done)

    def purge(
        self, namespace: str, entity_name: str | None, now_ms: int, done: Done
    ) -> dict[str, int]:
        """Delete every message (active, locked, deferred, scheduled, dead-lettered) of one
        entity, or of every entity of a namespace when ``entity_name`` is None, at once. Each
        message is logged as purged; `done` runs after the commits. Returns messages purged
        per entity."""
        return registry.purge(self._purged(namespace, entity_name), now_ms, done)

    def start_purge(self, namespace: str, entity_name: str | None) -> PurgeJob:
        """purge() as a job done a slice at a time (partitions/purging.py): the caller steps
        it, letting the loop serve others between steps, then finishes it."""
        return registry.start_purge(self._purged(namespace, entity_name))

    def _purged(self, namespace: str, entity_name: str | None) -> list[Entity]:
        """The entities a purge of `entity_name` (None: every one) in `namespace` covers."""
        if entity_name is None:
            ns = namespace.lower()
            entities = [e for (n, _), e in self.entities.items() if n == ns]
            if not entities and ns not in {n for n, _ in self.entities}:
                raise EntityNotFound(f"The namespace '{namespace}' has no entities.")
        else:
            entities = [self._require(namespace, entity_name)]
        return entities
