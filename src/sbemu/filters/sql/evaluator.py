"""The evaluator: compiled nodes, each a closure ``fn(msg) -> value``, and the action statements.

Constant sub-expressions are folded when built, and a LIKE with a constant pattern compiles its
regular expression once; evaluating a filter only calls the root closure.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from .errors import FilterEvaluationError
from .message import (
    MISSING,
    MessageView,
    canonical_system_name,
    lookup_by_name,
    sys_dynamic,
    user_key,
    user_scan,
)
from .values import (
    ARITH,
    CMP,
    compare,
    equal,
    like_regex,
    like_regex_cached,
    negate_value,
    plus_value,
    system_value,
    type_name,
)

NOT_CONST = object()  # Node.const of a node that is not a constant

Fn = Callable[[MessageView], object]


class Node:
    """A compiled (sub-)expression: closure, whether it is a predicate, constant value, origin."""

    __slots__ = ("fn", "pred", "const", "pos", "prop", "depth")

    def __init__(
        self,
        fn: Fn,
        pos: int,
        *,
        pred: bool = False,
        const: object = NOT_CONST,
        prop: tuple[str, str, bool] | None = None,
    ):
        self.fn = fn
        self.pred = pred
        self.const = const
        self.pos = pos
        self.prop = prop  # ('user', name, _) or ('sys', name, known)
        self.depth = 1  # levels of the expression tree below and including this node


def const_node(value: object, pos: int, pred: bool = False) -> Node:
    def f(m: MessageView) -> object:
        return value

    return Node(f, pos, pred=pred, const=value)


def folded_node(fn: Fn, pos: int, operands: tuple[Node, ...], pred: bool = False) -> Node:
    """Fold ``fn`` when every operand is constant and evaluating it does not raise."""
    if all(o.const is not NOT_CONST for o in operands):
        try:
            value = fn(None)  # type: ignore[arg-type]
        except FilterEvaluationError:
            return Node(fn, pos, pred=pred)
        return const_node(value, pos, pred)
    return Node(fn, pos, pred=pred)


def user_prop_node(name: str, pos: int) -> Node:
    folded = name.casefold()

    def f(m: MessageView) -> object:
        u = m.user
        v = u.get(name, MISSING)
        if v is MISSING:
            return user_scan(u, folded)
        return v

    return Node(f, pos, prop=("user", name, True))


def sys_prop_node(name: str, pos: int) -> Node:
    canon = canonical_system_name(name)
    if canon is not None:

        def f(m: MessageView) -> object:
            return m.system.get(canon)

        return Node(f, pos, prop=("sys", canon, True))

    def g(m: MessageView) -> object:
        return sys_dynamic(m.system, name)

    return Node(g, pos, prop=("sys", name, False))


def exists_node(prop: tuple[str, str, bool], pos: int) -> Node:
    scope, name, known = prop
    if scope == "user":

        def f(m: MessageView) -> object:
            return user_key(m.user, name) is not None

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

    return Node(f, pos, pred=True)


def boolean_node(e: Node) -> Node:
    """A predicate over a non-constant expression: its value when boolean or NULL, else an error."""
    fn, pos = e.fn, e.pos

    def f(m: MessageView) -> object:
        v = fn(m)
        if v is True or v is False or v is None:
            return v
        raise FilterEvaluationError(
            f"the expression at position {pos} is {type_name(v)}, not boolean"
        )

    return Node(f, pos, pred=True)


def newid_node(pos: int) -> Node:
    """``newid()``: a fresh Guid on every evaluation."""

    def newid(m: MessageView) -> object:
        return uuid.uuid4()

    return Node(newid, pos)


def property_call_node(fname: str, arg: Node, pos: int) -> Node:
    """``property(name)`` / ``p(name)``; ``fname`` is the function's name as written, for the
    error. A constant ``arg`` is a string (the parser refuses any other constant)."""
    n = arg.const
    if n is not NOT_CONST:
        return Node(lambda m: lookup_by_name(m, n), pos)  # type: ignore[arg-type]
    af = arg.fn

    def prop(m: MessageView) -> object:
        n = af(m)
        if n is None:
            return None
        if not isinstance(n, str):
            raise FilterEvaluationError(f"{fname}() needs a string name, not {type_name(n)}")
        return lookup_by_name(m, n)

    return Node(prop, pos)


def build_cmp(op_text: str, left: Node, right: Node, pos: int) -> Node:
    op = CMP[op_text]
    lf, rf = left.fn, right.fn
    c = right.const
    if c is not NOT_CONST and c is not None and c.__class__ in (str, int, float):
        cc = c.__class__

        def fast(m: MessageView) -> object:
            v = lf(m)
            if v.__class__ is cc:
                return op(v, c)
            if v is None:
                return None
            return compare(op, v, c)

        return folded_node(fast, pos, (left, right), pred=True)

    def f(m: MessageView) -> object:
        a = lf(m)
        b = rf(m)
        if a is None or b is None:
            return None
        return compare(op, a, b)

    return folded_node(f, pos, (left, right), pred=True)


def build_arith(op_text: str, left: Node, right: Node, pos: int) -> Node:
    impl = ARITH[op_text]
    lf, rf = left.fn, right.fn

    def f(m: MessageView) -> object:
        a = lf(m)
        b = rf(m)
        if a is None or b is None:
            return None
        return impl(a, b)

    return folded_node(f, pos, (left, right))


def build_sign(sign: str, operand: Node, pos: int) -> Node:
    """Unary ``-`` or ``+``."""
    fn = operand.fn
    impl = negate_value if sign == "-" else plus_value

    def f(m: MessageView) -> object:
        return impl(fn(m))

    return folded_node(f, pos, (operand,))


def build_and(left: Node, right: Node, pos: int) -> Node:
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

    return folded_node(f, pos, (left, right), pred=True)


def build_or(left: Node, right: Node, pos: int) -> Node:
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

    return folded_node(f, pos, (left, right), pred=True)


def build_not(operand: Node, pos: int) -> Node:
    of = operand.fn

    def f(m: MessageView) -> object:
        v = of(m)
        return None if v is None else not v

    return folded_node(f, pos, (operand,), pred=True)


def build_in(left: Node, items: list[Node], negate: bool, pos: int) -> Node:
    lf = left.fn
    if all(it.const is not NOT_CONST for it in items):
        consts = tuple(it.const for it in items if it.const is not None)
        strs = frozenset(c for c in consts if c.__class__ is str)
        others = tuple(c for c in consts if c.__class__ is not str)

        def f(m: MessageView) -> object:
            v = lf(m)
            if v is None:
                return None
            if v.__class__ is str:
                hit = v in strs or any(equal(v, c) for c in others)
            else:
                hit = any(equal(v, c) for c in consts)
            return hit is not negate

    else:
        fns = tuple(it.fn for it in items)

        def f(m: MessageView) -> object:
            v = lf(m)
            values = [g(m) for g in fns]
            if v is None:
                return None
            hit = any(x is not None and equal(v, x) for x in values)
            return hit is not negate

    return folded_node(f, pos, (left, *items), pred=True)


def build_like(
    left: Node, pattern: Node, escape: Node | None, negate: bool, pos: int, fail: Callable
) -> Node:
    lf = left.fn
    pc = pattern.const
    ec = escape.const if escape is not None else None
    if pc is not NOT_CONST and (escape is None or ec is not NOT_CONST):
        if pc is None or ec is None and escape is not None:

            def unknown(m: MessageView) -> object:
                lf(m)
                return None

            return Node(unknown, pos, pred=True)
        if not isinstance(pc, str):
            raise fail("the LIKE pattern must be a string", pattern.pos)
        if escape is not None and (not isinstance(ec, str) or len(ec) != 1):
            raise fail("the ESCAPE character must be a string of length 1", escape.pos)
        try:
            rx = like_regex(pc, ec)  # type: ignore[arg-type]
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

        return folded_node(f, pos, (left,), pred=True)

    pf = pattern.fn
    ef = escape.fn if escape is not None else None

    def g(m: MessageView) -> object:
        v = lf(m)
        p = pf(m)
        e = ef(m) if ef is not None else None
        if v is None or p is None or (ef is not None and e is None):
            return None
        if not isinstance(p, str):
            raise FilterEvaluationError(f"the LIKE pattern must be a string, not {type_name(p)}")
        if ef is not None and (not isinstance(e, str) or len(e) != 1):
            raise FilterEvaluationError("the ESCAPE character must be a string of length 1")
        if not isinstance(v, str):
            return negate
        try:
            rx = like_regex_cached(p, e)
        except ValueError as err:
            raise FilterEvaluationError(str(err)) from None
        return (rx.fullmatch(v) is not None) is not negate

    return folded_node(g, pos, (left, pattern) + ((escape,) if escape else ()), pred=True)


def build_is_null(operand: Node, negate: bool, pos: int) -> Node:
    of = operand.fn
    if negate:

        def f(m: MessageView) -> object:
            return of(m) is not None

    else:

        def f(m: MessageView) -> object:
            return of(m) is None

    return folded_node(f, pos, (operand,), pred=True)


def set_statement(target: tuple[str, str, bool], value: Node) -> Callable[[MessageView], None]:
    scope, name, _ = target
    vf = value.fn
    if scope == "user":

        def set_user(m: MessageView) -> None:
            v = vf(m)
            key = user_key(m.user, name)
            if key is None:
                key = name
            elif isinstance(v, int) and not isinstance(v, bool):
                if isinstance(m.user[key], float):
                    v = float(v)  # C#'s implicit long -> double
            m.user[key] = v

        return set_user

    def set_sys(m: MessageView) -> None:
        m.system[name] = system_value(name, vf(m))

    return set_sys


def remove_statement(target: tuple[str, str, bool]) -> Callable[[MessageView], None]:
    scope, name, _ = target
    if scope == "user":

        def remove_user(m: MessageView) -> None:
            key = user_key(m.user, name)
            if key is not None:
                del m.user[key]

        return remove_user

    def remove_sys(m: MessageView) -> None:
        m.system[name] = None

    return remove_sys
