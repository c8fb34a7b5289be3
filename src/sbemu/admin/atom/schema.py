"""The Atom API's vocabulary: XML namespaces, content types, the description elements' fields
(in the SDK models' order) and the error answered as Azure's <Error> document."""

from __future__ import annotations

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
SB2 = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"
API_VERSION = "2021-05"
TIMESPAN_MAX_TEXT = "P10675199DT2H48M5.4775807S"
XML_TYPE = "application/atom+xml;type=entry;charset=utf-8"
FEED_TYPE = "application/atom+xml;type=feed;charset=utf-8"
MORE_INFO = "To know more visit https://aka.ms/sbResourceMgrExceptions."

# (element, description key, type) in the SDK models' order. Types: dur, int, bool, str, raw,
# and the computed ones (size, count, created, updated, accessed, counts, avail, maxsize, fwd).
QUEUE_FIELDS = (
    ("LockDuration", "lock_duration_ms", "dur"),
    ("MaxSizeInMegabytes", "max_size_mb", "maxsize"),
    ("RequiresDuplicateDetection", "requires_duplicate_detection", "bool"),
    ("RequiresSession", "requires_session", "bool"),
    ("DefaultMessageTimeToLive", "default_message_ttl_ms", "dur"),
    ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration", "bool"),
    ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_window_ms", "dur"),
    ("MaxDeliveryCount", "max_delivery_count", "int"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("SizeInBytes", None, "size"),
    ("MessageCount", None, "count"),
    ("IsAnonymousAccessible", "is_anonymous_accessible", "bool"),
    ("AuthorizationRules", "authorization_rules", "raw"),
    ("Status", "status", "str"),
    ("ForwardTo", "forward_to", "fwd"),
    ("UserMetadata", "user_metadata", "str"),
    ("CreatedAt", None, "created"),
    ("UpdatedAt", None, "updated"),
    ("AccessedAt", None, "accessed"),
    ("SupportOrdering", "support_ordering", "bool"),
    ("CountDetails", None, "counts"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle_ms", "dur"),
    ("EnablePartitioning", "enable_partitioning", "bool"),
    ("EntityAvailabilityStatus", None, "avail"),
    ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to", "fwd"),
    ("EnableExpress", "enable_express", "bool"),
    ("MaxMessageSizeInKilobytes", "max_message_size_kb", "int"),
)
TOPIC_FIELDS = (
    ("DefaultMessageTimeToLive", "default_message_ttl_ms", "dur"),
    ("MaxSizeInMegabytes", "max_size_mb", "maxsize"),
    ("RequiresDuplicateDetection", "requires_duplicate_detection", "bool"),
    ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_window_ms", "dur"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("SizeInBytes", None, "size"),
    ("FilteringMessagesBeforePublishing", "filtering_messages_before_publishing", "bool"),
    ("IsAnonymousAccessible", "is_anonymous_accessible", "bool"),
    ("AuthorizationRules", "authorization_rules", "raw"),
    ("Status", "status", "str"),
    ("CreatedAt", None, "created"),
    ("UpdatedAt", None, "updated"),
    ("AccessedAt", None, "accessed"),
    ("SupportOrdering", "support_ordering", "bool"),
    ("CountDetails", None, "counts"),
    ("SubscriptionCount", None, "subcount"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle_ms", "dur"),
    ("EnablePartitioning", "enable_partitioning", "bool"),
    ("EntityAvailabilityStatus", None, "avail"),
    ("EnableSubscriptionPartitioning", "enable_subscription_partitioning", "bool"),
    ("EnableExpress", "enable_express", "bool"),
    ("UserMetadata", "user_metadata", "str"),
    ("MaxMessageSizeInKilobytes", "max_message_size_kb", "int"),
)
SUBSCRIPTION_FIELDS = (
    ("LockDuration", "lock_duration_ms", "dur"),
    ("RequiresSession", "requires_session", "bool"),
    ("DefaultMessageTimeToLive", "default_message_ttl_ms", "dur"),
    ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration", "bool"),
    (
        "DeadLetteringOnFilterEvaluationExceptions",
        "dead_lettering_on_filter_evaluation_exceptions",
        "bool",
    ),
    ("MessageCount", None, "count"),
    ("MaxDeliveryCount", "max_delivery_count", "int"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("Status", "status", "str"),
    ("ForwardTo", "forward_to", "fwd"),
    ("CreatedAt", None, "created"),
    ("UpdatedAt", None, "updated"),
    ("AccessedAt", None, "accessed"),
    ("CountDetails", None, "counts"),
    ("UserMetadata", "user_metadata", "str"),
    ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to", "fwd"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle_ms", "dur"),
    ("EntityAvailabilityStatus", None, "avail"),
)
FIELDS = {
    "QueueDescription": ("queue", QUEUE_FIELDS),
    "TopicDescription": ("topic", TOPIC_FIELDS),
    "SubscriptionDescription": ("subscription", SUBSCRIPTION_FIELDS),
}
CORRELATION_FIELDS = (
    "CorrelationId",
    "MessageId",
    "To",
    "ReplyTo",
    "Label",
    "SessionId",
    "ReplyToSessionId",
    "ContentType",
)


class AtomError(Exception):
    """An error answered as Azure's <Error> document."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
