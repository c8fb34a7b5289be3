"""The configuration model: frozen dataclasses the server is written against, the limits
and defaults they are checked against, and ConfigError (one line: file, JSON path, problem)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol, TypeVar

DEFAULT_LOCK_DURATION_MS = 60_000  # PT1M
DEFAULT_MAX_DELIVERY_COUNT = 3
DEFAULT_MESSAGE_TTL_MS = 3_600_000  # PT1H
DEFAULT_DUPLICATE_DETECTION_WINDOW_MS = 20_000  # PT20S
DEFAULT_MAX_SIZE_MB = 1024
DEFAULT_LOGGING_TYPE = "Console"
DEFAULT_RULE_NAME = "$Default"
DEFAULT_SAS_KEY_NAME = "RootManageSharedAccessKey"
DEFAULT_SAS_KEY = "SAS_KEY_VALUE"
ALL_RIGHTS = frozenset({"Manage", "Send", "Listen"})

# --- Limits ------------------------------------------------------------------------------------
LOCK_DURATION_MIN_MS = 5_000  # emulator 1.1.2 allows PT5S; Azure's minimum too
LOCK_DURATION_MAX_MS = 300_000  # PT5M
DUPLICATE_WINDOW_MIN_MS = 5_000  # emulator schema minimum (Azure's is 20 s)
DUPLICATE_WINDOW_MAX_MS = 7 * 86_400_000  # Azure maximum, P7D
AUTO_DELETE_MIN_MS = 5 * 60_000  # Azure's minimum AutoDeleteOnIdle
AUTO_DELETE_TEST_MIN_MS = 1_000  # with the SbemuTestAutoDeleteOnIdle extension
ENTITY_STATUSES = {
    "queue": ("Active", "Disabled", "SendDisabled", "ReceiveDisabled"),
    "topic": ("Active", "Disabled", "SendDisabled"),
    "subscription": ("Active", "Disabled", "ReceiveDisabled"),
}
TIMESPAN_MAX_MS = 922_337_203_685_477  # .NET TimeSpan.MaxValue, Azure's "never expires" TTL
_TIMESPAN_MAX_EXACT_MS = Decimal("922337203685477.5807")  # TimeSpan.MaxValue ticks / 10_000
INT32_MAX = 2**31 - 1
STANDARD_PARTITION_COUNT = 16  # [SB partitioning P2]
PREMIUM_PARTITION_COUNTS = (1, 2, 4)  # [P3]
STANDARD_MAX_MESSAGE_SIZE = 256 * 1024  # [P19]
PREMIUM_MAX_MESSAGE_SIZE = 1024 * 1024  # [P19]
PREMIUM_MAX_MESSAGE_SIZE_KB_RANGE = (1024, 102_400)  # Premium MaxMessageSizeInKilobytes
AZURE_MAX_SIZES_MB = (1024, 2048, 3072, 4096, 5120)
TEST_MAX_SIZES_MB = tuple(2**i for i in range(10))  # 1 .. 512, for tests only
MAX_PARTITIONED_ENTITIES = 100  # per Standard namespace [P19]
MAX_ENTITIES = 10_000  # queues + topics per namespace
MAX_SUBSCRIPTIONS_PER_TOPIC = 2_000
MAX_SQL_FILTERS_PER_TOPIC = 2_000
MAX_CORRELATION_FILTERS_PER_TOPIC = 100_000
MAX_EXPRESSION_LENGTH = 1_024  # filter condition or rule action


@dataclass(frozen=True)
class SasPolicy:
    """A shared access policy: key name, key, and its rights (subset of Manage/Send/Listen)."""

    key_name: str
    key: str
    rights: frozenset[str]


DEFAULT_SAS_POLICY = SasPolicy(DEFAULT_SAS_KEY_NAME, DEFAULT_SAS_KEY, ALL_RIGHTS)


@dataclass(frozen=True)
class RuleConfig:
    """A subscription rule: filter kind ('sql' | 'correlation' | 'true' | 'false') and action.

    ``correlation`` keeps the config's keys ('CorrelationId', 'Label', ..., 'Properties' for the
    application properties, itself a mapping) and only those given; it is read-only.
    """

    name: str
    filter_type: str
    sql_expression: str | None = None
    correlation: Mapping[str, object] | None = None
    action_expression: str | None = None


DEFAULT_RULE = RuleConfig(DEFAULT_RULE_NAME, "true")


@dataclass(frozen=True)
class QueueConfig:
    """A queue; durations in milliseconds, sizes in megabytes (per partition)."""

    name: str
    lock_duration_ms: int = DEFAULT_LOCK_DURATION_MS
    max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT
    default_message_ttl_ms: int = DEFAULT_MESSAGE_TTL_MS
    dead_lettering_on_message_expiration: bool = False
    requires_duplicate_detection: bool = False
    duplicate_detection_window_ms: int = DEFAULT_DUPLICATE_DETECTION_WINDOW_MS
    requires_session: bool = False
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    status: str = "Active"
    auto_delete_on_idle_ms: int | None = None  # None: never
    partition_count: int = 1
    max_size_mb: int = DEFAULT_MAX_SIZE_MB
    enable_partitioning: bool = False  # true also for every entity of a Premium namespace
    max_message_size_kb: int | None = None  # Premium only (1024..102400); None: the tier's

    @property
    def partitioned(self) -> bool:
        """True when the queue is made of partitions, even a single Premium one [P1, P3]."""
        return self.enable_partitioning or self.partition_count > 1

    @property
    def total_max_size_mb(self) -> int:
        """The reported maximum size: per-partition size x partition count [P5]."""
        return self.max_size_mb * self.partition_count


@dataclass(frozen=True)
class SubscriptionConfig:
    """A topic subscription; durations in milliseconds. Empty ``Rules`` gives ``$Default``."""

    name: str
    lock_duration_ms: int = DEFAULT_LOCK_DURATION_MS
    max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT
    default_message_ttl_ms: int = DEFAULT_MESSAGE_TTL_MS
    dead_lettering_on_message_expiration: bool = False
    dead_lettering_on_filter_evaluation_exceptions: bool = True
    requires_session: bool = False
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    status: str = "Active"
    auto_delete_on_idle_ms: int | None = None  # None: never
    rules: tuple[RuleConfig, ...] = (DEFAULT_RULE,)


@dataclass(frozen=True)
class TopicConfig:
    """A topic and its subscriptions; durations in milliseconds, size in MB per partition."""

    name: str
    default_message_ttl_ms: int = DEFAULT_MESSAGE_TTL_MS
    requires_duplicate_detection: bool = False
    duplicate_detection_window_ms: int = DEFAULT_DUPLICATE_DETECTION_WINDOW_MS
    enable_partitioning: bool = False
    partition_count: int = 1
    max_size_mb: int = DEFAULT_MAX_SIZE_MB
    subscriptions: tuple[SubscriptionConfig, ...] = ()
    status: str = "Active"
    auto_delete_on_idle_ms: int | None = None  # None: never
    max_message_size_kb: int | None = None  # Premium only (1024..102400); None: the tier's

    @property
    def partitioned(self) -> bool:
        """True when the topic (and so its subscriptions) is made of partitions [P1, P3]."""
        return self.enable_partitioning or self.partition_count > 1

    @property
    def total_max_size_mb(self) -> int:
        """The reported maximum size: per-partition size x partition count [P5]."""
        return self.max_size_mb * self.partition_count

    def subscription(self, name: str) -> SubscriptionConfig | None:
        """The subscription called ``name`` (case-insensitive), or None."""
        return _find(self.subscriptions, name)


@dataclass(frozen=True)
class NamespaceConfig:
    """A namespace; ``premium_partitions`` is set for a Premium partitioned namespace [P3]."""

    name: str
    queues: tuple[QueueConfig, ...] = ()
    topics: tuple[TopicConfig, ...] = ()
    sas_policies: tuple[SasPolicy, ...] = (DEFAULT_SAS_POLICY,)
    premium_partitions: int | None = None
    max_message_size_bytes: int = STANDARD_MAX_MESSAGE_SIZE  # 262144, or 1048576 when Premium
    # sbemu extension: a port of its own (0 = any free port) where this namespace is served
    # whatever host name the client uses, so a second namespace needs no DNS entry
    amqp_port: int | None = None

    def queue(self, name: str) -> QueueConfig | None:
        """The queue called ``name`` (case-insensitive), or None."""
        return _find(self.queues, name)

    def topic(self, name: str) -> TopicConfig | None:
        """The topic called ``name`` (case-insensitive), or None."""
        return _find(self.topics, name)


@dataclass(frozen=True)
class Config:
    """Everything one emulator run serves; ``source`` is the file path or '<embedded default>'."""

    namespaces: tuple[NamespaceConfig, ...]
    logging_type: str = DEFAULT_LOGGING_TYPE
    source: str = field(default="<embedded default>", compare=False)

    def namespace(self, name: str) -> NamespaceConfig | None:
        """The namespace called ``name`` (case-insensitive), or None."""
        return _find(self.namespaces, name)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=_Named)


def _find(items: Iterable[_N], name: str) -> _N | None:
    folded = name.casefold()
    return next((item for item in items if item.name.casefold() == folded), None)


class ConfigError(Exception):
    """A configuration that cannot be used; ``str()`` is one line: ``<file>: <where>: <what>``.

    ``where`` is a JSON path such as ``UserConfig.Namespaces[0].Queues[2].Properties.LockDuration``
    or, for unparsable JSON, ``line L column C``; it is omitted for unreadable files.
    """

    def __init__(self, source: str, path: str | None, message: str) -> None:
        self.source = source
        self.path = path
        self.message = message
        text = f"{source}: {path}: {message}" if path else f"{source}: {message}"
        super().__init__(" ".join(text.splitlines()))
