"""Service Bus subscription filters (SQL, correlation, true/false) and SQL rule actions.

See ``sql`` for the language and its semantics, ``correlation`` for correlation filters and
``rules`` for how several rules of a subscription combine into copies of a message.
"""

from .correlation import CorrelationFilter
from .rules import RULE_NAME_PROPERTY, Rule, evaluate_rules, rule_from_config
from .sql import (
    READONLY_SYSTEM_PROPERTIES,
    SYSTEM_PROPERTIES,
    FalseFilter,
    FilterEvaluationError,
    FilterSyntaxError,
    MessageView,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    canonical_system_name,
)

__all__ = [
    "READONLY_SYSTEM_PROPERTIES",
    "RULE_NAME_PROPERTY",
    "SYSTEM_PROPERTIES",
    "CorrelationFilter",
    "FalseFilter",
    "FilterEvaluationError",
    "FilterSyntaxError",
    "MessageView",
    "Rule",
    "SqlFilter",
    "SqlRuleAction",
    "TrueFilter",
    "canonical_system_name",
    "evaluate_rules",
    "rule_from_config",
]
