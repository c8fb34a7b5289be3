"""Value semantics: kinds, comparison, arithmetic, LIKE patterns and system property values.

Operators "follow C# implicit conversion semantics whenever possible" (the package docstring
gives the rules); this module owns them, so the compiled nodes only combine them.
"""

from __future__ import annotations

import math
import operator
import re
import uuid
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

from .errors import FilterEvaluationError

K_NUM, K_STR, K_BOOL, K_DT, K_TD, K_UUID, K_BYTES, K_OTHER = (
    "number",
    "string",
    "boolean",
    "datetime",
    "timespan",
    "guid",
    "binary",
    "other",
)
_KIND_BY_CLASS: dict[type, str] = {
    str: K_STR,
    int: K_NUM,
    float: K_NUM,
    bool: K_BOOL,
    datetime: K_DT,
    timedelta: K_TD,
    uuid.UUID: K_UUID,
    bytes: K_BYTES,
    bytearray: K_BYTES,
}
_ORDERED_KINDS = frozenset({K_NUM, K_STR, K_DT, K_TD})


def kind_of(v: object) -> str:
    k = _KIND_BY_CLASS.get(v.__class__)
    if k is not None:
        return k
    if isinstance(v, bool):
        return K_BOOL
    if isinstance(v, (int, float)):
        return K_NUM
    if isinstance(v, str):
        return K_STR
    if isinstance(v, datetime):
        return K_DT
    if isinstance(v, date):
        return K_OTHER
    if isinstance(v, timedelta):
        return K_TD
    if isinstance(v, uuid.UUID):
        return K_UUID
    if isinstance(v, (bytes, bytearray, memoryview)):
        return K_BYTES
    return K_OTHER


def type_name(v: object) -> str:
    return "null" if v is None else kind_of(v) if kind_of(v) != K_OTHER else type(v).__name__


def _utc(v: datetime) -> datetime:
    return v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v


def compare(op: Callable[[Any, Any], Any], a: Any, b: Any) -> bool:
    """``a op b`` for two non-NULL values; FALSE when their kinds are incompatible."""
    ca = a.__class__
    if ca is b.__class__ and (ca is str or ca is int or ca is float):
        return op(a, b)
    ka = kind_of(a)
    if ka is not kind_of(b):
        return False
    if ka is K_DT:
        return op(_utc(a), _utc(b))
    if ka in _ORDERED_KINDS:
        return op(a, b)
    if op is operator.eq:
        return a == b
    if op is operator.ne:
        return a != b
    return False  # no ordering for bool, Guid, binary, other


def equal(a: object, b: object) -> bool:
    return compare(operator.eq, a, b)


INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _wrap(i: int) -> int:
    if INT64_MIN <= i <= INT64_MAX:
        return i
    return ((i + 2**63) % 2**64) - 2**63


def _arith_error(op: str, a: object, b: object) -> FilterEvaluationError:
    return FilterEvaluationError(
        f"operator '{op}' cannot be applied to {type_name(a)} and {type_name(b)}"
    )


def _nums(op: str, a: Any, b: Any) -> tuple[bool, Any, Any]:
    """(both_int, a, b) for two numbers, else raise."""
    if kind_of(a) is K_NUM and kind_of(b) is K_NUM:
        if isinstance(a, float) or isinstance(b, float):
            return False, float(a), float(b)
        return True, int(a), int(b)
    raise _arith_error(op, a, b)


def _add(a: object, b: object) -> object:
    ca = a.__class__
    if ca is b.__class__:
        if ca is int:
            return _wrap(a + b)  # type: ignore[operator]
        if ca is float or ca is str:
            return a + b  # type: ignore[operator]
    ka, kb = kind_of(a), kind_of(b)
    if ka is K_STR and kb is K_STR:
        return str(a) + str(b)
    if (ka is K_DT and kb is K_TD) or (ka is K_TD and kb in (K_DT, K_TD)):
        return a + b  # type: ignore[operator]
    ints, x, y = _nums("+", a, b)
    return _wrap(x + y) if ints else x + y


def _sub(a: object, b: object) -> object:
    ca = a.__class__
    if ca is b.__class__:
        if ca is int:
            return _wrap(a - b)  # type: ignore[operator]
        if ca is float:
            return a - b  # type: ignore[operator]
    ka, kb = kind_of(a), kind_of(b)
    if ka is K_DT and kb is K_DT:
        return _utc(a) - _utc(b)  # type: ignore[arg-type]
    if ka in (K_DT, K_TD) and kb is K_TD:
        return a - b  # type: ignore[operator]
    ints, x, y = _nums("-", a, b)
    return _wrap(x - y) if ints else x - y


def _mul(a: object, b: object) -> object:
    ints, x, y = _nums("*", a, b)
    return _wrap(x * y) if ints else x * y


def _div(a: object, b: object) -> object:
    ints, x, y = _nums("/", a, b)
    if not y:
        raise FilterEvaluationError("division by zero")
    if ints:
        q = abs(x) // abs(y)
        return _wrap(-q if (x < 0) != (y < 0) else q)
    return x / y


def _mod(a: object, b: object) -> object:
    ints, x, y = _nums("%", a, b)
    if not y:
        raise FilterEvaluationError("modulo by zero")
    if ints:
        r = abs(x) % abs(y)
        return -r if x < 0 else r
    return math.fmod(x, y)


ARITH = {"+": _add, "-": _sub, "*": _mul, "/": _div, "%": _mod}
CMP: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def negate_value(v: object) -> object:
    if v is None:
        return None
    k = kind_of(v)
    if k is K_NUM:
        return _wrap(-v) if isinstance(v, int) else -v  # type: ignore[operator]
    if k is K_TD:
        return -v  # type: ignore[operator]
    raise FilterEvaluationError(f"unary '-' cannot be applied to {type_name(v)}")


def plus_value(v: object) -> object:
    if v is None or kind_of(v) in (K_NUM, K_TD):
        return v
    raise FilterEvaluationError(f"unary '+' cannot be applied to {type_name(v)}")


def like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """Raises ValueError for an escape character that ends the pattern."""
    parts: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if escape is not None and ch == escape:
            if i + 1 >= n:
                raise ValueError("the LIKE pattern ends with its escape character")
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if ch == "%":
            parts.append(".*")
        elif ch == "_":
            parts.append(".")
        else:
            parts.append(re.escape(ch))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


@lru_cache(maxsize=512)
def like_regex_cached(pattern: str, escape: str | None) -> re.Pattern[str]:
    return like_regex(pattern, escape)


# The system properties a rule action may set to a string (or a Guid, stored as its string).
_STRING_SYS = frozenset(
    {
        "MessageId",
        "CorrelationId",
        "To",
        "ReplyTo",
        "Label",
        "SessionId",
        "ReplyToSessionId",
        "ContentType",
        "PartitionKey",
        "ViaPartitionKey",
    }
)


def system_value(name: str, v: object) -> object:
    if v is None:
        return None
    k = kind_of(v)
    if name in _STRING_SYS:
        if k is K_STR:
            return v
        if k is K_UUID:
            return str(v)
    elif name == "ScheduledEnqueueTimeUtc":
        if k is K_DT:
            return v
    elif name == "TimeToLive":
        if k is K_TD:
            return v
    elif name == "ForcePersistence":
        if k is K_BOOL:
            return v
    else:  # pragma: no cover - every settable name is handled above
        return v
    raise FilterEvaluationError(f"cannot set sys.{name} to a {type_name(v)} value")
