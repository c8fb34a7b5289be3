"""SqlFilter and SqlRuleAction (each an expression compiled once), TrueFilter and FalseFilter."""

from __future__ import annotations

from collections.abc import Mapping

from .errors import FilterEvaluationError
from .message import MessageView
from .parser import Parser


def _guarded(exc: Exception, what: str) -> FilterEvaluationError:
    return FilterEvaluationError(f"{what} failed: {type(exc).__name__}: {exc}")


class SqlFilter:
    """A SQL filter, compiled once. ``matches`` is TRUE only when the predicate is TRUE."""

    __slots__ = ("expression", "parameters", "_fn")

    def __init__(self, expression: str, parameters: Mapping[str, object] | None = None):
        parser = Parser(expression, parameters)
        root = parser.predicate()
        parser.expect_end()
        self.expression = expression
        self.parameters = dict(parameters or {})
        self._fn = root.fn

    def evaluate(self, msg: MessageView) -> bool | None:
        """The predicate's three-valued result: True, False or None (unknown)."""
        try:
            return self._fn(msg)  # type: ignore[return-value]
        except FilterEvaluationError:
            raise
        except Exception as e:  # a value of a type nothing here expected
            raise _guarded(e, f"filter {self.expression!r}") from e

    def matches(self, msg: MessageView) -> bool:
        try:
            return self._fn(msg) is True
        except FilterEvaluationError:
            raise
        except Exception as e:
            raise _guarded(e, f"filter {self.expression!r}") from e

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SqlFilter):
            return NotImplemented
        return self.expression == other.expression and self.parameters == other.parameters

    def __hash__(self) -> int:
        return hash(("sql", self.expression))

    def __repr__(self) -> str:
        return f"SqlFilter({self.expression!r})"


class TrueFilter:
    """Matches every message (SQL ``1=1``)."""

    __slots__ = ()
    expression = "1=1"

    def matches(self, msg: MessageView) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrueFilter)

    def __hash__(self) -> int:
        return hash("TrueFilter")

    def __repr__(self) -> str:
        return "TrueFilter()"


class FalseFilter:
    """Matches no message (SQL ``1=0``)."""

    __slots__ = ()
    expression = "1=0"

    def matches(self, msg: MessageView) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FalseFilter)

    def __hash__(self) -> int:
        return hash("FalseFilter")

    def __repr__(self) -> str:
        return "FalseFilter()"


class SqlRuleAction:
    """``SET prop = expr`` / ``REMOVE prop`` statements, compiled once."""

    __slots__ = ("expression", "parameters", "_stmts")

    def __init__(self, expression: str, parameters: Mapping[str, object] | None = None):
        parser = Parser(expression, parameters)
        self._stmts = tuple(parser.statements())
        parser.expect_end()
        self.expression = expression
        self.parameters = dict(parameters or {})

    def apply(self, msg: MessageView) -> MessageView:
        """A modified copy of ``msg``; ``msg`` itself is left untouched."""
        out = msg.copy()
        try:
            for stmt in self._stmts:
                stmt(out)
        except FilterEvaluationError:
            raise
        except Exception as e:
            raise _guarded(e, f"action {self.expression!r}") from e
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SqlRuleAction):
            return NotImplemented
        return self.expression == other.expression and self.parameters == other.parameters

    def __hash__(self) -> int:
        return hash(("action", self.expression))

    def __repr__(self) -> str:
        return f"SqlRuleAction({self.expression!r})"
