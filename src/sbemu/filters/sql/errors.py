"""The two errors of the SQL language: one that does not parse, one that fails on a message."""

from __future__ import annotations


class FilterSyntaxError(ValueError):
    """An expression that does not parse; ``position`` is the 0-based offset of the culprit."""

    def __init__(self, reason: str, position: int, near: str | None = None, expression: str = ""):
        self.reason = reason
        self.position = position
        self.near = near
        self.expression = expression
        where = "end of expression" if not near else f"'{near}'"
        super().__init__(f"{reason} at position {position} near {where}")


class FilterEvaluationError(Exception):
    """A filter or action that throws while evaluating a message (Azure's FilterException)."""

    def __init__(self, message: str, *, rule_name: str | None = None):
        super().__init__(message)
        self.rule_name = rule_name
