"""Topic subscriptions: which copies of a message each subscription gets, and rule changes.

A send to a topic is accepted only once every matching subscription holds its copy: all the
copies are stored by the topic partition's broker in one transaction (the partition holds the
subscriptions' sub-queues), so a partitioned topic keeps a message on one partition across
subscriptions [SB partitioning P1, P10, P11]. A message that matches no subscription is
accepted and dropped, as in Azure.

Rules are compiled once (sbemu.filters) and evaluated per message; only subscriptions whose
rules need message properties make the protocol side decode them (`IncomingMessage.view`).
Copy semantics are those of sbemu.filters.evaluate_rules (Azure's "Topic filters and actions").
Rules added or removed at runtime (over `$management`) are kept in `rules.json` beside the
partitions and win over the configuration's rules for that subscription at the next start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from ..atomicfile import atomic_write
from ..errors import (
    ArgumentError,
    EntityAlreadyExists,
    EntityNotFound,
    QuotaExceeded,
)
from ..filters import (
    CorrelationFilter,
    FalseFilter,
    FilterEvaluationError,
    FilterSyntaxError,
    MessageView,
    Rule,
    SqlFilter,
    TrueFilter,
    evaluate_rules,
    rule_from_config,
)
from .broker import DLQ_SUFFIX
from .records import IncomingMessage
from .transitions import Route

DEFAULT_RULE_NAME = "$Default"
FILTER_EXCEPTION_REASON = "SubscriptionRuleEvaluationException"
MAX_SQL_FILTERS_PER_TOPIC = 2_000
MAX_CORRELATION_FILTERS_PER_TOPIC = 100_000
# System properties a rule action may change, and so must be written back to the message.
WRITABLE_SYSTEM = (
    "MessageId",
    "To",
    "Label",
    "ReplyTo",
    "CorrelationId",
    "ContentType",
    "SessionId",
    "ReplyToSessionId",
)
SYSTEM_OVERRIDE_PREFIX = "\x00sys."  # understood by protocol.sections.build_message
REMOVE = b""

EncodeValue = Callable[[object], bytes]


class RuleDefinitionError(ArgumentError):
    """A rule's filter or action does not parse (carries the position)."""


@dataclass(frozen=True, slots=True)
class RuleSource:
    """A rule as written: enough to compile it, persist it and describe it to clients."""

    name: str
    filter_type: str  # "sql" | "correlation" | "true" | "false"
    sql_expression: str | None = None
    correlation: Mapping[str, object] | None = None
    action_expression: str | None = None
    created_ms: int = 0
    parameters: Mapping[str, object] | None = None  # SqlFilter @parameters (admin API)
    action_parameters: Mapping[str, object] | None = None  # SqlRuleAction @parameters

    def compile(self) -> Rule:
        """The executable rule; raises RuleDefinitionError naming the rule and position."""
        try:
            return rule_from_config(
                self.name,
                self.filter_type,
                self.sql_expression,
                dict(self.correlation) if self.correlation is not None else None,
                self.action_expression,
                dict(self.parameters) if self.parameters else None,
                dict(self.action_parameters) if self.action_parameters else None,
            )
        except FilterSyntaxError as exc:
            raise RuleDefinitionError(f"Rule '{self.name}': {exc}") from exc
        except ValueError as exc:
            raise RuleDefinitionError(f"Rule '{self.name}': {exc}") from exc

    def to_json(self) -> dict[str, object]:
        """A JSON-ready form for rules.json."""
        return {
            "name": self.name,
            "filter_type": self.filter_type,
            "sql_expression": self.sql_expression,
            "correlation": _correlation_json(self.correlation, _json_value),
            "action_expression": self.action_expression,
            "created_ms": self.created_ms,
            **({"parameters": _values_json(self.parameters)} if self.parameters else {}),
            **(
                {"action_parameters": _values_json(self.action_parameters)}
                if self.action_parameters
                else {}
            ),
        }

    @staticmethod
    def from_json(data: Mapping[str, object]) -> RuleSource:
        """Read back a rules.json entry."""
        corr = data.get("correlation")
        return RuleSource(
            name=str(data["name"]),
            filter_type=str(data["filter_type"]),
            sql_expression=data.get("sql_expression"),  # type: ignore[arg-type]
            correlation=_correlation_json(corr, _from_json_value)
            if isinstance(corr, dict)
            else None,
            action_expression=data.get("action_expression"),  # type: ignore[arg-type]
            created_ms=int(data.get("created_ms") or 0),  # type: ignore[call-overload]  # an int in rules.json
            parameters=_values_from_json(data.get("parameters")),
            action_parameters=_values_from_json(data.get("action_parameters")),
        )


# Rule parameter and correlation property values keep their type in rules.json: JSON has no
# datetime or duration, so those are written as {"$dateTime": ISO 8601} / {"$duration": ms}.
def _json_value(value: object) -> object:
    if isinstance(value, datetime):
        return {"$dateTime": value.isoformat()}
    if isinstance(value, timedelta):
        return {"$duration": value // timedelta(microseconds=1)}
    return value


def _from_json_value(value: object) -> object:
    if isinstance(value, dict):
        if "$dateTime" in value:
            return datetime.fromisoformat(str(value["$dateTime"]))
        if "$duration" in value:
            return timedelta(microseconds=int(value["$duration"]))
    return value


def _values_json(values: Mapping[str, object]) -> dict[str, object]:
    return {k: _json_value(v) for k, v in values.items()}


def _values_from_json(values: object) -> dict[str, object] | None:
    if not isinstance(values, dict) or not values:
        return None
    return {str(k): _from_json_value(v) for k, v in values.items()}


def _correlation_json(
    corr: Mapping[str, object] | None, convert: Callable[[object], object]
) -> dict[str, object] | None:
    """A correlation filter's fields with its application Properties' values converted."""
    if corr is None:
        return None
    out = dict(corr)
    props = out.get("Properties")
    if isinstance(props, Mapping):
        out["Properties"] = {k: convert(v) for k, v in props.items()}
    return out


@dataclass(frozen=True, slots=True)
class SubscriptionSpec:
    """A configured subscription as the router needs it."""

    name: str
    rules: tuple[RuleSource, ...]
    dead_letter_on_filter_exceptions: bool = True


@dataclass(slots=True)
class Subscription:
    """A subscription's compiled rules and where its copies go."""

    name: str
    queue: str
    sources: list[RuleSource]
    rules: list[Rule] = field(default_factory=list)
    dead_letter_on_filter_exceptions: bool = True
    always: bool | None = None  # True: every message, False: none, None: evaluate

    def recompile(self) -> None:
        """Compile the rules and work out the shortcut cases."""
        self.rules = [src.compile() for src in self.sources]
        if all(r.action is None and isinstance(r.filter, FalseFilter) for r in self.rules):
            self.always = False
        elif any(r.action is None and isinstance(r.filter, TrueFilter) for r in self.rules) and all(
            r.action is None for r in self.rules
        ):
            self.always = True
        else:
            self.always = None


def subscription_queue(name: str) -> str:
    """The sub-queue name of a subscription inside each topic partition."""
    return f"subscriptions/{name.lower()}"


class Subscriptions:
    """All subscriptions of one topic."""

    def __init__(
        self,
        topic: str,
        specs: tuple[SubscriptionSpec, ...],
        rules_path: Path,
        encode_value: EncodeValue,
        encode_symbol: EncodeValue,
    ) -> None:
        self.topic = topic
        self.rules_path = rules_path
        self.encode_value = encode_value
        self.encode_symbol = encode_symbol
        stored = self._read_rules()
        self.by_name: dict[str, Subscription] = {}
        for spec in specs:
            sources = stored.get(spec.name.lower(), list(spec.rules))
            sub = Subscription(
                spec.name,
                subscription_queue(spec.name),
                list(sources),
                dead_letter_on_filter_exceptions=spec.dead_letter_on_filter_exceptions,
            )
            try:
                sub.recompile()
            except RuleDefinitionError as exc:
                raise RuleDefinitionError(
                    f"topic '{topic}', subscription '{spec.name}': {exc.description}"
                ) from exc
            self.by_name[spec.name.lower()] = sub

    # ---------------------------------------------------------------- routing
    def route(self, msg: IncomingMessage) -> list[Route]:
        """The copies a message makes: one route per subscription copy."""
        routes: list[Route] = []
        view: MessageView | None = None
        for sub in self.by_name.values():
            if sub.always is True:
                routes.append(Route(sub.queue))
                continue
            if sub.always is False:
                continue
            if view is None:
                view = msg.view() if msg.view is not None else MessageView({}, {})  # type: ignore[assignment]
            assert view is not None
            try:
                copies = evaluate_rules(sub.rules, view) or []
            except FilterEvaluationError as exc:
                if sub.dead_letter_on_filter_exceptions:
                    routes.append(
                        Route(sub.queue + DLQ_SUFFIX, None, FILTER_EXCEPTION_REASON, str(exc))
                    )
                continue
            for copy in copies:
                routes.append(Route(sub.queue, self._overrides(view, copy)))
        return routes

    def _overrides(self, original: MessageView, copy: MessageView) -> dict[str, bytes] | None:
        """What a rule action changed, as encoded property overrides."""
        if copy is original:
            return None
        out: dict[str, bytes] = {}
        for key, value in copy.user.items():
            if key not in original.user or original.user[key] != value:
                out[key] = self.encode_value(value)
        for key in original.user:
            if key not in copy.user:
                out[key] = REMOVE
        for key in WRITABLE_SYSTEM:
            if copy.system.get(key) != original.system.get(key):
                value = copy.system.get(key)
                encode = self.encode_symbol if key == "ContentType" else self.encode_value
                out[SYSTEM_OVERRIDE_PREFIX + key] = REMOVE if value is None else encode(value)
        return out or None

    # ---------------------------------------------------------------- rule management
    def subscription(self, name: str) -> Subscription:
        """A subscription by name; raises EntityNotFound."""
        sub = self.by_name.get(name.lower())
        if sub is None:
            raise EntityNotFound(
                f"The messaging entity '{self.topic}/Subscriptions/{name}' could not be found."
            )
        return sub

    def add_rule(self, name: str, source: RuleSource, now_ms: int) -> None:
        """Add a rule at runtime (persisted); duplicate names and quotas are refused. A rule
        without a creation time gets `now_ms` (Unix milliseconds)."""
        sub = self.subscription(name)
        if any(s.name.lower() == source.name.lower() for s in sub.sources):
            raise EntityAlreadyExists(
                f"The messaging entity '{self.topic}|{sub.name}|{source.name}' already exists."
            )
        rule = source.compile()
        self._check_quota(rule)
        if not source.created_ms:
            source = RuleSource(
                source.name,
                source.filter_type,
                source.sql_expression,
                source.correlation,
                source.action_expression,
                now_ms,
            )
        before = sub.sources
        sub.sources = [*before, source]
        sub.recompile()
        self._write_rules_or_undo(lambda: self._restore_sources(sub, before))

    def remove_rule(self, name: str, rule_name: str) -> None:
        """Remove a rule by name (persisted); unknown names are not-found."""
        sub = self.subscription(name)
        kept = [s for s in sub.sources if s.name.lower() != rule_name.lower()]
        if len(kept) == len(sub.sources):
            raise EntityNotFound(f"The rule '{rule_name}' could not be found.")
        before, sub.sources = sub.sources, kept
        sub.recompile()
        self._write_rules_or_undo(lambda: self._restore_sources(sub, before))

    def add_subscription(self, spec: SubscriptionSpec) -> Subscription:
        """A subscription created at runtime (admin API); its rules are persisted."""
        sub = Subscription(
            spec.name,
            subscription_queue(spec.name),
            list(spec.rules),
            dead_letter_on_filter_exceptions=spec.dead_letter_on_filter_exceptions,
        )
        sub.recompile()  # raises RuleDefinitionError before anything changed
        for rule in sub.rules:
            self._check_quota(rule)
        self.by_name[spec.name.lower()] = sub
        self._write_rules_or_undo(lambda: self.by_name.pop(spec.name.lower(), None))
        return sub

    def remove_subscription(self, name: str) -> None:
        """Forget a deleted subscription and its persisted rules."""
        sub = self.subscription(name)
        del self.by_name[name.lower()]
        self._write_rules_or_undo(lambda: self.by_name.__setitem__(name.lower(), sub))

    def _check_quota(self, new_rule: Rule) -> None:
        """Azure's per-topic limits on SQL and correlation filters."""
        rules = [r for sub in self.by_name.values() for r in sub.rules] + [new_rule]
        sql = sum(1 for r in rules if isinstance(r.filter, SqlFilter))
        corr = sum(1 for r in rules if isinstance(r.filter, CorrelationFilter))
        if sql > MAX_SQL_FILTERS_PER_TOPIC:
            raise QuotaExceeded(
                f"The topic '{self.topic}' already has {MAX_SQL_FILTERS_PER_TOPIC} SQL filters."
            )
        if corr > MAX_CORRELATION_FILTERS_PER_TOPIC:
            raise QuotaExceeded(
                f"The topic '{self.topic}' already has {MAX_CORRELATION_FILTERS_PER_TOPIC} "
                "correlation filters."
            )

    def _read_rules(self) -> dict[str, list[RuleSource]]:
        if not self.rules_path.exists():
            return {}
        data = json.loads(self.rules_path.read_text())
        return {sub: [RuleSource.from_json(item) for item in items] for sub, items in data.items()}

    def _write_rules_or_undo(self, undo: Callable[[], object]) -> None:
        """_write_rules(); when the file cannot be written (a read-only or failing disk) the
        change is undone in memory too, so what is served is what a restart would load."""
        try:
            self._write_rules()
        except OSError:
            undo()
            raise

    @staticmethod
    def _restore_sources(sub: Subscription, sources: list[RuleSource]) -> None:
        sub.sources = sources
        sub.recompile()

    def _write_rules(self) -> None:
        """Write every subscription's rules atomically (write, fsync, rename, fsync the dir)."""
        data = {key: [s.to_json() for s in sub.sources] for key, sub in self.by_name.items()}
        atomic_write(self.rules_path, json.dumps(data, indent=1).encode())
