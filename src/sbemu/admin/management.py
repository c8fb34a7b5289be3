"""The management plane: entities created, changed and deleted at runtime, purge, runtime info.

What belongs here: turning descriptions (sbemu.admin.catalog) into router specs, keeping the
catalog in step, quotas [P19], partitioning rules [P4, P5, P17, P18], and the counts the admin
API reports. What does not: HTTP and XML (sbemu.admin.atom), sockets, LMDB (the router and its
brokers). Runtime entities are built by the same builder as configured ones
(sbemu.partitions.specs: queue_spec, topic_spec, entity_settings), so a runtime entity behaves
exactly like a configured one; the server hands in ``settle`` (wait until given partitions
have no pending or in-flight commit).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ..config import (
    DEFAULT_RULE,
    MAX_ENTITIES,
    MAX_PARTITIONED_ENTITIES,
    NamespaceConfig,
    QueueConfig,
    TopicConfig,
    missing_forward_targets,
)
from ..errors import (
    ArgumentError,
    EntityAlreadyExists,
    EntityNotFound,
    InvalidOperation,
    QuotaExceeded,
    ServiceBusError,
)
from ..partitions import (
    MAIN,
    Entity,
    EntitySpec,
    PartitionBroker,
    Router,
    RuleSource,
    entity_settings,
    message_counts,
    queue_spec,
    topic_spec,
)
from .catalog import (
    READ_ONLY,
    Catalog,
    from_queue_config,
    from_subscription_config,
    from_topic_config,
    new_description,
    queue_config,
    subscription_config,
    topic_config,
    validate,
)
from .explorer import step_through

__all__ = ["Management"]

log = logging.getLogger("sbemu.management")


class Management:
    """Runtime entity lifecycle over the router, with the durable catalog."""

    def __init__(
        self,
        router: Router,
        namespaces: tuple[NamespaceConfig, ...],
        data_dir: Path,
        settle: Callable[[list[PartitionBroker]], Awaitable[None]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.router = router
        self.namespaces = {ns.name.lower(): ns for ns in namespaces}
        self.default_namespace = namespaces[0].name.lower()
        self.catalog = Catalog(data_dir)
        self.settle = settle
        self.clock = clock
        self.started_ms = self.now_ms()
        self._lock = asyncio.Lock()
        self._deleting: set[tuple[str, str]] = set()  # (namespace, name) until its data is gone

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def namespace(self, name: str | None) -> NamespaceConfig:
        """A namespace by name or host label; the first configured one otherwise."""
        if name:
            low = name.lower()
            for candidate in (low, low.split(".", 1)[0]):
                if candidate in self.namespaces:
                    return self.namespaces[candidate]
        return self.namespaces[self.default_namespace]

    # ------------------------------------------------------------------ start-up
    def seed(self) -> None:
        """Configured entities, with the catalog laid over them (the API's changes win)."""
        now = self.now_ms()
        for ns in self.namespaces.values():
            cat = self.catalog.namespace(ns.name)
            premium = ns.premium_partitions
            queues: dict[str, dict[str, Any]] = {}
            topics: dict[str, dict[str, Any]] = {}
            subs: dict[str, dict[str, dict[str, Any]]] = {}
            rules: dict[tuple[str, str], tuple[Any, ...]] = {}
            for q in ns.queues:
                queues[q.name.lower()] = from_queue_config(q, premium) | {"created_ms": now}
            for t in ns.topics:
                topics[t.name.lower()] = from_topic_config(t, premium) | {"created_ms": now}
                for s in t.subscriptions:
                    subs.setdefault(t.name.lower(), {})[s.name.lower()] = from_subscription_config(
                        s
                    ) | {"created_ms": now}
                    rules[(t.name.lower(), s.name.lower())] = s.rules
            for key, desc in cat["queues"].items():
                topics.pop(key, None)
                queues[key] = desc
            for key, desc in cat["topics"].items():
                queues.pop(key, None)
                topics[key] = desc
            for topic, items in cat["subscriptions"].items():
                if topic in topics:
                    subs.setdefault(topic, {}).update(items)
            for desc in queues.values():
                self._fill_times(desc, now)
                entity = self.router.add_entity(queue_spec(ns, queue_config(desc)))
                entity.description = desc
                self._applied(ns, entity)
            for key, desc in topics.items():
                self._fill_times(desc, now)
                sub_descs = subs.get(key, {})
                for sub in sub_descs.values():
                    self._fill_times(sub, now)
                configs = tuple(
                    subscription_config(d, rules.get((key, k), (DEFAULT_RULE,)))
                    for k, d in sub_descs.items()
                )
                entity = self.router.add_entity(topic_spec(ns, topic_config(desc, configs)))
                entity.description = desc | {"subscriptions": dict(sub_descs)}
                self._applied(ns, entity)
        for (topic, queue), count in self.router.drop_unnamed_subqueues(now).items():
            log.warning(
                "%s: %d message(s) of %s, which no subscription of the topic names any more, "
                "deleted (each logged as purged in its partition log): a subscription made "
                "again with that name starts empty, as on Azure",
                topic,
                count,
                queue,
            )
        for old, new in self.router.retire_stale(retire_stamp(now / 1000)):
            log.warning(
                "data of %s/%s, an entity neither the configuration nor the admin API names, "
                "moved aside to %s (its messages are gone from service, as on Azure; delete "
                "that directory when not needed)",
                unquote(old.parent.name),
                unquote(old.name),
                new,
            )
        for ns in self.namespaces.values():
            problem = self._forwarding_problem(ns)
            if problem is not None:
                # a destination deleted through the API: forwards to it end in the transfer
                # dead-letter queue (MessagingEntityNotFound), as in Azure; the server starts
                log.warning("namespace %s: %s", ns.name, problem)

    @staticmethod
    def _fill_times(desc: dict[str, Any], now: int) -> None:
        desc["created_ms"] = desc.get("created_ms") or now
        desc["updated_ms"] = desc.get("updated_ms") or desc["created_ms"]

    # ------------------------------------------------------------------ reads
    # ------------------------------------------------------------------ runtime settings
    @staticmethod
    def config_of(entity: Entity) -> QueueConfig | TopicConfig:
        """The config dataclass of an entity's current description."""
        desc = entity.description
        if entity.spec.kind == "queue":
            return queue_config(desc)
        subs = tuple(subscription_config(d) for d in desc.get("subscriptions", {}).values())
        return topic_config(desc, subs)

    def _applied(self, ns: NamespaceConfig, entity: Entity) -> None:
        """(Re)apply an entity's runtime settings (Status, ForwardTo,
        ForwardDeadLetteredMessagesTo, AutoDeleteOnIdle, and its subscriptions'): they take
        effect at once, for open links too."""
        cfg = self.config_of(entity)
        self.router.apply_settings(ns.name, cfg.name, entity_settings(cfg))

    def _forwarding_problem(
        self, ns: NamespaceConfig, changed: QueueConfig | TopicConfig | None = None
    ) -> str | None:
        """A ForwardTo or ForwardDeadLetteredMessagesTo naming no queue or topic of the
        namespace as it would be with `changed` (None: as it is). Loops and long chains are
        not refused, as Azure does not refuse them: a message that goes round stops after the
        hop limit in the transfer dead-letter queue (sbemu.partitions.forwarding)."""
        configs = {
            name: self.config_of(e)
            for (n, name), e in self.router.entities.items()
            if n == ns.name.lower() and e.description
        }
        if changed is not None:
            configs[changed.name.lower()] = changed
        missing = missing_forward_targets(configs.values(), configs.keys())
        return f"{missing[0]}: create the queue or topic first." if missing else None

    def _check_forwarding(self, ns: NamespaceConfig, changed: QueueConfig | TopicConfig) -> None:
        problem = self._forwarding_problem(ns, changed)
        if problem is not None:
            raise ArgumentError(f"SubCode=40000. {problem}")

    def entities(self, namespace: str, kind: str) -> list[Entity]:
        """Queues or topics of a namespace, sorted by name (as Azure lists them)."""
        ns = namespace.lower()
        found = [e for (n, _), e in self.router.entities.items() if n == ns and e.spec.kind == kind]
        return sorted(found, key=lambda e: e.name.lower())

    def entity(self, namespace: str, name: str) -> Entity | None:
        return self.router.get_entity(namespace, name)

    def subscriptions(self, entity: Entity) -> list[dict[str, Any]]:
        subs = entity.description.get("subscriptions", {})
        return [subs[k] for k in sorted(subs)]

    def subscription(self, entity: Entity, name: str) -> dict[str, Any] | None:
        subs = entity.description.get("subscriptions", {})
        return subs.get(name.lower())

    def rules(self, entity: Entity, sub_name: str) -> list[RuleSource]:
        assert entity.subscriptions is not None
        return list(entity.subscriptions.subscription(sub_name).sources)

    @staticmethod
    def filter_counts(entity: Entity) -> tuple[int, int]:
        """(SQL, correlation) filters over a topic's subscriptions, as api-version 2024-05
        reports them: True and False filters are SQL filters ($Default counts)."""
        sql = correlation = 0
        if entity.subscriptions is not None:
            for sub in entity.subscriptions.by_name.values():
                for source in sub.sources:
                    if source.filter_type == "correlation":
                        correlation += 1
                    else:
                        sql += 1
        return sql, correlation

    def counts(self, entity: Entity, prefix: str = MAIN) -> dict[str, int]:
        """Runtime counts summed over all partitions [P17/P18 aggregate]."""
        return message_counts(entity, prefix)

    @staticmethod
    def availability(entity: Entity) -> str:
        """[P18] Limited while any partition is out of service, else Available."""
        ok = all(b.health.serving and b.health.accepting for b in entity.partitions)
        return "Available" if ok else "Limited"

    # ------------------------------------------------------------------ queues and topics
    def _check_quota(self, ns: NamespaceConfig, desc: dict[str, Any]) -> None:
        """[P19] 10,000 entities per namespace; 100 partitioned ones on Standard."""
        mine = [e for (n, _), e in self.router.entities.items() if n == ns.name.lower()]
        if len(mine) >= MAX_ENTITIES:
            raise QuotaExceeded(
                f"The maximum entity count ({MAX_ENTITIES}) for the namespace '{ns.name}' has "
                "been reached."
            )
        if ns.premium_partitions is None and desc["enable_partitioning"]:
            partitioned = sum(1 for e in mine if e.spec.partitioned)
            if partitioned >= MAX_PARTITIONED_ENTITIES:
                raise QuotaExceeded(
                    f"The maximum number of partitioned entities ({MAX_PARTITIONED_ENTITIES}) "
                    f"for the namespace '{ns.name}' has been reached."
                )

    def _spec(
        self, ns: NamespaceConfig, kind: str, desc: dict[str, Any], entity: Entity | None
    ) -> EntitySpec:
        if kind == "queue":
            return queue_spec(ns, queue_config(desc))
        subs: tuple[Any, ...] = ()
        if entity is not None:
            subs = tuple(subscription_config(d) for d in self.subscriptions(entity))
        return topic_spec(ns, topic_config(desc, subs))

    def create_entity(self, namespace: str, kind: str, name: str, given: dict[str, Any]) -> Entity:
        """Create a queue or topic (409 when the name is taken by either)."""
        ns = self.namespace(namespace)
        if self.router.get_entity(ns.name, name) is not None:
            raise EntityAlreadyExists(
                f"The messaging entity '{ns.name}:{kind.title()}:{name}' already exists."
            )
        if (ns.name.lower(), name.lower()) in self._deleting:
            raise EntityAlreadyExists(
                f"The messaging entity '{ns.name}:{kind.title()}:{name}' is being deleted; retry "
                "in a moment."
            )
        desc = new_description(kind, name, given)
        validate(kind, desc, ns)
        self._check_quota(ns, desc)
        if kind == "queue":
            self._check_forwarding(ns, queue_config(desc))
        now = self.now_ms()
        desc["created_ms"] = desc["updated_ms"] = now
        # The catalog first: when the data dir cannot be written nothing is created (the
        # caller answers 503); when the entity's stores cannot be, the entry goes again.
        with self.catalog.undone_on_error():
            self.catalog.put(ns.name, kind, desc)
            entity, retired = self.router.create_entity(
                self._spec(ns, kind, desc, None), retire_stamp(now / 1000)
            )
        if retired is not None:
            log.warning(
                "%s %s/%s: data left by an earlier entity of that name moved aside to %s "
                "(a new entity starts empty; delete that directory when not needed)",
                kind,
                ns.name,
                name,
                retired,
            )
        entity.description = desc | ({"subscriptions": {}} if kind == "topic" else {})
        self._applied(ns, entity)
        log.info("created %s %s/%s", kind, ns.name, name)
        return entity

    def update_entity(self, namespace: str, kind: str, name: str, given: dict[str, Any]) -> Entity:
        """Update a queue or topic (PUT with If-Match: *); partitioning never changes [P4]."""
        ns = self.namespace(namespace)
        entity = self.router.get_entity(ns.name, name)
        if entity is None or entity.spec.kind != kind:
            raise EntityNotFound(f"Entity '{ns.name}:{kind.title()}:{name}' was not found.")
        old = {k: v for k, v in entity.description.items() if k != "subscriptions"}
        wanted = given.get("enable_partitioning")
        if wanted is not None and bool(wanted) != bool(old["enable_partitioning"]):
            raise InvalidOperation(
                f"SubCode=40000. Partitioning cannot be changed for {kind.title()} '{name}': "
                "EnablePartitioning can only be set when the entity is created."
            )
        size = given.get("max_size_mb")
        count = old["partition_count"]
        if size is not None and count > 1 and size % count == 0 and size // count <= 5120:
            given = given | {"max_size_mb": size // count}  # [P5] the SDK echoes the x16 size
        desc = dict(old)
        desc.update(
            {k: v for k, v in given.items() if k in old and k not in READ_ONLY and v is not None}
        )
        for key in ("forward_to", "forward_dead_lettered_messages_to", "user_metadata"):
            if key in old and key not in given:
                desc[key] = None  # absent from the PUT: cleared, as Azure does
        if kind == "queue" and bool(desc["requires_session"]) != bool(old["requires_session"]):
            raise InvalidOperation(
                "SubCode=40000. The value for the RequiresSession property of an existing Queue "
                "cannot be changed."
            )
        validate(kind, desc, ns, old)
        if kind == "queue":
            self._check_forwarding(ns, queue_config(desc))
        desc["updated_ms"] = self.now_ms()
        with self.catalog.undone_on_error():
            self.catalog.put(ns.name, kind, desc)  # first: see create_entity
            self.router.update_entity(self._spec(ns, kind, desc, entity))
        entity.touched = True  # AutoDeleteOnIdle: an update is activity
        entity.description = desc | (
            {"subscriptions": entity.description.get("subscriptions", {})}
            if kind == "topic"
            else {}
        )
        self._applied(ns, entity)
        log.info("updated %s %s/%s", kind, ns.name, name)
        return entity

    async def delete_entity(self, namespace: str, name: str) -> None:
        """Delete a queue or topic: links detached (not-found), partitions' data removed."""
        ns = self.namespace(namespace)
        async with self._lock:
            with self.catalog.undone_on_error():
                self.catalog.remove(ns.name, name)  # first: see create_entity
                entity = self.router.remove_entity(ns.name, name)
            key = (ns.name.lower(), name.lower())
            self._deleting.add(key)
            try:
                await self.settle(entity.partitions)
                # on the loop thread: nothing may commit to these stores any more; unlinking the
                # files is quick, and a same-named entity created next finds a clean directory
                self.router.drop_entity_data(entity)
            finally:
                self._deleting.discard(key)
        log.info("deleted %s %s/%s", entity.spec.kind, ns.name, name)

    # ------------------------------------------------------------------ subscriptions
    def _with_subscription(self, entity: Entity, desc: dict[str, Any]) -> TopicConfig:
        """The topic's config with this subscription description added or replaced."""
        subs = dict(entity.description.get("subscriptions", {}))
        subs[desc["name"].lower()] = desc
        return topic_config(
            entity.description, tuple(subscription_config(d) for d in subs.values())
        )

    def _topic(self, namespace: str, topic: str) -> tuple[NamespaceConfig, Entity]:
        ns = self.namespace(namespace)
        entity = self.router.get_entity(ns.name, topic)
        if entity is None or entity.spec.kind != "topic":
            raise EntityNotFound(f"Entity '{ns.name}:Topic:{topic}' was not found.")
        return ns, entity

    def _sub_parts(
        self, ns: NamespaceConfig, entity: Entity, desc: dict[str, Any], rules: tuple[Any, ...]
    ) -> tuple[Any, dict[str, Any]]:
        spec = topic_spec(ns, topic_config(entity.description, (subscription_config(desc, rules),)))
        return spec.subscriptions[0], dict(spec.subqueues)

    def create_subscription(
        self,
        namespace: str,
        topic: str,
        name: str,
        given: dict[str, Any],
        default_rule: RuleSource | None = None,
    ) -> dict[str, Any]:
        ns, entity = self._topic(namespace, topic)
        if self.subscription(entity, name) is not None:
            raise EntityAlreadyExists(
                f"The messaging entity '{ns.name}:Topic:{topic}|{name}' already exists."
            )
        desc = new_description("subscription", name, given)
        validate("subscription", desc, ns)
        now = self.now_ms()
        desc["created_ms"] = desc["updated_ms"] = now
        self._check_forwarding(ns, self._with_subscription(entity, desc))
        sub_spec, subqueues = self._sub_parts(ns, entity, desc, (DEFAULT_RULE,))
        if default_rule is not None:
            sub_spec = type(sub_spec)(
                sub_spec.name, (default_rule,), sub_spec.dead_letter_on_filter_exceptions
            )
        with self.catalog.undone_on_error():
            self.catalog.put(
                ns.name, "subscription", desc, topic=entity.name
            )  # first: see create_entity
            self.router.add_subscription(ns.name, topic, sub_spec, subqueues)
        entity.description.setdefault("subscriptions", {})[name.lower()] = desc
        self._applied(ns, entity)
        log.info("created subscription %s/%s/%s", ns.name, topic, name)
        return desc

    def update_subscription(
        self, namespace: str, topic: str, name: str, given: dict[str, Any]
    ) -> dict[str, Any]:
        ns, entity = self._topic(namespace, topic)
        old = self.subscription(entity, name)
        if old is None:
            raise EntityNotFound(f"Entity '{ns.name}:Topic:{topic}|{name}' was not found.")
        desc = dict(old)
        desc.update(
            {k: v for k, v in given.items() if k in old and k not in READ_ONLY and v is not None}
        )
        for key in ("forward_to", "forward_dead_lettered_messages_to", "user_metadata"):
            if key not in given:
                desc[key] = None
        if bool(desc["requires_session"]) != bool(old["requires_session"]):
            raise InvalidOperation(
                "SubCode=40000. The value for the RequiresSession property of an existing "
                f"Subscription cannot be changed ('{name}')."
            )
        validate("subscription", desc, ns, old)
        self._check_forwarding(ns, self._with_subscription(entity, desc))
        desc["updated_ms"] = self.now_ms()
        sub_spec, subqueues = self._sub_parts(ns, entity, desc, (DEFAULT_RULE,))
        with self.catalog.undone_on_error():
            self.catalog.put(
                ns.name, "subscription", desc, topic=entity.name
            )  # first: see create_entity
            self.router.update_subscription(ns.name, topic, sub_spec, subqueues)
        entity.touch_subscription(name)  # AutoDeleteOnIdle: an update is activity
        entity.description["subscriptions"][name.lower()] = desc
        self._applied(ns, entity)
        return desc

    async def delete_subscription(self, namespace: str, topic: str, name: str) -> None:
        ns, entity = self._topic(namespace, topic)
        if self.subscription(entity, name) is None:
            raise EntityNotFound(f"Entity '{ns.name}:Topic:{topic}|{name}' was not found.")
        done, on_done = _completion()
        with self.catalog.undone_on_error():
            self.catalog.remove(ns.name, name, topic=entity.name)  # first: see create_entity
            self.router.remove_subscription(ns.name, topic, name, self.now_ms(), on_done)
        entity.description["subscriptions"].pop(name.lower(), None)
        self._applied(ns, entity)
        error = await done
        if error is not None:
            raise error
        log.info("deleted subscription %s/%s/%s", ns.name, topic, name)

    # ------------------------------------------------------------------ rules
    def _sub_entity(self, namespace: str, topic: str, sub: str) -> Entity:
        ns, entity = self._topic(namespace, topic)
        if self.subscription(entity, sub) is None:
            raise EntityNotFound(f"Entity '{ns.name}:Topic:{topic}|{sub}' was not found.")
        return entity

    def create_rule(self, namespace: str, topic: str, sub: str, rule: RuleSource) -> RuleSource:
        entity = self._sub_entity(namespace, topic, sub)
        self.router.check_healthy(entity)
        assert entity.subscriptions is not None
        rule = dataclasses.replace(rule, created_ms=self.now_ms())
        try:
            entity.subscriptions.add_rule(sub, rule, self.now_ms())
        except ServiceBusError as exc:
            if exc.status_code == 409:
                raise EntityAlreadyExists(
                    f"The messaging entity '{entity.spec.namespace}:Topic:{topic}|{sub}|{rule.name}' "
                    "already exists."
                ) from None
            raise
        entity.touch_subscription(sub)  # AutoDeleteOnIdle: a rule added is activity
        return rule

    def update_rule(self, namespace: str, topic: str, sub: str, rule: RuleSource) -> RuleSource:
        entity = self._sub_entity(namespace, topic, sub)
        self.router.check_healthy(entity)
        assert entity.subscriptions is not None
        subscription = entity.subscriptions.subscription(sub)
        old = next((s for s in subscription.sources if s.name.lower() == rule.name.lower()), None)
        if old is None:
            raise EntityNotFound(
                f"Entity '{entity.spec.namespace}:Topic:{topic}|{sub}|{rule.name}' was not found."
            )
        new = dataclasses.replace(rule, name=old.name, created_ms=old.created_ms)
        new.compile()  # a bad rule is refused before anything changes
        entity.subscriptions.remove_rule(sub, old.name)
        entity.subscriptions.add_rule(sub, new, self.now_ms())
        entity.touch_subscription(sub)  # AutoDeleteOnIdle: an update is activity
        return new

    def delete_rule(self, namespace: str, topic: str, sub: str, rule_name: str) -> None:
        entity = self._sub_entity(namespace, topic, sub)
        self.router.check_healthy(entity)
        assert entity.subscriptions is not None
        try:
            entity.subscriptions.remove_rule(sub, rule_name)
        except EntityNotFound:
            raise EntityNotFound(
                f"Entity '{entity.spec.namespace}:Topic:{topic}|{sub}|{rule_name}' was not found."
            ) from None
        entity.touch_subscription(sub)  # AutoDeleteOnIdle: an update is activity

    # ------------------------------------------------------------------ purge
    def _purge_hint(self, name: str) -> str:
        entities = sorted((e.spec.namespace, e.name) for e in self.router.entities.values())
        return _purge_hint_text(name, entities, [ns.name for ns in self.namespaces.values()])

    async def purge(self, namespace: str, entity_name: str | None) -> dict[str, int]:
        """Delete every message of an entity (or of every entity of the namespace), DLQ,
        deferred and scheduled included; returns counts per entity once committed."""
        ns = self.namespace(namespace)
        if namespace.lower() not in self.namespaces:
            raise EntityNotFound(
                f"The namespace '{namespace}' does not exist. {self._purge_hint(namespace)}"
            )
        job = self.router.start_purge(ns.name, entity_name)
        await step_through(job, self.now_ms)
        done, on_done = _completion()
        job.finish(on_done)
        counts = job.counts
        error = await done
        if error is not None:
            raise error
        log.info(
            "purged %d message(s) from %s/%s", sum(counts.values()), ns.name, entity_name or "*"
        )
        return counts


def retire_stamp(now_s: float) -> str:
    """A UTC time stamp for a retired entity directory's name (``20261128T111500Z``)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_s))


def _purge_hint_text(name: str, entities: list[tuple[str, str]], namespaces: list[str]) -> str:
    """The next step for a purge target that names no namespace: the NAMESPACE/ENTITY
    spellings of entities called ``name``, else the namespaces there are."""
    matches = [f"{ns}/{entity}" for ns, entity in entities if entity.lower() == name.lower()]
    if matches:
        return f"To purge the entity, name its namespace too: {' or '.join(matches)}."
    return f"Name a namespace ({', '.join(namespaces)}) or NAMESPACE/ENTITY."


def _completion() -> tuple[asyncio.Future[Exception | None], Callable[[Exception | None], None]]:
    """A future and the Done callback that resolves it (once) with the commit's error."""
    future: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def on_done(error: Exception | None) -> None:
        if not future.done():
            future.set_result(error)

    return future, on_done
