"""The Config.json schema's names: the properties allowed at each level and the name rules."""

from __future__ import annotations

import re

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
    "Name",
    "Queues",
    "Topics",
    "PremiumMessagingPartitions",
    "SharedAccessPolicies",
    "AmqpPort",
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
