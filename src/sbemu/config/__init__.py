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
* an auto-forwarding destination (``ForwardTo``, ``ForwardDeadLetteredMessagesTo``) must be a
  queue or topic of the namespace; the entity itself, loops and long chains are accepted, as
  Azure and the admin API accept them (a message stops after 4 hops in the transfer dead-letter
  queue with MaxTransferHopCountExceeded): one rule for both, ``forwarding``.

The package: ``model`` (the frozen dataclasses, limits and ConfigError), ``jsonc`` (JSON with
comments), ``fields`` (typed access with JSON paths), ``durations`` (ISO-8601 and TimeSpan text),
``schema`` (the property names allowed at each level), ``entities`` (queues, topics,
subscriptions, rules), ``forwarding`` (which auto-forwarding destinations are accepted, shared with
the admin API), ``reader`` (load_config, parse_config, the namespace checks) and the
embedded default, ``default.json`` (package data). Everything is re-exported here.
"""

from __future__ import annotations

from sbemu.config.durations import (
    format_duration_ms,
    parse_duration_ms,
)
from sbemu.config.forwarding import MissingForwardTarget, missing_forward_targets
from sbemu.config.jsonc import (
    ReadOnlyDict,
)
from sbemu.config.model import (
    ALL_RIGHTS,
    AUTO_DELETE_MIN_MS,
    AUTO_DELETE_TEST_MIN_MS,
    AZURE_MAX_SIZES_MB,
    DEFAULT_DUPLICATE_DETECTION_WINDOW_MS,
    DEFAULT_LOCK_DURATION_MS,
    DEFAULT_LOGGING_TYPE,
    DEFAULT_MAX_DELIVERY_COUNT,
    DEFAULT_MAX_SIZE_MB,
    DEFAULT_MESSAGE_TTL_MS,
    DEFAULT_RULE,
    DEFAULT_RULE_NAME,
    DEFAULT_SAS_KEY,
    DEFAULT_SAS_KEY_NAME,
    DEFAULT_SAS_POLICY,
    DUPLICATE_WINDOW_MAX_MS,
    DUPLICATE_WINDOW_MIN_MS,
    ENTITY_STATUSES,
    INT32_MAX,
    LOCK_DURATION_MAX_MS,
    LOCK_DURATION_MIN_MS,
    MAX_CORRELATION_FILTERS_PER_TOPIC,
    MAX_ENTITIES,
    MAX_EXPRESSION_LENGTH,
    MAX_PARTITIONED_ENTITIES,
    MAX_SQL_FILTERS_PER_TOPIC,
    MAX_SUBSCRIPTIONS_PER_TOPIC,
    PREMIUM_MAX_MESSAGE_SIZE,
    PREMIUM_MAX_MESSAGE_SIZE_KB_RANGE,
    PREMIUM_PARTITION_COUNTS,
    STANDARD_MAX_MESSAGE_SIZE,
    STANDARD_PARTITION_COUNT,
    TEST_MAX_SIZES_MB,
    TIMESPAN_MAX_MS,
    Config,
    ConfigError,
    NamespaceConfig,
    QueueConfig,
    RuleConfig,
    SasPolicy,
    SubscriptionConfig,
    TopicConfig,
)
from sbemu.config.reader import (
    config_from_text,
    default_config,
    default_config_text,
    load_config,
    parse_config,
)

__all__ = [
    "ALL_RIGHTS",
    "AUTO_DELETE_MIN_MS",
    "AUTO_DELETE_TEST_MIN_MS",
    "AZURE_MAX_SIZES_MB",
    "Config",
    "ConfigError",
    "DEFAULT_DUPLICATE_DETECTION_WINDOW_MS",
    "DEFAULT_LOCK_DURATION_MS",
    "DEFAULT_LOGGING_TYPE",
    "DEFAULT_MAX_DELIVERY_COUNT",
    "DEFAULT_MAX_SIZE_MB",
    "DEFAULT_MESSAGE_TTL_MS",
    "DEFAULT_RULE",
    "DEFAULT_RULE_NAME",
    "DEFAULT_SAS_KEY",
    "DEFAULT_SAS_KEY_NAME",
    "DEFAULT_SAS_POLICY",
    "DUPLICATE_WINDOW_MAX_MS",
    "DUPLICATE_WINDOW_MIN_MS",
    "ENTITY_STATUSES",
    "INT32_MAX",
    "LOCK_DURATION_MAX_MS",
    "LOCK_DURATION_MIN_MS",
    "MAX_CORRELATION_FILTERS_PER_TOPIC",
    "MAX_ENTITIES",
    "MAX_EXPRESSION_LENGTH",
    "MAX_PARTITIONED_ENTITIES",
    "MissingForwardTarget",
    "MAX_SQL_FILTERS_PER_TOPIC",
    "MAX_SUBSCRIPTIONS_PER_TOPIC",
    "NamespaceConfig",
    "PREMIUM_MAX_MESSAGE_SIZE",
    "PREMIUM_MAX_MESSAGE_SIZE_KB_RANGE",
    "PREMIUM_PARTITION_COUNTS",
    "QueueConfig",
    "ReadOnlyDict",
    "RuleConfig",
    "STANDARD_MAX_MESSAGE_SIZE",
    "STANDARD_PARTITION_COUNT",
    "SasPolicy",
    "SubscriptionConfig",
    "TEST_MAX_SIZES_MB",
    "TIMESPAN_MAX_MS",
    "TopicConfig",
    "config_from_text",
    "default_config",
    "default_config_text",
    "format_duration_ms",
    "missing_forward_targets",
    "load_config",
    "parse_config",
    "parse_duration_ms",
]
