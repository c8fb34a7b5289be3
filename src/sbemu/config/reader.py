"""Loading: a Config.json file (or the embedded default) validated into a Config, namespace by
namespace, with the auto-forwarding destinations checked across the namespace
(sbemu.config.forwarding)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from sbemu.config.entities import _parse_queue, _parse_sas_policies, _parse_topic
from sbemu.config.fields import _child, _Reader
from sbemu.config.forwarding import missing_forward_targets
from sbemu.config.jsonc import _decode_json
from sbemu.config.model import (
    DEFAULT_LOGGING_TYPE,
    DEFAULT_SAS_POLICY,
    MAX_ENTITIES,
    MAX_PARTITIONED_ENTITIES,
    PREMIUM_MAX_MESSAGE_SIZE,
    PREMIUM_PARTITION_COUNTS,
    STANDARD_MAX_MESSAGE_SIZE,
    Config,
    ConfigError,
    NamespaceConfig,
    QueueConfig,
    SasPolicy,
    TopicConfig,
)
from sbemu.config.schema import (
    _ENTITY_KEYS,
    _ENTITY_NAME,
    _ENTITY_NAME_MAX,
    _ENTITY_RULE,
    _LOGGING_TARGETS,
    _NAMESPACE_KEYS,
    _NAMESPACE_NAME,
    _NAMESPACE_RULE,
    _ROOT_KEYS,
    _TOPIC_KEYS,
    _USER_CONFIG_KEYS,
)


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


def config_from_text(text: str, source: str) -> Config:
    """Validate a Config.json document given as text (``SBEMU_CONFIG_JSON``); errors name
    ``source``."""
    return parse_config(_decode_json(text.lstrip("\ufeff"), source), source)


def default_config_text() -> str:
    """The embedded default Config.json (package data, with comments)."""
    return resources.files("sbemu.config").joinpath("default.json").read_text(encoding="utf-8")


def default_config() -> Config:
    """The embedded default: Microsoft's sample entities plus a partitioned queue and topic."""
    return parse_config(
        _decode_json(default_config_text(), "<embedded default>"), "<embedded default>"
    )


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
    # the one rule the admin API applies too: the destination exists (loops are accepted)
    for missing in missing_forward_targets([*queues, *topics]):
        owner = _owner_path(path, raw_queues, raw_topics, queues, topics, missing.owner)
        r.fail(
            _child(owner, missing.key),
            f"{missing.target!r} is not a queue or topic of this namespace",
        )
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


def _owner_path(
    path: str,
    raw_queues: list[object],
    raw_topics: list[object],
    queues: Sequence[QueueConfig],
    topics: Sequence[TopicConfig],
    label: str,
) -> str:
    """The JSON path of the Properties of the queue or subscription labelled `label`."""
    for i, q in enumerate(queues):
        if q.name == label:
            return f"{path}.Queues[{i}].Properties"
    for i, t in enumerate(topics):
        for j, sub in enumerate(t.subscriptions):
            if f"{t.name}/Subscriptions/{sub.name}" == label:
                return f"{path}.Topics[{i}].Subscriptions[{j}].Properties"
    return path


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
