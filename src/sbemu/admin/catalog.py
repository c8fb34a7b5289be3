"""Entity descriptions of the management plane and the durable runtime catalog.

A *description* is a plain dict of every property the admin clients round-trip (the SDK models'
``QueueProperties``, ``TopicProperties``, ``SubscriptionProperties``), keyed like the config
dataclasses' fields (``lock_duration_ms``, ``forward_to``, ...) plus what the config does not
carry (``status``, ``auto_delete_on_idle_ms``, ``user_metadata``, ...). Durations are
milliseconds, times are unix milliseconds. Azure's defaults apply to what a request leaves out.

The *catalog* (``<data dir>/catalog.json``) holds what the admin API created or changed, written
atomically (temp file, fsync, rename) after every change::

    {"format": 1,
     "namespaces": {"<namespace, lower case>": {
        "queues": {"<name, lower case>": {<queue description>}},
        "topics": {"<name, lower case>": {<topic description>}},
        "subscriptions": {"<topic, lower case>": {"<name, lower case>": {<description>}}}}}}

At start the configuration file seeds its entities, then the catalog is laid over it: an entity
(or subscription) the API created or changed keeps its API properties; entities the API never
touched follow the configuration. Rules live in each topic's ``rules.json`` (sbemu.partitions
.subscriptions), which wins over the configuration's rules.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..atomicfile import atomic_write
from ..config import (
    AZURE_MAX_SIZES_MB,
    DEFAULT_RULE,
    DUPLICATE_WINDOW_MAX_MS,
    LOCK_DURATION_MAX_MS,
    PREMIUM_MAX_MESSAGE_SIZE,
    STANDARD_MAX_MESSAGE_SIZE,
    STANDARD_PARTITION_COUNT,
    TEST_MAX_SIZES_MB,
    TIMESPAN_MAX_MS,
    NamespaceConfig,
    QueueConfig,
    RuleConfig,
    SubscriptionConfig,
    TopicConfig,
)
from ..errors import ArgumentError
from .tiers import check_message_size

__all__ = [
    "CATALOG_FILE",
    "Catalog",
    "from_queue_config",
    "from_subscription_config",
    "from_topic_config",
    "new_description",
    "queue_config",
    "subscription_config",
    "topic_config",
    "validate",
]

CATALOG_FILE = "catalog.json"
FORMAT = 1

# Azure's defaults for entities created through the admin API (REST reference, SDK docs).
AZURE_LOCK_DURATION_MS = 60_000  # PT1M
AZURE_MAX_DELIVERY_COUNT = 10
AZURE_DUPLICATE_WINDOW_MS = 600_000  # PT10M
AZURE_DUPLICATE_WINDOW_MIN_MS = 20_000  # PT20S
LOCK_DURATION_MIN_MS = 5_000
AUTO_DELETE_MIN_MS = 300_000  # PT5M
STATUSES = ("Active", "Disabled", "SendDisabled", "ReceiveDisabled")
QUEUE_STATUSES = STATUSES
TOPIC_STATUSES = ("Active", "Disabled", "SendDisabled")
_ENTITY_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_./-]{0,258}[A-Za-z0-9_])?\Z")
_SUB_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,48}[A-Za-z0-9_])?\Z")

_COMMON: dict[str, Any] = {
    "status": "Active",
    "user_metadata": None,
    "auto_delete_on_idle_ms": TIMESPAN_MAX_MS,
    "enable_batched_operations": True,
    "default_message_ttl_ms": TIMESPAN_MAX_MS,
    "created_ms": 0,
    "updated_ms": 0,
}
QUEUE_DEFAULTS: dict[str, Any] = {
    **_COMMON,
    "lock_duration_ms": AZURE_LOCK_DURATION_MS,
    "max_size_mb": 1024,
    "requires_duplicate_detection": False,
    "requires_session": False,
    "dead_lettering_on_message_expiration": False,
    "duplicate_detection_window_ms": AZURE_DUPLICATE_WINDOW_MS,
    "max_delivery_count": AZURE_MAX_DELIVERY_COUNT,
    "forward_to": None,
    "forward_dead_lettered_messages_to": None,
    "enable_partitioning": False,
    "partition_count": 1,
    "enable_express": False,
    "is_anonymous_accessible": False,
    "support_ordering": True,
    "max_message_size_kb": None,  # the tier's (sbemu.admin.tiers)
    "authorization_rules": "",
}
TOPIC_DEFAULTS: dict[str, Any] = {
    **_COMMON,
    "max_size_mb": 1024,
    "requires_duplicate_detection": False,
    "duplicate_detection_window_ms": AZURE_DUPLICATE_WINDOW_MS,
    "enable_partitioning": False,
    "partition_count": 1,
    "enable_express": False,
    "is_anonymous_accessible": False,
    "support_ordering": True,
    "filtering_messages_before_publishing": False,
    "enable_subscription_partitioning": False,
    "max_message_size_kb": None,  # the tier's (sbemu.admin.tiers)
    "authorization_rules": "",
}
SUBSCRIPTION_DEFAULTS: dict[str, Any] = {
    **_COMMON,
    "lock_duration_ms": AZURE_LOCK_DURATION_MS,
    "requires_session": False,
    "dead_lettering_on_message_expiration": False,
    "dead_lettering_on_filter_evaluation_exceptions": True,
    "max_delivery_count": AZURE_MAX_DELIVERY_COUNT,
    "forward_to": None,
    "forward_dead_lettered_messages_to": None,
}
DEFAULTS = {"queue": QUEUE_DEFAULTS, "topic": TOPIC_DEFAULTS, "subscription": SUBSCRIPTION_DEFAULTS}
# Properties an update may change; the rest stay as created (P4: partitioning never changes).
READ_ONLY = ("created_ms", "partition_count", "name")


def new_description(kind: str, name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """A full description: Azure's defaults, overridden by what was given."""
    desc = dict(DEFAULTS[kind])
    desc.update({k: v for k, v in given.items() if k in desc and v is not None})
    desc["name"] = name
    return desc


def _bad(message: str) -> ArgumentError:
    return ArgumentError(message)


def validate(
    kind: str, desc: dict[str, Any], ns: NamespaceConfig, old: Mapping[str, Any] | None = None
) -> None:
    """Azure's limits on a description; raises ArgumentError (400) naming the property.
    `old`: the description an update replaces (a configured SbemuTestAutoDeleteOnIdle window
    below Azure's minimum may be sent back unchanged, as the SDKs' get-then-update does).

    Also applies the namespace tier: a Premium namespace partitions every entity [P3] and
    allows messages up to 100 MB; Standard has 16 partitions [P2] and 256 KB messages [P19]
    (sbemu.admin.tiers).
    """
    name = desc["name"]
    pattern = _SUB_NAME if kind == "subscription" else _ENTITY_NAME
    if not isinstance(name, str) or not pattern.match(name) or "//" in name:
        raise _bad(
            f"The entity name '{name}' is invalid: use letters, digits, periods, hyphens, "
            "underscores" + (" and slashes" if kind != "subscription" else "") + ", starting "
            "and ending with a letter or digit."
        )
    if "lock_duration_ms" in desc and not (
        LOCK_DURATION_MIN_MS <= desc["lock_duration_ms"] <= LOCK_DURATION_MAX_MS
    ):
        raise _bad("The supplied lock time exceeds the allowed maximum of '5' minutes.")
    if "max_delivery_count" in desc and desc["max_delivery_count"] < 1:
        raise _bad("MaxDeliveryCount must be at least 1.")
    if desc["default_message_ttl_ms"] < 1_000:
        raise _bad("DefaultMessageTimeToLive must be at least 1 second.")
    idle_ms = desc["auto_delete_on_idle_ms"]
    if idle_ms < AUTO_DELETE_MIN_MS and not (old and idle_ms == old.get("auto_delete_on_idle_ms")):
        raise _bad("AutoDeleteOnIdle must be at least 5 minutes (PT5M).")
    if "duplicate_detection_window_ms" in desc and not (
        AZURE_DUPLICATE_WINDOW_MIN_MS
        <= desc["duplicate_detection_window_ms"]
        <= DUPLICATE_WINDOW_MAX_MS
    ):
        raise _bad("DuplicateDetectionHistoryTimeWindow must be between PT20S and P7D.")
    statuses = TOPIC_STATUSES if kind == "topic" else STATUSES
    if desc["status"] not in statuses:
        raise _bad(
            f"Status '{desc['status']}' is not valid here: use one of {', '.join(statuses)}."
        )
    if "max_size_mb" in desc:
        size = desc["max_size_mb"]
        if size not in AZURE_MAX_SIZES_MB and size not in TEST_MAX_SIZES_MB:
            raise _bad(
                f"MaxSizeInMegabytes {size} is not valid: use 1024, 2048, 3072, 4096 or 5120 "
                "(or a power of two below 1024 for tests)."
            )
    for key in ("forward_to", "forward_dead_lettered_messages_to"):
        # A full URL (sb://<host>/<name>, as the SDKs send it) or a bare name; forwarding to
        # the entity itself or round a cycle is accepted as Azure accepts it: a message stops
        # after the hop limit, in the transfer dead-letter queue (sbemu.partitions.forwarding).
        target = desc.get(key)
        if target is not None and isinstance(target, str):
            desc[key] = _forward_target(target) or None
    if kind == "subscription":
        return
    premium = ns.premium_partitions
    if premium is not None:
        desc["enable_partitioning"] = True
        desc["partition_count"] = premium
    else:
        desc["partition_count"] = STANDARD_PARTITION_COUNT if desc["enable_partitioning"] else 1
    kb = desc.get("max_message_size_kb")
    check_message_size(
        desc, ns, given=kb is not None and kb != (old or {}).get("max_message_size_kb")
    )


def _forward_target(value: str) -> str:
    """A ForwardTo value as the SDKs send it (full URL or bare name) -> entity path."""
    text = value.strip()
    match = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*/?(.*)$", text)
    return (match.group(1) if match else text).strip("/")


# ------------------------------------------------------------------ config <-> description
def _idle_ms(value: int | None) -> int:
    """AutoDeleteOnIdle of a config entity (None: never, which Azure writes as TimeSpan.MaxValue)."""
    return TIMESPAN_MAX_MS if value is None else value


def _idle_config(value: int) -> int | None:
    return None if value >= TIMESPAN_MAX_MS else value


def from_queue_config(q: QueueConfig, premium: int | None) -> dict[str, Any]:
    return new_description(
        "queue",
        q.name,
        {
            "lock_duration_ms": q.lock_duration_ms,
            "max_delivery_count": q.max_delivery_count,
            "default_message_ttl_ms": q.default_message_ttl_ms,
            "dead_lettering_on_message_expiration": q.dead_lettering_on_message_expiration,
            "requires_duplicate_detection": q.requires_duplicate_detection,
            "duplicate_detection_window_ms": q.duplicate_detection_window_ms,
            "requires_session": q.requires_session,
            "forward_to": q.forward_to,
            "forward_dead_lettered_messages_to": q.forward_dead_lettered_messages_to,
            "partition_count": q.partition_count,
            "max_size_mb": q.max_size_mb,
            "enable_partitioning": q.enable_partitioning or q.partition_count > 1,
            "max_message_size_kb": q.max_message_size_kb
            or (PREMIUM_MAX_MESSAGE_SIZE if premium else STANDARD_MAX_MESSAGE_SIZE) // 1024,
            "status": q.status,
            "auto_delete_on_idle_ms": _idle_ms(q.auto_delete_on_idle_ms),
        },
    )


def from_topic_config(t: TopicConfig, premium: int | None) -> dict[str, Any]:
    return new_description(
        "topic",
        t.name,
        {
            "default_message_ttl_ms": t.default_message_ttl_ms,
            "requires_duplicate_detection": t.requires_duplicate_detection,
            "duplicate_detection_window_ms": t.duplicate_detection_window_ms,
            "partition_count": t.partition_count,
            "max_size_mb": t.max_size_mb,
            "enable_partitioning": t.enable_partitioning or t.partition_count > 1,
            "max_message_size_kb": t.max_message_size_kb
            or (PREMIUM_MAX_MESSAGE_SIZE if premium else STANDARD_MAX_MESSAGE_SIZE) // 1024,
            "status": t.status,
            "auto_delete_on_idle_ms": _idle_ms(t.auto_delete_on_idle_ms),
        },
    )


def from_subscription_config(s: SubscriptionConfig) -> dict[str, Any]:
    return new_description(
        "subscription",
        s.name,
        {
            "lock_duration_ms": s.lock_duration_ms,
            "max_delivery_count": s.max_delivery_count,
            "default_message_ttl_ms": s.default_message_ttl_ms,
            "dead_lettering_on_message_expiration": s.dead_lettering_on_message_expiration,
            "dead_lettering_on_filter_evaluation_exceptions": (
                s.dead_lettering_on_filter_evaluation_exceptions
            ),
            "requires_session": s.requires_session,
            "forward_to": s.forward_to,
            "forward_dead_lettered_messages_to": s.forward_dead_lettered_messages_to,
            "status": s.status,
            "auto_delete_on_idle_ms": _idle_ms(s.auto_delete_on_idle_ms),
        },
    )


def queue_config(d: Mapping[str, Any]) -> QueueConfig:
    """The config dataclass of a queue description (what the router spec is built from)."""
    return QueueConfig(
        status=d["status"],
        auto_delete_on_idle_ms=_idle_config(d["auto_delete_on_idle_ms"]),
        name=d["name"],
        lock_duration_ms=d["lock_duration_ms"],
        max_delivery_count=d["max_delivery_count"],
        default_message_ttl_ms=d["default_message_ttl_ms"],
        dead_lettering_on_message_expiration=d["dead_lettering_on_message_expiration"],
        requires_duplicate_detection=d["requires_duplicate_detection"],
        duplicate_detection_window_ms=d["duplicate_detection_window_ms"],
        requires_session=d["requires_session"],
        forward_to=d["forward_to"],
        forward_dead_lettered_messages_to=d["forward_dead_lettered_messages_to"],
        partition_count=d["partition_count"],
        max_size_mb=d["max_size_mb"],
        enable_partitioning=d["enable_partitioning"],
        max_message_size_kb=d.get("max_message_size_kb"),
    )


def subscription_config(
    d: Mapping[str, Any], rules: tuple[RuleConfig, ...] = (DEFAULT_RULE,)
) -> SubscriptionConfig:
    return SubscriptionConfig(
        status=d["status"],
        auto_delete_on_idle_ms=_idle_config(d["auto_delete_on_idle_ms"]),
        name=d["name"],
        lock_duration_ms=d["lock_duration_ms"],
        max_delivery_count=d["max_delivery_count"],
        default_message_ttl_ms=d["default_message_ttl_ms"],
        dead_lettering_on_message_expiration=d["dead_lettering_on_message_expiration"],
        dead_lettering_on_filter_evaluation_exceptions=d[
            "dead_lettering_on_filter_evaluation_exceptions"
        ],
        requires_session=d["requires_session"],
        forward_to=d["forward_to"],
        forward_dead_lettered_messages_to=d["forward_dead_lettered_messages_to"],
        rules=rules,
    )


def topic_config(
    d: Mapping[str, Any], subscriptions: tuple[SubscriptionConfig, ...]
) -> TopicConfig:
    return TopicConfig(
        status=d["status"],
        auto_delete_on_idle_ms=_idle_config(d["auto_delete_on_idle_ms"]),
        name=d["name"],
        default_message_ttl_ms=d["default_message_ttl_ms"],
        requires_duplicate_detection=d["requires_duplicate_detection"],
        duplicate_detection_window_ms=d["duplicate_detection_window_ms"],
        enable_partitioning=d["enable_partitioning"],
        partition_count=d["partition_count"],
        max_size_mb=d["max_size_mb"],
        subscriptions=subscriptions,
        max_message_size_kb=d.get("max_message_size_kb"),
    )


# ------------------------------------------------------------------ the durable catalog
class Catalog:
    """``catalog.json``: entities created or changed through the admin API."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / CATALOG_FILE
        self.data: dict[str, Any] = {"format": FORMAT, "namespaces": {}}
        if self.path.exists():
            loaded = json.loads(self.path.read_text())
            if not isinstance(loaded, dict) or loaded.get("format") != FORMAT:
                raise ValueError(f"{self.path}: not a format-{FORMAT} sbemu catalog")
            self.data = loaded

    def _ns(self, namespace: str) -> dict[str, Any]:
        spaces = self.data["namespaces"]
        ns = spaces.setdefault(namespace.lower(), {})
        for key in ("queues", "topics", "subscriptions"):
            ns.setdefault(key, {})
        return ns

    def namespace(self, namespace: str) -> dict[str, Any]:
        """The catalog of one namespace (queues, topics, subscriptions), maybe empty."""
        return self._ns(namespace)

    def put(
        self, namespace: str, kind: str, desc: Mapping[str, Any], topic: str | None = None
    ) -> None:
        """Add or replace an entity's description and save; raises OSError (and changes
        nothing) when the file cannot be written."""
        before = copy.deepcopy(self.data)
        try:
            self._put(namespace, kind, desc, topic)
            self.save()
        except OSError:
            self.data = before  # memory and disk keep agreeing: the change did not happen
            raise

    def _put(self, namespace: str, kind: str, desc: Mapping[str, Any], topic: str | None) -> None:
        ns = self._ns(namespace)
        key = str(desc["name"]).lower()
        if kind == "queue":
            ns["topics"].pop(key, None)
            ns["subscriptions"].pop(key, None)
            ns["queues"][key] = dict(desc)
        elif kind == "topic":
            ns["queues"].pop(key, None)
            ns["topics"][key] = dict(desc)
        else:
            assert topic is not None
            ns["subscriptions"].setdefault(topic.lower(), {})[key] = dict(desc)

    def remove(self, namespace: str, name: str, topic: str | None = None) -> None:
        """Forget an entity (or subscription) and save; raises OSError (and changes nothing)
        when the file cannot be written."""
        before = copy.deepcopy(self.data)
        try:
            self._remove(namespace, name, topic)
            self.save()
        except OSError:
            self.data = before
            raise

    def _remove(self, namespace: str, name: str, topic: str | None) -> None:
        ns = self._ns(namespace)
        if topic is None:
            key = name.lower()
            ns["queues"].pop(key, None)
            ns["topics"].pop(key, None)
            ns["subscriptions"].pop(key, None)
        else:
            ns["subscriptions"].get(topic.lower(), {}).pop(name.lower(), None)

    def checkpoint(self) -> dict[str, Any]:
        """A copy of the catalog as it is, for rollback()."""
        return copy.deepcopy(self.data)

    @contextlib.contextmanager
    def undone_on_error(self) -> Iterator[None]:
        """For a change the catalog saves before it is applied (so a data dir that cannot be
        written refuses it before anything happens): if the block raises, the catalog goes
        back to how it was on entry (rollback(); nothing to do when the save itself failed:
        put() and remove() leave the catalog unchanged then)."""
        before = self.checkpoint()
        try:
            yield
        except BaseException:
            if self.data != before:
                self.rollback(before)
            raise

    def rollback(self, checkpoint: dict[str, Any]) -> None:
        """Put the catalog back as it was at checkpoint() (a change that was saved but could
        not be applied); best effort on disk: memory is restored whatever happens."""
        self.data = checkpoint
        try:
            self.save()
        except OSError:
            pass  # the disk refuses: a restart loads the saved change (it was valid)

    def save(self) -> None:
        """Write the whole catalog atomically (temp file, fsync, rename, fsync the dir)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(self.data, indent=1, sort_keys=True).encode())
