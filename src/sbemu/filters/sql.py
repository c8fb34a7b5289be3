"""Service Bus SQL filter and SQL rule action language: lexer, parser, compiled evaluator.

Sources (Microsoft Learn, azure-docs repository):

* "Subscription Rule SQL Filter syntax" (``service-bus-messaging-sql-filter``),
* "Subscription Rule SQL Action syntax" (``service-bus-messaging-sql-rule-action``),
* "Set subscription filters" (``service-bus-filter-examples``) and "Messages, payloads, and
  serialization" (``service-bus-messages-payloads``, the list of system properties).

An expression is parsed once into a tree of closures ``fn(msg) -> value``; ``matches`` only calls
the root closure. Constant sub-expressions are folded at compile time, and a LIKE with a constant
pattern compiles its regular expression once.

Grammar (the documented one; extensions are marked +)::

    predicate  := NOT predicate | predicate AND predicate | predicate OR predicate
                | expression {= | <> | != | > | >= | < | <=} expression
                | expression IS [NOT] NULL          (+ any expression, not only a property)
                | expression [NOT] IN (expression [, ...n])
                | expression [NOT] LIKE pattern [ESCAPE escape_char]
                | EXISTS (property)
                | (predicate)
                | expression                        (+ a bare boolean, e.g. a bool property)
    expression := constant | function | property | @parameter
                | expression {+ | - | * | / | %} expression | {+ | -} expression | (expression)
    property   := [sys. | user.] (regular_identifier | [delimited ]] ] | "quoted "" ")
    constant   := 'string''s' | 1894 | 1894.1204 | 101.5E5 | TRUE | FALSE | NULL
    function   := newid() | property(name) | p(name)

    action     := statement [[; | ,] statement ...] [;]
    statement  := SET property = expression | REMOVE property

Precedence, loosest first: OR, AND, NOT, comparison / IS / IN / LIKE, + -, * / %, unary + -.
Keywords, function names, ``sys`` / ``user`` and property names are case-insensitive (a user
property is looked up by its exact name first, then case-insensitively).

Values: None is SQL NULL / "unknown"; bool; int (Int64 semantics: integer literals must fit,
integer arithmetic wraps like unchecked C#); float (System.Double); str; datetime; timedelta;
uuid.UUID (newid()); bytes. A property that does not exist evaluates as NULL.

Semantics (the doc says operators "follow C# implicit conversion semantics whenever possible"):

* Three-valued logic exactly as the doc's AND / OR tables; NOT unknown is unknown. A filter
  matches only when its predicate is TRUE.
* Comparisons: any NULL operand gives unknown. int and float compare numerically. Values of
  incompatible kinds (string vs number, bool vs number, Guid vs string, ...) compare FALSE for
  every operator, ``<>`` included, and raise nothing. Strings compare ordinally (case-sensitive);
  ordering (< <= > >=) is defined for numbers, strings, datetimes (naive ones taken as UTC) and
  timedeltas; for bool, Guid and bytes only = and <> are defined, ordering them is FALSE.
* IN: unknown if the left operand is NULL; otherwise TRUE if it equals (as ``=``) any non-NULL
  list item, else FALSE. NOT IN is NOT of that.
* LIKE: ``%`` any run, ``_`` one character, the optional escape character makes the next
  character literal; case-sensitive; the whole string must match. Any NULL operand gives
  unknown; a non-string left operand gives FALSE; a non-string pattern or an escape that is not
  one character raises FilterEvaluationError (FilterSyntaxError when they are constants).
* Arithmetic: NULL operand gives NULL. int op int stays int (``/`` truncates toward zero and
  ``%`` takes the dividend's sign, as C#); int with float gives float; string + string
  concatenates; datetime - datetime, datetime +- timedelta and timedelta +- timedelta work.
  Anything else (string + number, bool arithmetic, ...) raises FilterEvaluationError, and so does
  a division or modulo by zero, integer or float (C# would give Infinity/NaN for doubles; we
  raise, so that such a filter dead-letters instead of silently matching).
* ``sys.<name>``: the names below, case-insensitively, with ``Subject`` an alias of ``Label``
  (and ``ScheduledEnqueueTime``, ``EnqueuedTime``, ``ExpiresAt``, ``LockedUntil``,
  ``TransactionPartitionKey`` aliases from the newer SDKs). A name that is neither known nor a
  key of ``MessageView.system`` raises FilterEvaluationError when evaluated, as the doc says
  ("An attempt to evaluate a non-existent system property throws a FilterException").
  EXISTS(sys.X) is TRUE when the value is not None, and never raises.
* EXISTS(user property) is TRUE when the key is present, even with a None value;
  ``IS NULL`` is TRUE when the property is absent or None.
* ``property(name)`` / ``p(name)``: ``name`` is any string expression; a ``sys.`` or ``user.``
  prefix selects the scope (default user). ``newid()`` returns a fresh ``uuid.UUID``.
* ``@name`` parameters (the SDKs' ``SqlRuleFilter.Parameters``) are bound from the
  ``parameters`` mapping at compile time (keys with or without the ``@``, case-insensitive).

Rule actions: statements run in order on a copy, so a later one sees an earlier one's result.
``SET`` on a user property keeps the existing key's spelling if one matches case-insensitively
and converts int to float when the existing value is a float (the only implicit numeric
conversion C# makes); ``REMOVE`` deletes it (no-op when absent). ``SET`` / ``REMOVE`` on a
read-only or unknown system property is a FilterSyntaxError at compile time; string system
properties accept str, None or a UUID (stored as its string), time ones datetime/timedelta/None;
REMOVE of a system property sets it to None. Anything else raises FilterEvaluationError.
"""

from __future__ import annotations

import math
import operator
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

__all__ = [
    "FilterEvaluationError",
    "FilterSyntaxError",
    "FalseFilter",
    "MessageView",
    "READONLY_SYSTEM_PROPERTIES",
    "SYSTEM_PROPERTIES",
    "SqlFilter",
    "SqlRuleAction",
    "TrueFilter",
]


# ================================================================================================
# Public types
# ================================================================================================


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


@dataclass
class MessageView:
    """What filters and actions read and modify.

    ``system``: canonical system property names (``SYSTEM_PROPERTIES``, e.g. ``'MessageId'``,
    ``'Label'``) to values, None when absent. ``user``: application properties.
    """

    system: dict[str, object] = field(default_factory=dict)
    user: dict[str, object] = field(default_factory=dict)

    def copy(self) -> MessageView:
        """A copy with its own dicts (values are shared; they are immutable scalars)."""
        return MessageView(system=dict(self.system), user=dict(self.user))


# Canonical system property name -> settable by a rule action?
SYSTEM_PROPERTIES: dict[str, bool] = {
    "MessageId": True,
    "CorrelationId": True,
    "To": True,
    "ReplyTo": True,
    "Label": True,
    "SessionId": True,
    "ReplyToSessionId": True,
    "ContentType": True,
    "PartitionKey": True,
    "ViaPartitionKey": True,
    "ScheduledEnqueueTimeUtc": True,
    "TimeToLive": True,
    "ForcePersistence": True,
    "SequenceNumber": False,
    "EnqueuedTimeUtc": False,
    "EnqueuedSequenceNumber": False,
    "ExpiresAtUtc": False,
    "LockedUntilUtc": False,
    "LockToken": False,
    "DeliveryCount": False,
    "Size": False,
    "State": False,
    "DeadLetterSource": False,
}
READONLY_SYSTEM_PROPERTIES = frozenset(k for k, v in SYSTEM_PROPERTIES.items() if not v)

_SYS_ALIASES = {
    "subject": "Label",
    "scheduledenqueuetime": "ScheduledEnqueueTimeUtc",
    "enqueuedtime": "EnqueuedTimeUtc",
    "expiresat": "ExpiresAtUtc",
    "lockeduntil": "LockedUntilUtc",
    "transactionpartitionkey": "ViaPartitionKey",
}
_SYS_BY_FOLDED: dict[str, str] = {k.casefold(): k for k in SYSTEM_PROPERTIES}
_SYS_BY_FOLDED.update(_SYS_ALIASES)

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


def canonical_system_name(name: str) -> str | None:
    """The canonical name of a system property (case-insensitive, aliases), or None."""
    return _SYS_BY_FOLDED.get(name.casefold())


# ================================================================================================
# Value semantics
# ================================================================================================

_MISSING = object()
_NC = object()  # "not a constant"

_K_NUM, _K_STR, _K_BOOL, _K_DT, _K_TD, _K_UUID, _K_BYTES, _K_OTHER = (
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
    str: _K_STR,
    int: _K_NUM,
    float: _K_NUM,
    bool: _K_BOOL,
    datetime: _K_DT,
    timedelta: _K_TD,
    uuid.UUID: _K_UUID,
    bytes: _K_BYTES,
    bytearray: _K_BYTES,
}
_ORDERED_KINDS = frozenset({_K_NUM, _K_STR, _K_DT, _K_TD})


def _kind(v: object) -> str:
    k = _KIND_BY_CLASS.get(v.__class__)
    if k is not None:
        return k
    if isinstance(v, bool):
        return _K_BOOL
    if isinstance(v, (int, float)):
        return _K_NUM
    if isinstance(v, str):
        return _K_STR
    if isinstance(v, datetime):
        return _K_DT
    if isinstance(v, date):
        return _K_OTHER
    if isinstance(v, timedelta):
        return _K_TD
    if isinstance(v, uuid.UUID):
        return _K_UUID
    if isinstance(v, (bytes, bytearray, memoryview)):
        return _K_BYTES
    return _K_OTHER


def _type_name(v: object) -> str:
    return "null" if v is None else _kind(v) if _kind(v) != _K_OTHER else type(v).__name__


def _utc(v: datetime) -> datetime:
    return v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v


def _compare(op: Callable[[Any, Any], Any], a: Any, b: Any) -> bool:
    """``a op b`` for two non-NULL values; FALSE when their kinds are incompatible."""
    ca = a.__class__
    if ca is b.__class__ and (ca is str or ca is int or ca is float):
        return op(a, b)
    ka = _kind(a)
    if ka is not _kind(b):
        return False
    if ka is _K_DT:
        return op(_utc(a), _utc(b))
    if ka in _ORDERED_KINDS:
        return op(a, b)
    if op is operator.eq:
        return a == b
    if op is operator.ne:
        return a != b
    return False  # no ordering for bool, Guid, binary, other


def _equal(a: object, b: object) -> bool:
    return _compare(operator.eq, a, b)


# Bounds that keep parsing and evaluation off Python's recursion limit (an expression beyond them
# is a FilterSyntaxError, a 400 from the admin API, never a RecursionError): parentheses, NOT and
# unary signs nest at most MAX_NESTING levels; the compiled tree is at most MAX_EXPRESSION_DEPTH
# operations deep (a chain `a=1 OR a=2 OR ...` counts one level per operator; use IN).
MAX_NESTING = 32
MAX_EXPRESSION_DEPTH = 200
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _wrap(i: int) -> int:
    if _INT64_MIN <= i <= _INT64_MAX:
        return i
    return ((i + 2**63) % 2**64) - 2**63


def _arith_error(op: str, a: object, b: object) -> FilterEvaluationError:
    return FilterEvaluationError(
        f"operator '{op}' cannot be applied to {_type_name(a)} and {_type_name(b)}"
    )


def _nums(op: str, a: Any, b: Any) -> tuple[bool, Any, Any]:
    """(both_int, a, b) for two numbers, else raise."""
    if _kind(a) is _K_NUM and _kind(b) is _K_NUM:
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
    ka, kb = _kind(a), _kind(b)
    if ka is _K_STR and kb is _K_STR:
        return str(a) + str(b)
    if (ka is _K_DT and kb is _K_TD) or (ka is _K_TD and kb in (_K_DT, _K_TD)):
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
    ka, kb = _kind(a), _kind(b)
    if ka is _K_DT and kb is _K_DT:
        return _utc(a) - _utc(b)  # type: ignore[arg-type]
    if ka in (_K_DT, _K_TD) and kb is _K_TD:
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


_ARITH = {"+": _add, "-": _sub, "*": _mul, "/": _div, "%": _mod}
_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def _negate(v: object) -> object:
    if v is None:
        return None
    k = _kind(v)
    if k is _K_NUM:
        return _wrap(-v) if isinstance(v, int) else -v  # type: ignore[operator]
    if k is _K_TD:
        return -v  # type: ignore[operator]
    raise FilterEvaluationError(f"unary '-' cannot be applied to {_type_name(v)}")


def _plus(v: object) -> object:
    if v is None or _kind(v) in (_K_NUM, _K_TD):
        return v
    raise FilterEvaluationError(f"unary '+' cannot be applied to {_type_name(v)}")


def _like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
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
def _like_regex_cached(pattern: str, escape: str | None) -> re.Pattern[str]:
    return _like_regex(pattern, escape)


# ================================================================================================
# Property access
# ================================================================================================


def _user_scan(user: Mapping[str, object], folded: str) -> object:
    for k, v in user.items():
        if isinstance(k, str) and k.casefold() == folded:
            return v
    return None


def _user_key(user: Mapping[str, object], name: str) -> str | None:
    """The key under which ``name`` is stored (exact, else case-insensitive), or None."""
    if name in user:
        return name
    folded = name.casefold()
    for k in user:
        if isinstance(k, str) and k.casefold() == folded:
            return k
    return None


def _sys_dynamic(system: Mapping[str, object], name: str) -> object:
    canon = _SYS_BY_FOLDED.get(name.casefold())
    if canon is not None:
        return system.get(canon)
    folded = name.casefold()
    for k, v in system.items():
        if isinstance(k, str) and k.casefold() == folded:
            return v
    raise FilterEvaluationError(f"'sys.{name}' is not a system property")


def _lookup_by_name(msg: MessageView, name: str) -> object:
    """property(name): ``sys.X`` / ``user.X`` / ``X`` (user)."""
    head, dot, rest = name.partition(".")
    if dot:
        scope = head.casefold()
        if scope == "sys":
            return _sys_dynamic(msg.system, rest)
        if scope == "user":
            name = rest
    v = msg.user.get(name, _MISSING)
    return _user_scan(msg.user, name.casefold()) if v is _MISSING else v


# ================================================================================================
# Lexer
# ================================================================================================

_KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE", "EXISTS", "TRUE", "FALSE"}
)
_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TWO_CHAR_OPS = frozenset({"<>", "<=", ">=", "!="})
_ONE_CHAR_OPS = frozenset("=<>+-*/%(),.;")

# token kinds
_ID, _QID, _STR, _NUM, _PARAM, _OP, _EOF = "id", "qid", "str", "num", "param", "op", "eof"


class _Tok:
    __slots__ = ("kind", "value", "pos", "text", "kw")

    def __init__(self, kind: str, value: object, pos: int, text: str):
        self.kind = kind
        self.value = value
        self.pos = pos
        self.text = text
        self.kw = text.upper() if kind == _ID and text.upper() in _KEYWORDS else None


def _is_ident_char(ch: str) -> bool:
    return ch == "_" or ch.isalpha() or ch.isdecimal()


def _tokenize(src: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(src)

    def fail(reason: str, pos: int) -> FilterSyntaxError:
        return FilterSyntaxError(reason, pos, src[pos : pos + 20], src)

    while i < n:
        ch = src[i]
        if ch.isspace():
            i += 1
            continue
        start = i
        if ch == "'" or ch == '"' or ch == "[":
            close = "]" if ch == "[" else ch
            buf: list[str] = []
            i += 1
            while True:
                j = src.find(close, i)
                if j < 0:
                    what = {"'": "string", '"': "quoted identifier", "[": "delimited identifier"}
                    raise fail(f"unterminated {what[ch]}", start)
                buf.append(src[i:j])
                if j + 1 < n and src[j + 1] == close:
                    buf.append(close)
                    i = j + 2
                    continue
                i = j + 1
                break
            text = "".join(buf)
            if ch != "'" and not text:
                raise fail("empty identifier", start)
            toks.append(_Tok(_STR if ch == "'" else _QID, text, start, src[start:i]))
            continue
        if ch.isalpha():
            i += 1
            while i < n and _is_ident_char(src[i]):
                i += 1
            toks.append(_Tok(_ID, src[start:i], start, src[start:i]))
            continue
        if ch == "@":
            i += 1
            while i < n and _is_ident_char(src[i]):
                i += 1
            if i == start + 1:
                raise fail("parameter name expected after '@'", start)
            toks.append(_Tok(_PARAM, src[start:i], start, src[start:i]))
            continue
        m = _NUMBER.match(src, i) if (ch.isdigit() and ch.isascii()) or ch == "." else None
        if m and m.end() > i and not (ch == "." and m.group() == "."):
            text = m.group()
            i = m.end()
            if i < n and (_is_ident_char(src[i]) or src[i] == "."):
                raise fail(f"invalid number '{src[start : i + 1]}'", start)
            if "." in text or "e" in text or "E" in text:
                value: object = float(text)
                if math.isinf(value):  # type: ignore[arg-type]
                    raise fail("numeric constant out of range", start)
            else:
                value = int(text)
            toks.append(_Tok(_NUM, value, start, text))
            continue
        two = src[i : i + 2]
        if two in _TWO_CHAR_OPS:
            toks.append(_Tok(_OP, two, start, two))
            i += 2
            continue
        if ch in _ONE_CHAR_OPS:
            toks.append(_Tok(_OP, ch, start, ch))
            i += 1
            continue
        raise fail(f"unexpected character '{ch}'", start)
    toks.append(_Tok(_EOF, None, n, ""))
    return toks


# ================================================================================================
# Compiled nodes
# ================================================================================================

Fn = Callable[[MessageView], object]


class _E:
    """A compiled (sub-)expression: closure, whether it is a predicate, constant value, origin."""

    __slots__ = ("fn", "pred", "const", "pos", "prop", "depth")

    def __init__(
        self,
        fn: Fn,
        pos: int,
        *,
        pred: bool = False,
        const: object = _NC,
        prop: tuple[str, str, bool] | None = None,
    ):
        self.fn = fn
        self.pred = pred
        self.const = const
        self.pos = pos
        self.prop = prop  # ('user', name, _) or ('sys', name, known)
        self.depth = 1  # levels of the expression tree below and including this node


def _const(value: object, pos: int, pred: bool = False) -> _E:
    def f(m: MessageView) -> object:
        return value

    return _E(f, pos, pred=pred, const=value)


def _folded(fn: Fn, pos: int, operands: tuple[_E, ...], pred: bool = False) -> _E:
    """Fold ``fn`` when every operand is constant and evaluating it does not raise."""
    if all(o.const is not _NC for o in operands):
        try:
            value = fn(None)  # type: ignore[arg-type]
        except FilterEvaluationError:
            return _E(fn, pos, pred=pred)
        return _const(value, pos, pred)
    return _E(fn, pos, pred=pred)


def _user_prop(name: str, pos: int) -> _E:
    folded = name.casefold()

    def f(m: MessageView) -> object:
        u = m.user
        v = u.get(name, _MISSING)
        if v is _MISSING:
            return _user_scan(u, folded)
        return v

    return _E(f, pos, prop=("user", name, True))


def _sys_prop(name: str, pos: int) -> _E:
    canon = canonical_system_name(name)
    if canon is not None:

        def f(m: MessageView) -> object:
            return m.system.get(canon)

        return _E(f, pos, prop=("sys", canon, True))

    def g(m: MessageView) -> object:
        return _sys_dynamic(m.system, name)

    return _E(g, pos, prop=("sys", name, False))


def _exists(prop: tuple[str, str, bool], pos: int) -> _E:
    scope, name, known = prop
    if scope == "user":

        def f(m: MessageView) -> object:
            return _user_key(m.user, name) is not None

    elif known:

        def f(m: MessageView) -> object:
            return m.system.get(name) is not None

    else:
        folded = name.casefold()

        def f(m: MessageView) -> object:
            for k, v in m.system.items():
                if isinstance(k, str) and k.casefold() == folded:
                    return v is not None
            return False

    return _E(f, pos, pred=True)


def _build_cmp(op_text: str, left: _E, right: _E, pos: int) -> _E:
    op = _CMP[op_text]
    lf, rf = left.fn, right.fn
    c = right.const
    if c is not _NC and c is not None and c.__class__ in (str, int, float):
        cc = c.__class__

        def fast(m: MessageView) -> object:
            v = lf(m)
            if v.__class__ is cc:
                return op(v, c)
            if v is None:
                return None
            return _compare(op, v, c)

        return _folded(fast, pos, (left, right), pred=True)

    def f(m: MessageView) -> object:
        a = lf(m)
        b = rf(m)
        if a is None or b is None:
            return None
        return _compare(op, a, b)

    return _folded(f, pos, (left, right), pred=True)


def _build_arith(op_text: str, left: _E, right: _E, pos: int) -> _E:
    impl = _ARITH[op_text]
    lf, rf = left.fn, right.fn

    def f(m: MessageView) -> object:
        a = lf(m)
        b = rf(m)
        if a is None or b is None:
            return None
        return impl(a, b)

    return _folded(f, pos, (left, right))


def _build_and(left: _E, right: _E, pos: int) -> _E:
    lf, rf = left.fn, right.fn

    def f(m: MessageView) -> object:
        a = lf(m)
        if a is False:
            return False
        b = rf(m)
        if b is False:
            return False
        if a is None or b is None:
            return None
        return True

    return _folded(f, pos, (left, right), pred=True)


def _build_or(left: _E, right: _E, pos: int) -> _E:
    lf, rf = left.fn, right.fn

    def f(m: MessageView) -> object:
        a = lf(m)
        if a is True:
            return True
        b = rf(m)
        if b is True:
            return True
        if a is None or b is None:
            return None
        return False

    return _folded(f, pos, (left, right), pred=True)


def _build_not(operand: _E, pos: int) -> _E:
    of = operand.fn

    def f(m: MessageView) -> object:
        v = of(m)
        return None if v is None else not v

    return _folded(f, pos, (operand,), pred=True)


def _build_in(left: _E, items: list[_E], negate: bool, pos: int) -> _E:
    lf = left.fn
    if all(it.const is not _NC for it in items):
        consts = tuple(it.const for it in items if it.const is not None)
        strs = frozenset(c for c in consts if c.__class__ is str)
        others = tuple(c for c in consts if c.__class__ is not str)

        def f(m: MessageView) -> object:
            v = lf(m)
            if v is None:
                return None
            if v.__class__ is str:
                hit = v in strs or any(_equal(v, c) for c in others)
            else:
                hit = any(_equal(v, c) for c in consts)
            return hit is not negate

    else:
        fns = tuple(it.fn for it in items)

        def f(m: MessageView) -> object:
            v = lf(m)
            values = [g(m) for g in fns]
            if v is None:
                return None
            hit = any(x is not None and _equal(v, x) for x in values)
            return hit is not negate

    return _folded(f, pos, (left, *items), pred=True)


def _build_like(
    left: _E, pattern: _E, escape: _E | None, negate: bool, pos: int, fail: Callable
) -> _E:
    lf = left.fn
    pc = pattern.const
    ec = escape.const if escape is not None else None
    if pc is not _NC and (escape is None or ec is not _NC):
        if pc is None or ec is None and escape is not None:

            def unknown(m: MessageView) -> object:
                lf(m)
                return None

            return _E(unknown, pos, pred=True)
        if not isinstance(pc, str):
            raise fail("the LIKE pattern must be a string", pattern.pos)
        if escape is not None and (not isinstance(ec, str) or len(ec) != 1):
            raise fail("the ESCAPE character must be a string of length 1", escape.pos)
        try:
            rx = _like_regex(pc, ec)  # type: ignore[arg-type]
        except ValueError as e:
            raise fail(str(e), pattern.pos) from None
        full = rx.fullmatch

        def f(m: MessageView) -> object:
            v = lf(m)
            if v.__class__ is str:
                return (full(v) is not None) is not negate
            if v is None:
                return None
            if isinstance(v, str):
                return (full(v) is not None) is not negate
            return negate  # incompatible kind: LIKE is FALSE

        return _folded(f, pos, (left,), pred=True)

    pf = pattern.fn
    ef = escape.fn if escape is not None else None

    def g(m: MessageView) -> object:
        v = lf(m)
        p = pf(m)
        e = ef(m) if ef is not None else None
        if v is None or p is None or (ef is not None and e is None):
            return None
        if not isinstance(p, str):
            raise FilterEvaluationError(f"the LIKE pattern must be a string, not {_type_name(p)}")
        if ef is not None and (not isinstance(e, str) or len(e) != 1):
            raise FilterEvaluationError("the ESCAPE character must be a string of length 1")
        if not isinstance(v, str):
            return negate
        try:
            rx = _like_regex_cached(p, e)
        except ValueError as err:
            raise FilterEvaluationError(str(err)) from None
        return (rx.fullmatch(v) is not None) is not negate

    return _folded(g, pos, (left, pattern) + ((escape,) if escape else ()), pred=True)


def _build_is_null(operand: _E, negate: bool, pos: int) -> _E:
    of = operand.fn
    if negate:

        def f(m: MessageView) -> object:
            return of(m) is not None

    else:

        def f(m: MessageView) -> object:
            return of(m) is None

    return _folded(f, pos, (operand,), pred=True)


# ================================================================================================
# Parser
# ================================================================================================


class _Parser:
    def __init__(self, src: str, parameters: Mapping[str, object] | None):
        if not isinstance(src, str):
            raise TypeError(f"expression must be a string, not {type(src).__name__}")
        self.src = src
        self.toks = _tokenize(src)
        self.i = 0
        self.nesting = -1  # parentheses, NOT and unary signs open around the current token
        self.params: dict[str, object] = {}
        for k, v in (parameters or {}).items():
            key = k if k.startswith("@") else "@" + k
            self.params[key.casefold()] = v

    # -- helpers -----------------------------------------------------------------------------

    def fail(self, reason: str, pos: int | None = None) -> FilterSyntaxError:
        if pos is None:
            tok = self.peek()
            return FilterSyntaxError(reason, tok.pos, tok.text, self.src)
        near = next((t.text for t in self.toks if t.pos == pos), self.src[pos : pos + 20])
        return FilterSyntaxError(reason, pos, near, self.src)

    def deep(self, node: _E, *operands: _E | None) -> _E:
        """``node`` over ``operands``: its tree depth, refused beyond MAX_EXPRESSION_DEPTH
        (evaluating a deeper tree would overflow the stack)."""
        if node.const is not _NC:  # folded into a constant: nothing below it is evaluated
            return node
        node.depth = 1 + max((o.depth for o in operands if o is not None), default=0)
        if node.depth > MAX_EXPRESSION_DEPTH:
            raise self.fail(
                f"the expression is too deep (more than {MAX_EXPRESSION_DEPTH} nested operations)",
                node.pos,
            )
        return node

    def enter(self) -> None:
        """One more level of parentheses, NOT or sign; refused beyond MAX_NESTING."""
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise self.fail(f"the expression nests more than {MAX_NESTING} levels deep")

    def peek(self, ahead: int = 0) -> _Tok:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def next(self) -> _Tok:
        tok = self.toks[self.i]
        if tok.kind != _EOF:
            self.i += 1
        return tok

    def at_op(self, *ops: str) -> bool:
        t = self.toks[self.i]
        return t.kind == _OP and t.value in ops

    def at_kw(self, kw: str) -> bool:
        return self.toks[self.i].kw == kw

    def at_word(self, word: str) -> bool:
        t = self.toks[self.i]
        return t.kind == _ID and t.text.upper() == word

    def expect_op(self, op: str) -> _Tok:
        if not self.at_op(op):
            t = self.peek()
            raise self.fail(
                f"expected '{op}'" + ("" if t.kind != _EOF else " before end of expression")
            )
        return self.next()

    def expect_end(self) -> None:
        t = self.peek()
        if t.kind != _EOF:
            raise self.fail(f"unexpected {'keyword' if t.kw else 'token'} '{t.text}'")

    def as_pred(self, e: _E) -> _E:
        if e.pred:
            return e
        if e.const is not _NC:
            if e.const is None or isinstance(e.const, bool):
                return _const(e.const, e.pos, pred=True)
            raise self.fail("a condition is expected here, not a constant", e.pos)
        fn, pos = e.fn, e.pos

        def f(m: MessageView) -> object:
            v = fn(m)
            if v is True or v is False or v is None:
                return v
            raise FilterEvaluationError(
                f"the expression at position {pos} is {_type_name(v)}, not boolean"
            )

        return _E(f, pos, pred=True)

    # -- grammar -----------------------------------------------------------------------------

    def predicate(self) -> _E:
        if self.peek().kind == _EOF:
            raise self.fail("empty expression")
        return self.as_pred(self.or_())

    def or_(self) -> _E:
        self.enter()
        left = self.and_()
        while self.at_kw("OR"):
            t = self.next()
            right = self.and_()
            left = self.deep(_build_or(self.as_pred(left), self.as_pred(right), t.pos), left, right)
        self.nesting -= 1
        return left

    def and_(self) -> _E:
        left = self.not_()
        while self.at_kw("AND"):
            t = self.next()
            right = self.not_()
            left = self.deep(
                _build_and(self.as_pred(left), self.as_pred(right), t.pos), left, right
            )
        return left

    def not_(self) -> _E:
        if self.at_kw("NOT"):
            t = self.next()
            self.enter()
            inner = self.not_()
            self.nesting -= 1
            return self.deep(_build_not(self.as_pred(inner), t.pos), inner)
        return self.comparison()

    def comparison(self) -> _E:
        if self.at_kw("EXISTS"):
            t = self.next()
            self.expect_op("(")
            prop = self.property_ref("EXISTS")
            self.expect_op(")")
            return _exists(prop, t.pos)
        left = self.additive()
        t = self.peek()
        if t.kind == _OP and t.value in _CMP:
            self.next()
            right = self.additive()
            return self.deep(_build_cmp(t.value, left, right, t.pos), left, right)
        if t.kw == "IS":
            self.next()
            negate = self.at_kw("NOT")
            if negate:
                self.next()
            if not self.at_kw("NULL"):
                raise self.fail("expected NULL")
            self.next()
            return self.deep(_build_is_null(left, negate, t.pos), left)
        negate = False
        if t.kw == "NOT":
            if self.peek(1).kw not in ("IN", "LIKE"):
                self.next()
                raise self.fail("expected IN or LIKE after NOT")
            self.next()
            negate = True
            t = self.peek()
        if t.kw == "IN":
            self.next()
            self.expect_op("(")
            if self.at_op(")"):
                raise self.fail("IN needs at least one value")
            items = [self.additive()]
            while self.at_op(","):
                self.next()
                items.append(self.additive())
            self.expect_op(")")
            return self.deep(_build_in(left, items, negate, t.pos), left, *items)
        if t.kw == "LIKE":
            self.next()
            pattern = self.additive()
            escape = None
            if self.at_kw("ESCAPE"):
                self.next()
                escape = self.additive()
            node = _build_like(left, pattern, escape, negate, t.pos, self.fail)
            return self.deep(node, left, pattern, escape)
        return left

    def additive(self) -> _E:
        left = self.multiplicative()
        while self.at_op("+", "-"):
            t = self.next()
            right = self.multiplicative()
            node = _build_arith(t.value, left, right, t.pos)  # type: ignore[arg-type]
            left = self.deep(node, left, right)
        return left

    def multiplicative(self) -> _E:
        left = self.unary()
        while self.at_op("*", "/", "%"):
            t = self.next()
            right = self.unary()
            node = _build_arith(t.value, left, right, t.pos)  # type: ignore[arg-type]
            left = self.deep(node, left, right)
        return left

    def unary(self) -> _E:
        if self.at_op("-", "+"):
            t = self.next()
            nxt = self.peek()
            if t.value == "-" and nxt.kind == _NUM:
                self.next()
                value = -nxt.value  # type: ignore[operator]
                if isinstance(value, int) and value < _INT64_MIN:
                    raise self.fail("integer constant out of the Int64 range", nxt.pos)
                return _const(value, t.pos)
            self.enter()
            operand = self.unary()
            self.nesting -= 1
            fn = operand.fn
            impl = _negate if t.value == "-" else _plus

            def f(m: MessageView) -> object:
                return impl(fn(m))

            return self.deep(_folded(f, t.pos, (operand,)), operand)
        return self.primary()

    def primary(self) -> _E:
        t = self.next()
        if t.kind == _NUM:
            if isinstance(t.value, int) and t.value > _INT64_MAX:
                raise self.fail("integer constant out of the Int64 range", t.pos)
            return _const(t.value, t.pos)
        if t.kind == _STR:
            return _const(t.value, t.pos)
        if t.kind == _PARAM:
            key = t.text.casefold()
            if key not in self.params:
                raise self.fail(f"no value was given for parameter '{t.text}'", t.pos)
            return _const(self.params[key], t.pos)
        if t.kind == _OP and t.value == "(":
            e = self.or_()
            self.expect_op(")")
            return e
        if t.kind == _QID:
            return _user_prop(t.value, t.pos)  # type: ignore[arg-type]
        if t.kind == _ID:
            if t.kw in ("TRUE", "FALSE"):
                return _const(t.kw == "TRUE", t.pos)
            if t.kw == "NULL":
                return _const(None, t.pos)
            if t.kw:
                raise self.fail(f"unexpected keyword '{t.text}'", t.pos)
            if self.at_op("("):
                return self.function(t)
            if self.at_op(".") and t.text.casefold() in ("sys", "user"):
                return self.scoped(t)
            return _user_prop(t.text, t.pos)
        if t.kind == _EOF:
            raise self.fail("unexpected end of expression", t.pos)
        raise self.fail(f"unexpected token '{t.text}'", t.pos)

    def scoped(self, scope_tok: _Tok) -> _E:
        self.next()  # '.'
        t = self.next()
        if t.kind not in (_ID, _QID):
            raise self.fail(f"property name expected after '{scope_tok.text}.'", t.pos)
        name = t.value if t.kind == _QID else t.text
        if scope_tok.text.casefold() == "sys":
            return _sys_prop(name, scope_tok.pos)  # type: ignore[arg-type]
        return _user_prop(name, scope_tok.pos)  # type: ignore[arg-type]

    def function(self, name_tok: _Tok) -> _E:
        fname = name_tok.text.casefold()
        self.expect_op("(")
        if fname == "newid":
            self.expect_op(")")

            def newid(m: MessageView) -> object:
                return uuid.uuid4()

            return _E(newid, name_tok.pos)
        if fname in ("property", "p"):
            arg = self.or_()
            self.expect_op(")")
            if arg.const is not _NC:
                n = arg.const
                if n is None:
                    return _const(None, name_tok.pos)
                if not isinstance(n, str):
                    raise self.fail(f"{name_tok.text}() needs a string name", arg.pos)
                return self.deep(_E(lambda m: _lookup_by_name(m, n), name_tok.pos), arg)
            af = arg.fn

            def prop(m: MessageView) -> object:
                n = af(m)
                if n is None:
                    return None
                if not isinstance(n, str):
                    raise FilterEvaluationError(
                        f"{name_tok.text}() needs a string name, not {_type_name(n)}"
                    )
                return _lookup_by_name(m, n)

            return self.deep(_E(prop, name_tok.pos), arg)
        raise self.fail(f"unknown function '{name_tok.text}'", name_tok.pos)

    def property_ref(self, what: str) -> tuple[str, str, bool]:
        """A bare property reference (EXISTS, SET, REMOVE): ('user'|'sys', name, known)."""
        t = self.next()
        if t.kind == _QID:
            return ("user", t.value, True)  # type: ignore[return-value]
        if t.kind == _ID and not t.kw:
            if self.at_op(".") and t.text.casefold() in ("sys", "user"):
                e = self.scoped(t)
                return e.prop  # type: ignore[return-value]
            if self.at_op("("):
                raise self.fail(f"{what} needs a property, not a function", t.pos)
            return ("user", t.text, True)
        raise self.fail(f"{what} needs a property name", t.pos)

    # -- actions -----------------------------------------------------------------------------

    def statements(self) -> list[Callable[[MessageView], None]]:
        stmts: list[Callable[[MessageView], None]] = []
        if self.peek().kind == _EOF:
            raise self.fail("empty action")
        while self.peek().kind != _EOF:
            if self.at_word("SET"):
                self.next()
                target_pos = self.peek().pos
                target = self.property_ref("SET")
                self.check_settable(target, target_pos)
                self.expect_op("=")
                value = self.or_()
                stmts.append(_set_statement(target, value))
            elif self.at_word("REMOVE"):
                self.next()
                target_pos = self.peek().pos
                target = self.property_ref("REMOVE")
                self.check_settable(target, target_pos)
                stmts.append(_remove_statement(target))
            else:
                t = self.peek()
                raise self.fail(f"expected SET or REMOVE, found '{t.text}'")
            if self.at_op(";", ","):
                self.next()
        return stmts

    def check_settable(self, target: tuple[str, str, bool], pos: int) -> None:
        scope, name, known = target
        if scope != "sys":
            return
        if not known:
            raise self.fail(f"'sys.{name}' is not a system property", pos)
        if not SYSTEM_PROPERTIES[name]:
            raise self.fail(f"system property '{name}' is read-only", pos)


def _set_statement(target: tuple[str, str, bool], value: _E) -> Callable[[MessageView], None]:
    scope, name, _ = target
    vf = value.fn
    if scope == "user":

        def set_user(m: MessageView) -> None:
            v = vf(m)
            key = _user_key(m.user, name)
            if key is None:
                key = name
            elif isinstance(v, int) and not isinstance(v, bool):
                if isinstance(m.user[key], float):
                    v = float(v)  # C#'s implicit long -> double
            m.user[key] = v

        return set_user

    def set_sys(m: MessageView) -> None:
        m.system[name] = _system_value(name, vf(m))

    return set_sys


def _remove_statement(target: tuple[str, str, bool]) -> Callable[[MessageView], None]:
    scope, name, _ = target
    if scope == "user":

        def remove_user(m: MessageView) -> None:
            key = _user_key(m.user, name)
            if key is not None:
                del m.user[key]

        return remove_user

    def remove_sys(m: MessageView) -> None:
        m.system[name] = None

    return remove_sys


def _system_value(name: str, v: object) -> object:
    if v is None:
        return None
    k = _kind(v)
    if name in _STRING_SYS:
        if k is _K_STR:
            return v
        if k is _K_UUID:
            return str(v)
    elif name == "ScheduledEnqueueTimeUtc":
        if k is _K_DT:
            return v
    elif name == "TimeToLive":
        if k is _K_TD:
            return v
    elif name == "ForcePersistence":
        if k is _K_BOOL:
            return v
    else:  # pragma: no cover - every settable name is handled above
        return v
    raise FilterEvaluationError(f"cannot set sys.{name} to a {_type_name(v)} value")


# ================================================================================================
# Filters and actions
# ================================================================================================


def _guarded(exc: Exception, what: str) -> FilterEvaluationError:
    return FilterEvaluationError(f"{what} failed: {type(exc).__name__}: {exc}")


class SqlFilter:
    """A SQL filter, compiled once. ``matches`` is TRUE only when the predicate is TRUE."""

    __slots__ = ("expression", "parameters", "_fn")

    def __init__(self, expression: str, parameters: Mapping[str, object] | None = None):
        parser = _Parser(expression, parameters)
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
        parser = _Parser(expression, parameters)
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
