"""The lexer: an expression's text into tokens (strings, names, numbers, parameters, operators)."""

from __future__ import annotations

import math
import re

from .errors import FilterSyntaxError

_KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE", "EXISTS", "TRUE", "FALSE"}
)
_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TWO_CHAR_OPS = frozenset({"<>", "<=", ">=", "!="})
_ONE_CHAR_OPS = frozenset("=<>+-*/%(),.;")

# token kinds
ID, QID, STR, NUM, PARAM, OP, EOF = "id", "qid", "str", "num", "param", "op", "eof"


class Token:
    __slots__ = ("kind", "value", "pos", "text", "kw")

    def __init__(self, kind: str, value: object, pos: int, text: str):
        self.kind = kind
        self.value = value
        self.pos = pos
        self.text = text
        self.kw = text.upper() if kind == ID and text.upper() in _KEYWORDS else None


def _is_ident_char(ch: str) -> bool:
    return ch == "_" or ch.isalpha() or ch.isdecimal()


def tokenize(src: str) -> list[Token]:
    toks: list[Token] = []
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
            toks.append(Token(STR if ch == "'" else QID, text, start, src[start:i]))
            continue
        if ch.isalpha():
            i += 1
            while i < n and _is_ident_char(src[i]):
                i += 1
            toks.append(Token(ID, src[start:i], start, src[start:i]))
            continue
        if ch == "@":
            i += 1
            while i < n and _is_ident_char(src[i]):
                i += 1
            if i == start + 1:
                raise fail("parameter name expected after '@'", start)
            toks.append(Token(PARAM, src[start:i], start, src[start:i]))
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
            toks.append(Token(NUM, value, start, text))
            continue
        two = src[i : i + 2]
        if two in _TWO_CHAR_OPS:
            toks.append(Token(OP, two, start, two))
            i += 2
            continue
        if ch in _ONE_CHAR_OPS:
            toks.append(Token(OP, ch, start, ch))
            i += 1
            continue
        raise fail(f"unexpected character '{ch}'", start)
    toks.append(Token(EOF, None, n, ""))
    return toks
