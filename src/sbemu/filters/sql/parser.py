"""The parser: tokens into compiled nodes, by recursive descent.

The grammar is the package's (``sbemu.filters.sql``); each method below is one of its rules,
loosest first: ``or_``, ``and_``, ``not_``, ``comparison`` (and IS / IN / LIKE / EXISTS),
``additive``, ``multiplicative``, ``unary``, ``primary``; ``statements`` parses a rule action.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .errors import FilterSyntaxError
from .evaluator import (
    NOT_CONST,
    Node,
    boolean_node,
    build_and,
    build_arith,
    build_cmp,
    build_in,
    build_is_null,
    build_like,
    build_not,
    build_or,
    build_sign,
    const_node,
    exists_node,
    newid_node,
    property_call_node,
    remove_statement,
    set_statement,
    sys_prop_node,
    user_prop_node,
)
from .lexer import EOF, ID, NUM, OP, PARAM, QID, STR, Token, tokenize
from .message import SYSTEM_PROPERTIES, MessageView
from .values import CMP, INT64_MAX, INT64_MIN

# Bounds that keep parsing and evaluation off Python's recursion limit (an expression beyond them
# is a FilterSyntaxError, a 400 from the admin API, never a RecursionError): parentheses, NOT and
# unary signs nest at most MAX_NESTING levels; the compiled tree is at most MAX_EXPRESSION_DEPTH
# operations deep (a chain `a=1 OR a=2 OR ...` counts one level per operator; use IN).
MAX_NESTING = 32
MAX_EXPRESSION_DEPTH = 200


class Parser:
    def __init__(self, src: str, parameters: Mapping[str, object] | None):
        if not isinstance(src, str):
            raise TypeError(f"expression must be a string, not {type(src).__name__}")
        self.src = src
        self.toks = tokenize(src)
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

    def deep(self, node: Node, *operands: Node | None) -> Node:
        """``node`` over ``operands``: its tree depth, refused beyond MAX_EXPRESSION_DEPTH
        (evaluating a deeper tree would overflow the stack)."""
        if node.const is not NOT_CONST:  # folded into a constant: nothing below it is evaluated
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

    def peek(self, ahead: int = 0) -> Token:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def next(self) -> Token:
        tok = self.toks[self.i]
        if tok.kind != EOF:
            self.i += 1
        return tok

    def at_op(self, *ops: str) -> bool:
        t = self.toks[self.i]
        return t.kind == OP and t.value in ops

    def at_kw(self, kw: str) -> bool:
        return self.toks[self.i].kw == kw

    def at_word(self, word: str) -> bool:
        t = self.toks[self.i]
        return t.kind == ID and t.text.upper() == word

    def expect_op(self, op: str) -> Token:
        if not self.at_op(op):
            t = self.peek()
            raise self.fail(
                f"expected '{op}'" + ("" if t.kind != EOF else " before end of expression")
            )
        return self.next()

    def expect_end(self) -> None:
        t = self.peek()
        if t.kind != EOF:
            raise self.fail(f"unexpected {'keyword' if t.kw else 'token'} '{t.text}'")

    def as_pred(self, e: Node) -> Node:
        if e.pred:
            return e
        if e.const is not NOT_CONST:
            if e.const is None or isinstance(e.const, bool):
                return const_node(e.const, e.pos, pred=True)
            raise self.fail("a condition is expected here, not a constant", e.pos)
        return boolean_node(e)

    # -- grammar -----------------------------------------------------------------------------

    def predicate(self) -> Node:
        if self.peek().kind == EOF:
            raise self.fail("empty expression")
        return self.as_pred(self.or_())

    def or_(self) -> Node:
        self.enter()
        left = self.and_()
        while self.at_kw("OR"):
            t = self.next()
            right = self.and_()
            left = self.deep(build_or(self.as_pred(left), self.as_pred(right), t.pos), left, right)
        self.nesting -= 1
        return left

    def and_(self) -> Node:
        left = self.not_()
        while self.at_kw("AND"):
            t = self.next()
            right = self.not_()
            left = self.deep(build_and(self.as_pred(left), self.as_pred(right), t.pos), left, right)
        return left

    def not_(self) -> Node:
        if self.at_kw("NOT"):
            t = self.next()
            self.enter()
            inner = self.not_()
            self.nesting -= 1
            return self.deep(build_not(self.as_pred(inner), t.pos), inner)
        return self.comparison()

    def comparison(self) -> Node:
        if self.at_kw("EXISTS"):
            t = self.next()
            self.expect_op("(")
            prop = self.property_ref("EXISTS")
            self.expect_op(")")
            return exists_node(prop, t.pos)
        left = self.additive()
        t = self.peek()
        if t.kind == OP and t.value in CMP:
            self.next()
            right = self.additive()
            return self.deep(build_cmp(t.value, left, right, t.pos), left, right)
        if t.kw == "IS":
            self.next()
            negate = self.at_kw("NOT")
            if negate:
                self.next()
            if not self.at_kw("NULL"):
                raise self.fail("expected NULL")
            self.next()
            return self.deep(build_is_null(left, negate, t.pos), left)
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
            return self.deep(build_in(left, items, negate, t.pos), left, *items)
        if t.kw == "LIKE":
            self.next()
            pattern = self.additive()
            escape = None
            if self.at_kw("ESCAPE"):
                self.next()
                escape = self.additive()
            node = build_like(left, pattern, escape, negate, t.pos, self.fail)
            return self.deep(node, left, pattern, escape)
        return left

    def additive(self) -> Node:
        return self.arithmetic(self.multiplicative, ("+", "-"))

    def multiplicative(self) -> Node:
        return self.arithmetic(self.unary, ("*", "/", "%"))

    def arithmetic(self, operand: Callable[[], Node], ops: tuple[str, ...]) -> Node:
        """``operand (op operand)*``, left-associative, for one precedence level of ``ops``."""
        left = operand()
        while self.at_op(*ops):
            t = self.next()
            right = operand()
            node = build_arith(t.value, left, right, t.pos)  # type: ignore[arg-type]
            left = self.deep(node, left, right)
        return left

    def unary(self) -> Node:
        if self.at_op("-", "+"):
            t = self.next()
            nxt = self.peek()
            if t.value == "-" and nxt.kind == NUM:
                self.next()
                value = -nxt.value  # type: ignore[operator]
                if isinstance(value, int) and value < INT64_MIN:
                    raise self.fail("integer constant out of the Int64 range", nxt.pos)
                return const_node(value, t.pos)
            self.enter()
            operand = self.unary()
            self.nesting -= 1
            return self.deep(build_sign(t.value, operand, t.pos), operand)  # type: ignore[arg-type]
        return self.primary()

    def primary(self) -> Node:
        t = self.next()
        if t.kind == NUM:
            if isinstance(t.value, int) and t.value > INT64_MAX:
                raise self.fail("integer constant out of the Int64 range", t.pos)
            return const_node(t.value, t.pos)
        if t.kind == STR:
            return const_node(t.value, t.pos)
        if t.kind == PARAM:
            key = t.text.casefold()
            if key not in self.params:
                raise self.fail(f"no value was given for parameter '{t.text}'", t.pos)
            return const_node(self.params[key], t.pos)
        if t.kind == OP and t.value == "(":
            e = self.or_()
            self.expect_op(")")
            return e
        if t.kind == QID:
            return user_prop_node(t.value, t.pos)  # type: ignore[arg-type]
        if t.kind == ID:
            if t.kw in ("TRUE", "FALSE"):
                return const_node(t.kw == "TRUE", t.pos)
            if t.kw == "NULL":
                return const_node(None, t.pos)
            if t.kw:
                raise self.fail(f"unexpected keyword '{t.text}'", t.pos)
            if self.at_op("("):
                return self.function(t)
            if self.at_op(".") and t.text.casefold() in ("sys", "user"):
                return self.scoped(t)
            return user_prop_node(t.text, t.pos)
        if t.kind == EOF:
            raise self.fail("unexpected end of expression", t.pos)
        raise self.fail(f"unexpected token '{t.text}'", t.pos)

    def scoped(self, scope_tok: Token) -> Node:
        self.next()  # '.'
        t = self.next()
        if t.kind not in (ID, QID):
            raise self.fail(f"property name expected after '{scope_tok.text}.'", t.pos)
        name = t.value if t.kind == QID else t.text
        if scope_tok.text.casefold() == "sys":
            return sys_prop_node(name, scope_tok.pos)  # type: ignore[arg-type]
        return user_prop_node(name, scope_tok.pos)  # type: ignore[arg-type]

    def function(self, name_tok: Token) -> Node:
        fname = name_tok.text.casefold()
        self.expect_op("(")
        if fname == "newid":
            self.expect_op(")")
            return newid_node(name_tok.pos)
        if fname in ("property", "p"):
            arg = self.or_()
            self.expect_op(")")
            if arg.const is not NOT_CONST:
                n = arg.const
                if n is None:
                    return const_node(None, name_tok.pos)
                if not isinstance(n, str):
                    raise self.fail(f"{name_tok.text}() needs a string name", arg.pos)
            return self.deep(property_call_node(name_tok.text, arg, name_tok.pos), arg)
        raise self.fail(f"unknown function '{name_tok.text}'", name_tok.pos)

    def property_ref(self, what: str) -> tuple[str, str, bool]:
        """A bare property reference (EXISTS, SET, REMOVE): ('user'|'sys', name, known)."""
        t = self.next()
        if t.kind == QID:
            return ("user", t.value, True)  # type: ignore[return-value]
        if t.kind == ID and not t.kw:
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
        if self.peek().kind == EOF:
            raise self.fail("empty action")
        while self.peek().kind != EOF:
            if self.at_word("SET"):
                self.next()
                target_pos = self.peek().pos
                target = self.property_ref("SET")
                self.check_settable(target, target_pos)
                self.expect_op("=")
                value = self.or_()
                stmts.append(set_statement(target, value))
            elif self.at_word("REMOVE"):
                self.next()
                target_pos = self.peek().pos
                target = self.property_ref("REMOVE")
                self.check_settable(target, target_pos)
                stmts.append(remove_statement(target))
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
