"""Validation of queues, topics, subscriptions, rules and SAS policies into the model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sbemu.config.fields import _child, _Reader
from sbemu.config.jsonc import ReadOnlyDict, _json_type
from sbemu.config.model import (
    ALL_RIGHTS,
    AUTO_DELETE_MIN_MS,
    AUTO_DELETE_TEST_MIN_MS,
    AZURE_MAX_SIZES_MB,
    DEFAULT_DUPLICATE_DETECTION_WINDOW_MS,
    DEFAULT_LOCK_DURATION_MS,
    DEFAULT_MAX_DELIVERY_COUNT,
    DEFAULT_MAX_SIZE_MB,
    DEFAULT_MESSAGE_TTL_MS,
    DEFAULT_RULE,
    DEFAULT_RULE_NAME,
    DUPLICATE_WINDOW_MAX_MS,
    DUPLICATE_WINDOW_MIN_MS,
    ENTITY_STATUSES,
    LOCK_DURATION_MAX_MS,
    LOCK_DURATION_MIN_MS,
    MAX_CORRELATION_FILTERS_PER_TOPIC,
    MAX_EXPRESSION_LENGTH,
    MAX_SQL_FILTERS_PER_TOPIC,
    MAX_SUBSCRIPTIONS_PER_TOPIC,
    PREMIUM_MAX_MESSAGE_SIZE_KB_RANGE,
    STANDARD_PARTITION_COUNT,
    TEST_MAX_SIZES_MB,
    TIMESPAN_MAX_MS,
    QueueConfig,
    RuleConfig,
    SasPolicy,
    SubscriptionConfig,
    TopicConfig,
)
from sbemu.config.schema import (
    _CORRELATION_KEYS,
    _ENTITY_KEYS,
    _FILTER_TYPES,
    _KEY_NAME,
    _QUEUE_PROPERTIES,
    _RULE_NAME_MAX,
    _RULE_PROPERTIES,
    _SAS_KEYS,
    _SUBSCRIPTION_KEYS,
    _SUBSCRIPTION_NAME,
    _SUBSCRIPTION_NAME_MAX,
    _SUBSCRIPTION_PROPERTIES,
    _SUBSCRIPTION_RULE,
    _TOPIC_KEYS,
    _TOPIC_PROPERTIES,
)


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
) -> str | None:
    value = props.get(key)
    if value is None:
        return None
    target = r.string(value, _child(path, key))
    if target == "":
        return None  # Microsoft's sample writes "" for "no forwarding"
    # spelled as the entity is (a destination that does not exist is reported by the reader,
    # sbemu.config.forwarding); the entity itself is a destination as any other, as in Azure
    return entities.get(target.casefold(), target)


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
            test,
            _child(path, "SbemuTestAutoDeleteOnIdle"),
            AUTO_DELETE_TEST_MIN_MS,
            TIMESPAN_MAX_MS,
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
        forward_to=_forward_target(r, props, p_path, "ForwardTo", entities),
        forward_dead_lettered_messages_to=_forward_target(
            r, props, p_path, "ForwardDeadLetteredMessagesTo", entities
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
        forward_to=_forward_target(r, props, p_path, "ForwardTo", entities),
        forward_dead_lettered_messages_to=_forward_target(
            r, props, p_path, "ForwardDeadLetteredMessagesTo", entities
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
