"""SqlFilter and SqlRuleAction (each an expression compiled once), TrueFilter and FalseFilter."""

from __future__ import annotations

from collections.abc import Mapping

from .errors import FilterEvaluationError
from .message import MessageView
from .parser import Parser


def _guarded(exc: Exception, what: str) -> FilterEvaluationError:
    return FilterEvaluationError(f"{what} failed: {type(exc).__name__}: {exc}")


class _Expression:
    """What a SQL filter and a SQL rule action share: the expression and its parameters, by
    which two of one class are equal."""

    __slots__ = ()
    _tag = ""  # in the hash, so a filter and an action of one text differ
    expression: str
    parameters: dict[str, object]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.expression == other.expression and self.parameters == other.parameters

    def __hash__(self) -> int:
        return hash((self._tag, self.expression))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.expression!r})"


class SqlFilter(_Expression):
    """A SQL filter, compiled once. ``matches`` is TRUE only when the predicate is TRUE."""

    __slots__ = ("expression", "parameters", "_fn")
    _tag = "sql"

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


class _ConstantFilter:
    """A filter whose answer does not depend on the message; equal to any filter of its class."""

    __slots__ = ()
    expression: str

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class TrueFilter(_ConstantFilter):
    """Matches every message (SQL ``1=1``)."""

    __slots__ = ()
    expression = "1=1"

    def matches(self, msg: MessageView) -> bool:
        return True


class FalseFilter(_ConstantFilter):
    """Matches no message (SQL ``1=0``)."""

    __slots__ = ()
    expression = "1=0"

    def matches(self, msg: MessageView) -> bool:
        return False


class SqlRuleAction(_Expression):
    """``SET prop = expr`` / ``REMOVE prop`` statements, compiled once."""

    __slots__ = ("expression", "parameters", "_stmts")
    _tag = "action"

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
