"""Namespaces, entities and rules of an emulator run, read from Microsoft's emulator ``Config.json``.

What belongs here: turning a JSON document into frozen dataclasses the server is written against,
with every check that can be made before anything starts (names, ranges, references, quotas), so
a bad file fails at load with one line naming the file, the JSON path and what is wrong.
Nothing here touches sockets, stores or clocks.

The accepted format is Microsoft's, unchanged (Azure/azure-service-bus-emulator-installer,
``ServiceBus-Emulator/Config/Config.json`` and ``Schema/Config-schema.json``)::

    {"UserConfig": {
        "Namespaces": [{"Name": ..., "Queues": [{"Name": ..., "Properties": {...}}],
                        "Topics": [{"Name": ..., "Properties": {...},
                                    "Subscriptions": [{"Name": ..., "Properties": {...},
                                                       "Rules": [{"Name": ..., "Properties": {
                                                           "FilterType": "Sql" | "Correlation",
                                                           "SqlFilter": {"SqlExpression": ...},
                                                           "CorrelationFilter": {...},
                                                           "Action": {"SqlExpression": ...}}}]}]}]}],
        "Logging": {"Type": "File" | "Console" | "File,Console" | "Console,File"}}}

Like Microsoft's sample file, it may hold ``//`` and ``/* */`` comments; trailing commas are
tolerated too. Property names are matched case-insensitively (as the .NET configuration binder
does) but an unknown name is an error, so typos are caught. Durations are ISO-8601 (``PT1H``,
``PT20S``, ``P1D``, ``PT0.5S``) or .NET TimeSpan text (``00:01:00``, ``1.00:00:00``).

Defaults for omitted properties are the Microsoft emulator's, from its schema:
LockDuration PT1M, MaxDeliveryCount 3, DefaultMessageTimeToLive PT1H,
DuplicateDetectionHistoryTimeWindow PT20S, every boolean false, no forwarding.

Deliberate differences from Microsoft's emulator (which allows one namespace named
``sbemulatorns``, at most 50 entities, TTL at most 1 h and no partitioning):

* any number of namespaces, with any name valid in Azure (6-50 characters);
* limits are Azure Standard's where they are wider than the emulator's: MaxDeliveryCount has no
  upper cap of 10, DefaultMessageTimeToLive has no cap of 1 h, DuplicateDetectionHistoryTimeWindow
  goes from the emulator's minimum (5 s) up to Azure's maximum (7 days);
* queue and topic ``Properties`` also take ``EnablePartitioning`` (bool, default false: 16
  partitions as in Azure Standard [SB partitioning P2]) and ``MaxSizeInMegabytes`` (1024, 2048,
  3072, 4096 or 5120 as in Azure, default 1024; smaller powers of two down to 1 are accepted too,
  so tests can fill an entity quickly). With partitioning each partition gets that size [P5];
* subscription ``Properties`` also take ``DeadLetteringOnFilterEvaluationExceptions`` (default
  true, as in Azure);
* a namespace may set ``PremiumMessagingPartitions`` (1, 2 or 4): it is then a Premium
  partitioned namespace, every queue and topic in it is partitioned with that count [P3] and the
  message size limit is 1 MB instead of 256 KB [P19]; its queues and topics may set
  ``MaxMessageSizeInKilobytes`` (1024 to 102400, Azure's large messages);
* a namespace may set ``SharedAccessPolicies``:
  ``[{"KeyName": ..., "Key": ..., "Rights": ["Manage", "Send", "Listen"]}]`` (default: one policy
  ``RootManageSharedAccessKey`` with key ``SAS_KEY_VALUE`` and all rights, the emulator's). As in
  Azure, ``Manage`` implies ``Send`` and ``Listen``;
* a rule's ``FilterType`` may also be ``True`` or ``False`` (Azure's TrueFilter / FalseFilter);
  a subscription without rules gets Azure's ``$Default`` rule that matches everything;
* ``Queues``, ``Topics``, ``Subscriptions`` and ``Logging`` may be omitted (empty / ``Console``);
* queues, topics and subscriptions take Azure's ``Status`` (``Active``, ``Disabled``,
  ``SendDisabled`` for queues and topics, ``ReceiveDisabled`` for queues and subscriptions);
  queues, topics and subscriptions take ``AutoDeleteOnIdle`` (at least 5 minutes, as in
  Azure) and the emulator extension ``SbemuTestAutoDeleteOnIdle`` (at least 1 s, for tests);
* auto-forwarding loops, chains of more than 4 hops and missing destinations are refused with
  one line naming the chain.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import NoReturn, Protocol, TypeVar

__all__ = [
    "Config",
    "ConfigError",
    "NamespaceConfig",
    "QueueConfig",
    "RuleConfig",
    "SasPolicy",
    "SubscriptionConfig",
    "TopicConfig",
    "default_config",
    "format_duration_ms",
    "load_config",
    "parse_config",
    "parse_duration_ms",
]

# --- Defaults: Microsoft emulator schema (Config-schema.json "default" values) --------------
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

_ENTITY_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9])?\Z")
_ENTITY_NAME_MAX = 260
_SUBSCRIPTION_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\Z")
_SUBSCRIPTION_NAME_MAX = 50
_RULE_NAME_MAX = 50
_NAMESPACE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{4,48}[A-Za-z0-9]\Z")
_KEY_NAME = re.compile(r"[A-Za-z0-9._-]{1,256}\Z")
_LOGGING_TARGETS = ("File", "Console")
_CORRELATION_KEYS = (
    "ContentType",
    "CorrelationId",
    "Label",
    "MessageId",
    "ReplyTo",
    "ReplyToSessionId",
    "SessionId",
    "To",
    "Properties",
)
_FILTER_TYPES = {
    "sql": "sql",
    "correlation": "correlation",
    "true": "true",
    "truefilter": "true",
    "false": "false",
    "falsefilter": "false",
}


# ================================================================================================
# The model
# ================================================================================================


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


# ================================================================================================
# Durations
# ================================================================================================

_NUM = r"(\d+(?:[.,]\d+)?)"
_ISO_DURATION = re.compile(
    rf"P(?:{_NUM}Y)?(?:{_NUM}M)?(?:{_NUM}W)?(?:{_NUM}D)?(?:T(?:{_NUM}H)?(?:{_NUM}M)?(?:{_NUM}S)?)?\Z",
    re.IGNORECASE,
)
# Seconds per ISO designator; Y and M as .NET XmlConvert.ToTimeSpan counts them (365 / 30 days).
_ISO_UNITS = (365 * 86_400, 30 * 86_400, 7 * 86_400, 86_400, 3_600, 60, 1)
# .NET TimeSpan text: [d.]hh:mm[:ss[.fffffff]] or [d:]hh:mm:ss[.fffffff]
_TIMESPAN = re.compile(
    r"(?:(\d+)[.:](?=\d{1,2}:\d{1,2}:))?(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,7}))?)?\Z"
)


def parse_duration_ms(text: str) -> int:
    """Milliseconds in an ISO-8601 duration (PT1H, P1DT2H, P2W, PT0.5S) or .NET TimeSpan text.

    TimeSpan forms: ``hh:mm:ss``, ``hh:mm``, ``d.hh:mm:ss``, ``d:hh:mm:ss``, with an optional
    ``.fffffff`` fraction of a second. Years count 365 days and months 30, like .NET's
    XmlConvert.ToTimeSpan. Sub-millisecond parts are rounded half up. Raises ValueError.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a duration string, got {_json_type(text)}")
    raw = text.strip()
    if raw.startswith("-"):
        raise ValueError(f"negative duration {text!r} is not allowed")
    iso = _ISO_DURATION.match(raw)
    if iso and raw.upper() not in ("P", "PT") and not raw.upper().endswith("T"):
        seconds = sum(
            (
                Decimal(part.replace(",", ".")) * unit
                for part, unit in zip(iso.groups(), _ISO_UNITS, strict=True)
                if part is not None
            ),
            Decimal(0),
        )
    else:
        span = _TIMESPAN.match(raw)
        if not span:
            raise ValueError(
                f"{text!r} is not a duration (expected ISO-8601 like PT1M, PT20S, P1D or hh:mm:ss)"
            )
        days, hours, minutes, secs, fraction = span.groups()
        if int(hours) > 23 or int(minutes) > 59 or int(secs or 0) > 59:
            raise ValueError(f"{text!r} is not a valid hh:mm:ss time span")
        seconds = Decimal(
            int(days or 0) * 86_400 + int(hours) * 3_600 + int(minutes) * 60 + int(secs or 0)
        ) + Decimal(f"0.{fraction or 0}")
    exact_ms = seconds * 1000
    if exact_ms > _TIMESPAN_MAX_EXACT_MS:
        raise ValueError(f"duration {text!r} is longer than the largest .NET TimeSpan")
    return min(int(exact_ms.quantize(Decimal(1), rounding=ROUND_HALF_UP)), TIMESPAN_MAX_MS)


def _plain(value: Decimal) -> str:
    """A Decimal in positional notation: normalize() turns 30 into 3E+1, which no ISO reader takes."""
    return format(value, "f") if value else ""


def format_duration_ms(ms: int) -> str:
    """ISO-8601 text for ``ms`` milliseconds, e.g. 300000 -> 'PT5M', 86400000 -> 'P1D'."""
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = Decimal(rest) / 1000
    date = f"{days}D" if days else ""
    time = "".join(
        f"{v}{u}"
        for v, u in ((hours, "H"), (minutes, "M"), (_plain(seconds.normalize()), "S"))
        if v
    )
    if not date and not time:
        return "PT0S"
    return "P" + date + (f"T{time}" if time else "")


# ================================================================================================
# Loading
# ================================================================================================


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a Config.json file; any problem raises ConfigError."""
    source = os.fspath(path)
    try:
        data = Path(source).read_bytes()
    except OSError as exc:
        raise ConfigError(source, None, f"cannot read file: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, f"not UTF-8 text (byte {exc.start})") from None
    return parse_config(_decode_json(text, source), source)


def default_config() -> Config:
    """The embedded default: Microsoft's sample entities plus a partitioned queue and topic."""
    return parse_config(
        _decode_json(DEFAULT_CONFIG_JSON, "<embedded default>"), "<embedded default>"
    )


DEFAULT_CONFIG_JSON = """\
{
  // sbemu's embedded default, shaped like Microsoft's emulator Config.json, plus a partitioned
  // queue and topic so that partitioning is visible out of the box.
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Queues": [
          {
            "Name": "queue.1",
            "Properties": {
              "DeadLetteringOnMessageExpiration": false,
              "DefaultMessageTimeToLive": "PT1H",
              "DuplicateDetectionHistoryTimeWindow": "PT20S",
              "ForwardDeadLetteredMessagesTo": "",
              "ForwardTo": "",
              "LockDuration": "PT1M",
              "MaxDeliveryCount": 3,
              "RequiresDuplicateDetection": false,
              "RequiresSession": false
            }
          },
          {
            "Name": "queue.partitioned",
            "Properties": {
              "EnablePartitioning": true,
              "LockDuration": "PT1M",
              "MaxDeliveryCount": 3
            }
          }
        ],
        "Topics": [
          {
            "Name": "topic.1",
            "Properties": {
              "DefaultMessageTimeToLive": "PT1H",
              "DuplicateDetectionHistoryTimeWindow": "PT20S",
              "RequiresDuplicateDetection": false
            },
            "Subscriptions": [
              {
                "Name": "subscription.1",
                "Properties": {
                  "DeadLetteringOnMessageExpiration": false,
                  "DefaultMessageTimeToLive": "PT1H",
                  "LockDuration": "PT1M",
                  "MaxDeliveryCount": 3,
                  "ForwardDeadLetteredMessagesTo": "",
                  "ForwardTo": "",
                  "RequiresSession": false
                }
              }
            ]
          },
          {
            "Name": "topic.partitioned",
            "Properties": {
              "EnablePartitioning": true
            },
            "Subscriptions": [
              {
                "Name": "subscription.1",
                "Properties": {
                  "LockDuration": "PT1M",
                  "MaxDeliveryCount": 3
                }
              }
            ]
          }
        ]
      }
    ],
    "Logging": {
      "Type": "Console"
    }
  }
}
"""


class ReadOnlyDict(dict[str, object]):
    """A dict that refuses changes; unlike MappingProxyType it survives pickle, deepcopy, asdict."""

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("configuration mappings are read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[type, tuple[dict[str, object]]]:
        return (type(self), (dict(self),))


class _JsonObject(dict[str, object]):
    """A decoded JSON object that remembers keys given more than once."""

    duplicates: tuple[str, ...] = ()


def _object_from_pairs(pairs: list[tuple[str, object]]) -> _JsonObject:
    obj = _JsonObject()
    seen = []
    for key, value in pairs:
        if key in obj:
            seen.append(key)
        obj[key] = value
    if seen:
        obj.duplicates = tuple(seen)
    return obj


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _decode_json(text: str, source: str) -> object:
    """Decode JSON that may hold comments and trailing commas; errors carry line and column."""
    try:
        return json.loads(
            _strip_comments(text, source),
            object_pairs_hook=_object_from_pairs,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as exc:
        raise ConfigError(
            source, f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {_json_problem(exc)}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(source, None, f"invalid JSON: {exc}") from None


def _json_problem(exc: json.JSONDecodeError) -> str:
    """json's message as a whole sentence: some of its messages end in "at" and expect the
    position after them ("Unterminated string starting at"), which the location already gives;
    a document that ends before the value does is said to be cut short."""
    msg = exc.msg[:-3] + " here" if exc.msg.endswith(" at") else exc.msg
    if not exc.doc[exc.pos :].strip() or msg.startswith("Unterminated string"):
        msg += " (the file ends before it is complete: is it truncated?)"
    return msg


# A string, a // comment, a /* */ comment, an unterminated /*, or a comma; scanned left to right
# so that comment markers inside strings stay text.
_JSONC_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/|/\*|,', re.DOTALL)
_NOT_NEWLINE = re.compile(r"[^\r\n]")
_NON_SPACE = re.compile(r"\S")


def _strip_comments(text: str, source: str) -> str:
    """Blank out // and /* */ comments and trailing commas, keeping every line and column."""
    pieces: list[str] = []
    commas: list[int] = []
    done = 0
    for token in _JSONC_TOKEN.finditer(text):
        value = token.group()
        if value == ",":
            commas.append(token.start())
        elif value == "/*":
            line = text.count("\n", 0, token.start()) + 1
            col = token.start() - (text.rfind("\n", 0, token.start()) + 1) + 1
            raise ConfigError(
                source, f"line {line} column {col}", "invalid JSON: unterminated /* comment"
            )
        elif value[0] == "/":
            pieces.append(text[done : token.start()])
            pieces.append(_NOT_NEWLINE.sub(" ", value))
            done = token.end()
    if not pieces and not commas:
        return text
    pieces.append(text[done:])
    stripped = "".join(pieces)
    out = list(stripped)
    for pos in commas:
        following = _NON_SPACE.search(stripped, pos + 1)
        after = following.group() if following else ""
        before = pos - 1
        while before >= 0 and stripped[before].isspace():
            before -= 1
        if after in ("}", "]") and before >= 0 and stripped[before] not in "[{,":
            out[pos] = " "  # a trailing comma, as .NET's AllowTrailingCommas accepts
    return "".join(out)


# ================================================================================================
# Validation: one reader that walks the document with a JSON path
# ================================================================================================


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Reader:
    """Typed access to a JSON document; every failure names the source and the JSON path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> NoReturn:
        raise ConfigError(self.source, path or "(document)", message)

    def fields(self, value: object, path: str, allowed: Sequence[str]) -> dict[str, object]:
        """The members of an object keyed by their canonical names; unknown names are errors."""
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, got {_json_type(value)}")
        for dup in getattr(value, "duplicates", ()):
            self.fail(_child(path, dup), "property is given more than once")
        canonical = {name.casefold(): name for name in allowed}
        result: dict[str, object] = {}
        for key, member in value.items():
            name = canonical.get(str(key).casefold())
            if name is None:
                hint = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                self.fail(
                    _child(path, str(key)),
                    f"unknown property (did you mean {hint[0]!r}?)"
                    if hint
                    else f"unknown property; allowed here: {', '.join(allowed)}",
                )
            if name in result:
                self.fail(_child(path, name), f"property is given more than once (as {key!r})")
            result[name] = member
        return result

    def required(self, fields: dict[str, object], path: str, name: str) -> object:
        if name not in fields:
            self.fail(_child(path, name), "required property is missing")
        return fields[name]

    def array(self, value: object, path: str) -> list[object]:
        if not isinstance(value, list):
            self.fail(path, f"expected an array, got {_json_type(value)}")
        return value

    def string(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {_json_type(value)}")
        return value

    def boolean(self, value: object, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_json_type(value)}")
        return value

    def integer(self, value: object, path: str, low: int, high: int = INT32_MAX) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {_json_type(value)}")
        if not low <= value <= high:
            bound = f"at least {low}" if high == INT32_MAX else f"between {low} and {high}"
            self.fail(path, f"{value} is out of range: must be {bound}")
        return value

    def duration(self, value: object, path: str, low_ms: int, high_ms: int) -> int:
        text = self.string(value, path)
        try:
            ms = parse_duration_ms(text)
        except ValueError as exc:
            self.fail(path, str(exc))
        if not low_ms <= ms <= high_ms:
            self.fail(
                path,
                f"{text} is out of range: must be between "
                f"{format_duration_ms(low_ms)} and {format_duration_ms(high_ms)}",
            )
        return ms

    def name(
        self, value: object, path: str, pattern: re.Pattern[str], max_len: int, rule: str
    ) -> str:
        text = self.string(value, path)
        if not 1 <= len(text) <= max_len or not pattern.match(text):
            self.fail(path, f"invalid name {text!r}: {rule}")
        return text


_ENTITY_RULE = "1-260 characters: letters, digits, '.', '-', '_', '/', starting and ending with a letter or digit"
_SUBSCRIPTION_RULE = (
    "1-50 characters: letters, digits, '.', '-', '_', starting and ending with a letter or digit"
)
_NAMESPACE_RULE = (
    "6-50 characters: letters, digits and '-', starting with a letter, ending with a letter or "
    "digit, not ending in '-sb' or '-mgmt'"
)

_ROOT_KEYS = ("UserConfig", "$schema")
_USER_CONFIG_KEYS = ("Namespaces", "Logging")
_NAMESPACE_KEYS = (
    "Name", "Queues", "Topics", "PremiumMessagingPartitions", "SharedAccessPolicies", "AmqpPort",
)
_ENTITY_KEYS = ("Name", "Properties")
_TOPIC_KEYS = ("Name", "Properties", "Subscriptions")
_SUBSCRIPTION_KEYS = ("Name", "Properties", "Rules")
_QUEUE_PROPERTIES = (
    "DeadLetteringOnMessageExpiration",
    "DefaultMessageTimeToLive",
    "DuplicateDetectionHistoryTimeWindow",
    "ForwardDeadLetteredMessagesTo",
    "ForwardTo",
    "LockDuration",
    "MaxDeliveryCount",
    "RequiresDuplicateDetection",
    "RequiresSession",
    "EnablePartitioning",
    "MaxSizeInMegabytes",
    "MaxMessageSizeInKilobytes",
    "Status",
    "AutoDeleteOnIdle",
    "SbemuTestAutoDeleteOnIdle",
)
_TOPIC_PROPERTIES = (
    "DefaultMessageTimeToLive",
    "DuplicateDetectionHistoryTimeWindow",
    "RequiresDuplicateDetection",
    "EnablePartitioning",
    "MaxSizeInMegabytes",
    "MaxMessageSizeInKilobytes",
    "Status",
    "AutoDeleteOnIdle",
    "SbemuTestAutoDeleteOnIdle",
)
_SUBSCRIPTION_PROPERTIES = (
    "DeadLetteringOnMessageExpiration",
    "DefaultMessageTimeToLive",
    "LockDuration",
    "MaxDeliveryCount",
    "ForwardDeadLetteredMessagesTo",
    "ForwardTo",
    "RequiresSession",
    "DeadLetteringOnFilterEvaluationExceptions",
    "Status",
    "AutoDeleteOnIdle",
    "SbemuTestAutoDeleteOnIdle",
)
_RULE_PROPERTIES = ("FilterType", "SqlFilter", "CorrelationFilter", "Action")
_SAS_KEYS = ("KeyName", "Key", "Rights")


def parse_config(obj: object, source: str) -> Config:
    """Validate a decoded Config.json document (dicts, lists, scalars) into a Config."""
    r = _Reader(source)
    root = r.fields(obj, "", _ROOT_KEYS)
    user = r.fields(r.required(root, "", "UserConfig"), "UserConfig", _USER_CONFIG_KEYS)
    ns_path = "UserConfig.Namespaces"
    raw_namespaces = r.array(r.required(user, "UserConfig", "Namespaces"), ns_path)
    if not raw_namespaces:
        r.fail(ns_path, "at least one namespace is required")
    namespaces: list[NamespaceConfig] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_namespaces):
        namespace = _parse_namespace(r, raw, f"{ns_path}[{i}]")
        folded = namespace.name.casefold()
        if folded in seen:
            r.fail(
                f"{ns_path}[{i}].Name",
                f"namespace {namespace.name!r} is already defined at {ns_path}[{seen[folded]}]",
            )
        seen[folded] = i
        namespaces.append(namespace)
    ports: dict[int, int] = {}
    for i, namespace in enumerate(namespaces):
        port = namespace.amqp_port
        if port:
            if port in ports:
                r.fail(
                    f"{ns_path}[{i}].AmqpPort",
                    f"port {port} is already the AmqpPort of {ns_path}[{ports[port]}]",
                )
            ports[port] = i
    logging_type = DEFAULT_LOGGING_TYPE
    if "Logging" in user:
        logging = r.fields(user["Logging"], "UserConfig.Logging", ("Type",))
        if "Type" in logging:
            logging_type = _parse_logging_type(r, logging["Type"], "UserConfig.Logging.Type")
    return Config(namespaces=tuple(namespaces), logging_type=logging_type, source=source)


def _parse_logging_type(r: _Reader, value: object, path: str) -> str:
    text = r.string(value, path)
    targets = [part.strip().casefold() for part in text.split(",")]
    canonical = {t.casefold(): t for t in _LOGGING_TARGETS}
    if not targets or any(t not in canonical for t in targets) or len(set(targets)) != len(targets):
        r.fail(
            path, f"invalid logging type {text!r}: use File, Console, File,Console or Console,File"
        )
    return ",".join(canonical[t] for t in targets)


def _parse_namespace(r: _Reader, raw: object, path: str) -> NamespaceConfig:
    fields = r.fields(raw, path, _NAMESPACE_KEYS)
    name = r.string(r.required(fields, path, "Name"), _child(path, "Name"))
    if not _NAMESPACE_NAME.match(name) or name.lower().endswith(("-sb", "-mgmt")):
        r.fail(_child(path, "Name"), f"invalid namespace name {name!r}: {_NAMESPACE_RULE}")

    premium: int | None = None
    if fields.get("PremiumMessagingPartitions") is not None:
        p_path = _child(path, "PremiumMessagingPartitions")
        premium = r.integer(fields["PremiumMessagingPartitions"], p_path, 1, 4)
        if premium not in PREMIUM_PARTITION_COUNTS:
            r.fail(p_path, f"{premium} is not a Premium partition count: use 1, 2 or 4")

    raw_queues = r.array(fields.get("Queues", []), _child(path, "Queues"))
    raw_topics = r.array(fields.get("Topics", []), _child(path, "Topics"))
    entities = _entity_names(r, path, raw_queues, raw_topics)
    queues = tuple(
        _parse_queue(r, q, f"{path}.Queues[{i}]", premium, entities)
        for i, q in enumerate(raw_queues)
    )
    topics = tuple(
        _parse_topic(r, t, f"{path}.Topics[{i}]", premium, entities)
        for i, t in enumerate(raw_topics)
    )
    problem = forwarding_problem(queues, topics)
    if problem is not None:
        r.fail(path, problem)
    if premium is None:
        partitioned = sum(q.partitioned for q in queues) + sum(t.partitioned for t in topics)
        if partitioned > MAX_PARTITIONED_ENTITIES:
            r.fail(
                path,
                f"{partitioned} partitioned queues and topics: a Standard namespace "
                f"allows at most {MAX_PARTITIONED_ENTITIES} [P19]",
            )

    amqp_port: int | None = None
    if fields.get("AmqpPort") is not None:
        amqp_port = r.integer(fields["AmqpPort"], _child(path, "AmqpPort"), 0, 65535)

    sas_policies: tuple[SasPolicy, ...] = (DEFAULT_SAS_POLICY,)
    if "SharedAccessPolicies" in fields:
        sas_policies = _parse_sas_policies(
            r, fields["SharedAccessPolicies"], _child(path, "SharedAccessPolicies")
        )

    return NamespaceConfig(
        name=name,
        queues=queues,
        topics=topics,
        sas_policies=sas_policies,
        premium_partitions=premium,
        amqp_port=amqp_port,
        max_message_size_bytes=STANDARD_MAX_MESSAGE_SIZE
        if premium is None
        else PREMIUM_MAX_MESSAGE_SIZE,
    )


MAX_FORWARD_HOPS = 4  # Azure's limit on auto-forwarding hops


def forwarding_problem(
    queues: Sequence[QueueConfig], topics: Sequence[TopicConfig]
) -> str | None:
    """One line naming an auto-forwarding loop or a chain longer than Azure's 4 hops (or a
    missing destination), or None. ForwardTo and ForwardDeadLetteredMessagesTo both count as
    hops; a topic passes a message on to each of its subscriptions."""
    by_name: dict[str, QueueConfig | TopicConfig] = {q.name.casefold(): q for q in queues}
    by_name.update({t.name.casefold(): t for t in topics})

    def forwards(name: str) -> list[tuple[str, str | None]]:
        """(node label, its ForwardTo) for what a message sent to `name` reaches."""
        cfg = by_name.get(name.casefold())
        if cfg is None:
            return []
        if isinstance(cfg, TopicConfig):
            return [(f"{cfg.name}/Subscriptions/{s.name}", s.forward_to) for s in cfg.subscriptions]
        return [(cfg.name, cfg.forward_to)]

    def walk(chain: list[str], target: str | None, hops: int) -> str | None:
        if target is None:
            return None
        if target.casefold() not in by_name:
            return f"auto-forwarding destination {target!r} does not exist: {' -> '.join(chain + [target])}"
        if hops > MAX_FORWARD_HOPS:
            return (
                f"auto-forwarding chain of {hops} hops (Azure allows {MAX_FORWARD_HOPS}): "
                + " -> ".join(chain + [target])
            )
        for label, nxt in forwards(target):
            step = chain + ([target, label] if label != target else [target])
            if nxt is not None and any(n.casefold() == label.casefold() for n in chain):
                return "auto-forwarding loop: " + " -> ".join(step)
            found = walk(step, nxt, hops + 1)
            if found is not None:
                return found
        return None

    starts: list[tuple[str, str | None]] = []
    for q in queues:
        starts += [(q.name, q.forward_to), (f"{q.name}/$DeadLetterQueue", q.forward_dead_lettered_messages_to)]
    for t in topics:
        for sub in t.subscriptions:
            label = f"{t.name}/Subscriptions/{sub.name}"
            starts += [(label, sub.forward_to), (f"{label}/$DeadLetterQueue", sub.forward_dead_lettered_messages_to)]
    for label, target in starts:
        found = walk([label], target, 1)
        if found is not None:
            return found
    return None


def _entity_names(
    r: _Reader, path: str, raw_queues: list[object], raw_topics: list[object]
) -> dict[str, str]:
    """Validate every queue and topic name first, so forwarding can refer to later entities."""
    if len(raw_queues) + len(raw_topics) > MAX_ENTITIES:
        r.fail(
            path,
            f"{len(raw_queues) + len(raw_topics)} queues and topics: a namespace allows "
            f"at most {MAX_ENTITIES}",
        )
    names: dict[str, str] = {}
    where: dict[str, str] = {}
    for kind, raws in (("Queues", raw_queues), ("Topics", raw_topics)):
        for i, raw in enumerate(raws):
            item = f"{path}.{kind}[{i}]"
            fields = r.fields(raw, item, _TOPIC_KEYS if kind == "Topics" else _ENTITY_KEYS)
            name_path = _child(item, "Name")
            name = r.name(
                r.required(fields, item, "Name"),
                name_path,
                _ENTITY_NAME,
                _ENTITY_NAME_MAX,
                _ENTITY_RULE,
            )
            folded = name.casefold()
            if folded in names:
                r.fail(
                    name_path,
                    f"{name!r} is already used by {where[folded]} "
                    "(queue and topic names are unique, ignoring case)",
                )
            names[folded] = name
            where[folded] = item
    return names


def _properties(
    r: _Reader, fields: dict[str, object], path: str, allowed: Sequence[str]
) -> tuple[dict[str, object], str]:
    p_path = _child(path, "Properties")
    return r.fields(fields.get("Properties", {}), p_path, allowed), p_path


def _forward_target(
    r: _Reader,
    props: dict[str, object],
    path: str,
    key: str,
    entities: Mapping[str, str],
    own: str | None,
) -> str | None:
    value = props.get(key)
    if value is None:
        return None
    target = r.string(value, _child(path, key))
    if target == "":
        return None  # Microsoft's sample writes "" for "no forwarding"
    resolved = entities.get(target.casefold())
    if resolved is None:
        r.fail(_child(path, key), f"{target!r} is not a queue or topic of this namespace")
    if own is not None and resolved.casefold() == own.casefold():
        r.fail(_child(path, key), f"{resolved!r} cannot forward to itself")
    return resolved


def _status(r: _Reader, props: dict[str, object], path: str, kind: str) -> str:
    """Status: Active, Disabled, SendDisabled (queues, topics), ReceiveDisabled (queues,
    subscriptions), as Azure allows them per kind."""
    value = props.get("Status")
    if value is None:
        return "Active"
    text = r.string(value, _child(path, "Status"))
    allowed = ENTITY_STATUSES[kind]
    canonical = {a.casefold(): a for a in allowed}
    if text.casefold() not in canonical:
        r.fail(_child(path, "Status"), f"{text!r} is not a {kind} status: use {', '.join(allowed)}")
    return canonical[text.casefold()]


def _auto_delete(r: _Reader, props: dict[str, object], path: str) -> int | None:
    """AutoDeleteOnIdle (at least 5 minutes, as in Azure; TimeSpan.MaxValue: never), or the
    emulator extension SbemuTestAutoDeleteOnIdle (at least 1 s, for tests), which wins."""
    test = props.get("SbemuTestAutoDeleteOnIdle")
    if test is not None:
        return r.duration(
            test, _child(path, "SbemuTestAutoDeleteOnIdle"), AUTO_DELETE_TEST_MIN_MS, TIMESPAN_MAX_MS
        )
    value = props.get("AutoDeleteOnIdle")
    if value is None:
        return None
    ms = r.duration(value, _child(path, "AutoDeleteOnIdle"), AUTO_DELETE_MIN_MS, TIMESPAN_MAX_MS)
    return None if ms >= TIMESPAN_MAX_MS else ms


def _partitioning(
    r: _Reader, props: dict[str, object], path: str, premium: int | None
) -> tuple[bool, int]:
    """(enable_partitioning, partition_count) per Standard [P2] or Premium [P3] rules."""
    if "EnablePartitioning" in props:
        e_path = _child(path, "EnablePartitioning")
        enabled = r.boolean(props["EnablePartitioning"], e_path)
        if premium is not None and not enabled:
            r.fail(
                e_path,
                f"the namespace sets PremiumMessagingPartitions={premium}, so every queue "
                "and topic in it is partitioned [P3]",
            )
    else:
        enabled = False
    if premium is not None:
        return True, premium
    return enabled, STANDARD_PARTITION_COUNT if enabled else 1


def _max_size(r: _Reader, props: dict[str, object], path: str) -> int:
    if "MaxSizeInMegabytes" not in props:
        return DEFAULT_MAX_SIZE_MB
    m_path = _child(path, "MaxSizeInMegabytes")
    size = r.integer(props["MaxSizeInMegabytes"], m_path, 1)
    if size not in AZURE_MAX_SIZES_MB and size not in TEST_MAX_SIZES_MB:
        r.fail(
            m_path,
            f"{size} is not a valid size: use 1024, 2048, 3072, 4096 or 5120 "
            "(or a power of two below 1024 for tests)",
        )
    return size


def _max_message_size_kb(
    r: _Reader, props: dict[str, object], path: str, premium: int | None
) -> int | None:
    """MaxMessageSizeInKilobytes: Premium only, 1024..102400 as in Azure (None: 1024)."""
    if props.get("MaxMessageSizeInKilobytes") is None:
        return None
    m_path = _child(path, "MaxMessageSizeInKilobytes")
    if premium is None:
        r.fail(m_path, "only a Premium namespace (PremiumMessagingPartitions) sets it, as in Azure")
    low, high = PREMIUM_MAX_MESSAGE_SIZE_KB_RANGE
    return r.integer(props["MaxMessageSizeInKilobytes"], m_path, low, high)


@dataclass(frozen=True)
class _Common:
    """Properties shared by queues, topics and subscriptions, after defaults and checks."""

    default_message_ttl_ms: int
    lock_duration_ms: int
    max_delivery_count: int
    duplicate_detection_window_ms: int
    dead_lettering_on_message_expiration: bool
    requires_duplicate_detection: bool
    requires_session: bool
    dead_lettering_on_filter_evaluation_exceptions: bool


def _common(r: _Reader, props: dict[str, object], path: str) -> _Common:
    """Read the shared properties, with the Microsoft emulator's defaults for omitted ones."""

    def duration(key: str, default: int, low: int, high: int) -> int:
        value = props.get(key)
        return default if value is None else r.duration(value, _child(path, key), low, high)

    def boolean(key: str, default: bool) -> bool:
        value = props.get(key)
        return default if value is None else r.boolean(value, _child(path, key))

    count = props.get("MaxDeliveryCount")
    return _Common(
        default_message_ttl_ms=duration(
            "DefaultMessageTimeToLive", DEFAULT_MESSAGE_TTL_MS, 1, TIMESPAN_MAX_MS
        ),
        lock_duration_ms=duration(
            "LockDuration", DEFAULT_LOCK_DURATION_MS, LOCK_DURATION_MIN_MS, LOCK_DURATION_MAX_MS
        ),
        max_delivery_count=(
            DEFAULT_MAX_DELIVERY_COUNT
            if count is None
            else r.integer(count, _child(path, "MaxDeliveryCount"), 1)
        ),
        duplicate_detection_window_ms=duration(
            "DuplicateDetectionHistoryTimeWindow",
            DEFAULT_DUPLICATE_DETECTION_WINDOW_MS,
            DUPLICATE_WINDOW_MIN_MS,
            DUPLICATE_WINDOW_MAX_MS,
        ),
        dead_lettering_on_message_expiration=boolean("DeadLetteringOnMessageExpiration", False),
        requires_duplicate_detection=boolean("RequiresDuplicateDetection", False),
        requires_session=boolean("RequiresSession", False),
        dead_lettering_on_filter_evaluation_exceptions=boolean(
            "DeadLetteringOnFilterEvaluationExceptions", True
        ),
    )


def _parse_queue(
    r: _Reader, raw: object, path: str, premium: int | None, entities: Mapping[str, str]
) -> QueueConfig:
    fields = r.fields(raw, path, _ENTITY_KEYS)
    name = entities[str(fields["Name"]).casefold()]
    props, p_path = _properties(r, fields, path, _QUEUE_PROPERTIES)
    common = _common(r, props, p_path)
    enabled, count = _partitioning(r, props, p_path, premium)
    return QueueConfig(
        name=name,
        lock_duration_ms=common.lock_duration_ms,
        max_delivery_count=common.max_delivery_count,
        default_message_ttl_ms=common.default_message_ttl_ms,
        dead_lettering_on_message_expiration=common.dead_lettering_on_message_expiration,
        requires_duplicate_detection=common.requires_duplicate_detection,
        duplicate_detection_window_ms=common.duplicate_detection_window_ms,
        requires_session=common.requires_session,
        forward_to=_forward_target(r, props, p_path, "ForwardTo", entities, name),
        forward_dead_lettered_messages_to=_forward_target(
            r, props, p_path, "ForwardDeadLetteredMessagesTo", entities, name
        ),
        partition_count=count,
        max_size_mb=_max_size(r, props, p_path),
        enable_partitioning=enabled,
        max_message_size_kb=_max_message_size_kb(r, props, p_path, premium),
        status=_status(r, props, p_path, "queue"),
        auto_delete_on_idle_ms=_auto_delete(r, props, p_path),
    )


def _parse_topic(
    r: _Reader, raw: object, path: str, premium: int | None, entities: Mapping[str, str]
) -> TopicConfig:
    fields = r.fields(raw, path, _TOPIC_KEYS)
    name = entities[str(fields["Name"]).casefold()]
    props, p_path = _properties(r, fields, path, _TOPIC_PROPERTIES)
    common = _common(r, props, p_path)
    enabled, count = _partitioning(r, props, p_path, premium)

    s_path = _child(path, "Subscriptions")
    raw_subs = r.array(fields.get("Subscriptions", []), s_path)
    if len(raw_subs) > MAX_SUBSCRIPTIONS_PER_TOPIC:
        r.fail(
            s_path,
            f"{len(raw_subs)} subscriptions: a topic allows at most {MAX_SUBSCRIPTIONS_PER_TOPIC}",
        )
    subscriptions: list[SubscriptionConfig] = []
    seen: dict[str, int] = {}
    for i, raw_sub in enumerate(raw_subs):
        sub = _parse_subscription(r, raw_sub, f"{s_path}[{i}]", entities)
        folded = sub.name.casefold()
        if folded in seen:
            r.fail(
                f"{s_path}[{i}].Name",
                f"subscription {sub.name!r} is already defined at "
                f"{s_path}[{seen[folded]}] (names ignore case)",
            )
        seen[folded] = i
        subscriptions.append(sub)
    rules = [rule for sub in subscriptions for rule in sub.rules]
    for kind, limit in (
        ("sql", MAX_SQL_FILTERS_PER_TOPIC),
        ("correlation", MAX_CORRELATION_FILTERS_PER_TOPIC),
    ):
        count_kind = sum(1 for rule in rules if rule.filter_type == kind)
        if count_kind > limit:
            r.fail(s_path, f"{count_kind} {kind} filters: a topic allows at most {limit}")

    return TopicConfig(
        name=name,
        default_message_ttl_ms=common.default_message_ttl_ms,
        requires_duplicate_detection=common.requires_duplicate_detection,
        duplicate_detection_window_ms=common.duplicate_detection_window_ms,
        enable_partitioning=enabled,
        partition_count=count,
        max_size_mb=_max_size(r, props, p_path),
        max_message_size_kb=_max_message_size_kb(r, props, p_path, premium),
        subscriptions=tuple(subscriptions),
        status=_status(r, props, p_path, "topic"),
        auto_delete_on_idle_ms=_auto_delete(r, props, p_path),
    )


def _parse_subscription(
    r: _Reader, raw: object, path: str, entities: Mapping[str, str]
) -> SubscriptionConfig:
    fields = r.fields(raw, path, _SUBSCRIPTION_KEYS)
    name = r.name(
        r.required(fields, path, "Name"),
        _child(path, "Name"),
        _SUBSCRIPTION_NAME,
        _SUBSCRIPTION_NAME_MAX,
        _SUBSCRIPTION_RULE,
    )
    props, p_path = _properties(r, fields, path, _SUBSCRIPTION_PROPERTIES)
    common = _common(r, props, p_path)

    rules_path = _child(path, "Rules")
    raw_rules = r.array(fields.get("Rules", []), rules_path)
    rules: list[RuleConfig] = []
    seen: dict[str, int] = {}
    for i, raw_rule in enumerate(raw_rules):
        rule = _parse_rule(r, raw_rule, f"{rules_path}[{i}]")
        folded = rule.name.casefold()
        if folded in seen:
            r.fail(
                f"{rules_path}[{i}].Name",
                f"rule {rule.name!r} is already defined at "
                f"{rules_path}[{seen[folded]}] (names ignore case)",
            )
        seen[folded] = i
        rules.append(rule)

    return SubscriptionConfig(
        name=name,
        lock_duration_ms=common.lock_duration_ms,
        max_delivery_count=common.max_delivery_count,
        default_message_ttl_ms=common.default_message_ttl_ms,
        dead_lettering_on_message_expiration=common.dead_lettering_on_message_expiration,
        dead_lettering_on_filter_evaluation_exceptions=common.dead_lettering_on_filter_evaluation_exceptions,
        requires_session=common.requires_session,
        forward_to=_forward_target(r, props, p_path, "ForwardTo", entities, None),
        forward_dead_lettered_messages_to=_forward_target(
            r, props, p_path, "ForwardDeadLetteredMessagesTo", entities, None
        ),
        rules=tuple(rules) if rules else (DEFAULT_RULE,),
        status=_status(r, props, p_path, "subscription"),
        auto_delete_on_idle_ms=_auto_delete(r, props, p_path),
    )


def _expression(r: _Reader, raw: object, path: str) -> str:
    fields = r.fields(raw, path, ("SqlExpression",))
    e_path = _child(path, "SqlExpression")
    text = r.string(r.required(fields, path, "SqlExpression"), e_path)
    if not text.strip():
        r.fail(e_path, "the expression is empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        r.fail(
            e_path,
            f"the expression is {len(text)} characters long: at most {MAX_EXPRESSION_LENGTH}",
        )
    return text


def _parse_rule(r: _Reader, raw: object, path: str) -> RuleConfig:
    fields = r.fields(raw, path, _ENTITY_KEYS)
    name_path = _child(path, "Name")
    name = r.string(r.required(fields, path, "Name"), name_path)
    if name.casefold() != DEFAULT_RULE_NAME.casefold():
        name = r.name(
            name,
            name_path,
            _SUBSCRIPTION_NAME,
            _RULE_NAME_MAX,
            _SUBSCRIPTION_RULE + " (or '$Default')",
        )
    else:
        name = DEFAULT_RULE_NAME
    p_path = _child(path, "Properties")
    props = r.fields(r.required(fields, path, "Properties"), p_path, _RULE_PROPERTIES)

    t_path = _child(p_path, "FilterType")
    type_text = r.string(r.required(props, p_path, "FilterType"), t_path)
    filter_type = _FILTER_TYPES.get(type_text.casefold())
    if filter_type is None:
        r.fail(
            t_path, f"unknown filter type {type_text!r}: use Sql or Correlation (or True, False)"
        )

    sql = correlation = None
    for key, wanted in (("SqlFilter", "sql"), ("CorrelationFilter", "correlation")):
        if key in props and filter_type != wanted:
            r.fail(_child(p_path, key), f"{key} does not go with FilterType {type_text!r}")
        if filter_type == wanted and key not in props:
            r.fail(_child(p_path, key), f"required for FilterType {type_text!r}")
    if filter_type == "sql":
        sql = _expression(r, props["SqlFilter"], _child(p_path, "SqlFilter"))
    elif filter_type == "correlation":
        correlation = _parse_correlation(
            r, props["CorrelationFilter"], _child(p_path, "CorrelationFilter")
        )
    action = (
        _expression(r, props["Action"], _child(p_path, "Action")) if "Action" in props else None
    )
    return RuleConfig(
        name=name,
        filter_type=filter_type,
        sql_expression=sql,
        correlation=correlation,
        action_expression=action,
    )


def _parse_correlation(r: _Reader, raw: object, path: str) -> Mapping[str, object]:
    fields = r.fields(raw, path, _CORRELATION_KEYS)
    if not fields:
        r.fail(path, "a correlation filter needs at least one property")
    out: dict[str, object] = {}
    for key, value in fields.items():
        k_path = _child(path, key)
        if key != "Properties":
            out[key] = r.string(value, k_path)
            continue
        if not isinstance(value, dict):
            r.fail(k_path, f"expected an object, got {_json_type(value)}")
        for dup in getattr(value, "duplicates", ()):
            r.fail(_child(k_path, dup), "property is given more than once")
        if not value:
            r.fail(k_path, "give at least one application property, or leave Properties out")
        for prop, prop_value in value.items():
            if prop_value is None or isinstance(prop_value, list | dict):
                r.fail(
                    _child(k_path, prop),
                    f"expected a string, number or boolean, got {_json_type(prop_value)}",
                )
        out[key] = ReadOnlyDict(value)
    return ReadOnlyDict(out)


def _parse_sas_policies(r: _Reader, raw: object, path: str) -> tuple[SasPolicy, ...]:
    items = r.array(raw, path)
    if not items:
        r.fail(
            path, "at least one policy is required (leave SharedAccessPolicies out for the default)"
        )
    policies: list[SasPolicy] = []
    seen: dict[str, int] = {}
    canonical = {right.casefold(): right for right in ("Manage", "Send", "Listen")}
    for i, item in enumerate(items):
        item_path = f"{path}[{i}]"
        fields = r.fields(item, item_path, _SAS_KEYS)
        key_name = r.name(
            r.required(fields, item_path, "KeyName"),
            _child(item_path, "KeyName"),
            _KEY_NAME,
            256,
            "1-256 characters: letters, digits, '.', '-', '_'",
        )
        if key_name.casefold() in seen:
            r.fail(
                _child(item_path, "KeyName"),
                f"policy {key_name!r} is already defined at {path}[{seen[key_name.casefold()]}]",
            )
        seen[key_name.casefold()] = i
        key_path = _child(item_path, "Key")
        key = r.string(r.required(fields, item_path, "Key"), key_path)
        if not 1 <= len(key) <= 256 or key != key.strip():
            r.fail(key_path, "the key must be 1-256 characters without leading or trailing spaces")
        rights_path = _child(item_path, "Rights")
        raw_rights = r.array(r.required(fields, item_path, "Rights"), rights_path)
        if not raw_rights:
            r.fail(rights_path, "give at least one of Manage, Send, Listen")
        rights: set[str] = set()
        for j, raw_right in enumerate(raw_rights):
            text = r.string(raw_right, f"{rights_path}[{j}]")
            right = canonical.get(text.casefold())
            if right is None:
                r.fail(f"{rights_path}[{j}]", f"unknown right {text!r}: use Manage, Send or Listen")
            rights.add(right)
        if "Manage" in rights:
            rights |= ALL_RIGHTS  # as in Azure, Manage includes Send and Listen
        policies.append(SasPolicy(key_name=key_name, key=key, rights=frozenset(rights)))
    return tuple(policies)
