"""JSON with comments: decode a Config.json that may hold // and /* */ comments and trailing
commas, keeping lines and columns so errors point into the file; duplicate keys are remembered."""

from __future__ import annotations

import json
import re
from typing import NoReturn

from sbemu.config.model import ConfigError


class ReadOnlyDict(dict[str, object]):
    """A dict that refuses changes; unlike MappingProxyType it survives pickle, deepcopy, asdict."""

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("configuration mappings are read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[type, tuple[dict[str, object]]]:
        return (type(self), (dict(self),))


class _JsonObject(dict[str, object]):
    """A decoded JSON object that remembers keys given more than once."""

    duplicates: tuple[str, ...] = ()


def _object_from_pairs(pairs: list[tuple[str, object]]) -> _JsonObject:
    obj = _JsonObject()
    seen = []
    for key, value in pairs:
        if key in obj:
            seen.append(key)
        obj[key] = value
    if seen:
        obj.duplicates = tuple(seen)
    return obj


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _decode_json(text: str, source: str) -> object:
    """Decode JSON that may hold comments and trailing commas; errors carry line and column."""
    try:
        return json.loads(
            _strip_comments(text, source),
            object_pairs_hook=_object_from_pairs,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as exc:
        raise ConfigError(
            source, f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {_json_problem(exc)}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(source, None, f"invalid JSON: {exc}") from None


def _json_problem(exc: json.JSONDecodeError) -> str:
    """json's message as a whole sentence: some of its messages end in "at" and expect the
    position after them ("Unterminated string starting at"), which the location already gives;
    a document that ends before the value does is said to be cut short."""
    msg = exc.msg[:-3] + " here" if exc.msg.endswith(" at") else exc.msg
    if not exc.doc[exc.pos :].strip() or msg.startswith("Unterminated string"):
        msg += " (the file ends before it is complete: is it truncated?)"
    return msg


# A string, a // comment, a /* */ comment, an unterminated /*, or a comma; scanned left to right
# so that comment markers inside strings stay text.
_JSONC_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/|/\*|,', re.DOTALL)
_NOT_NEWLINE = re.compile(r"[^\r\n]")
_NON_SPACE = re.compile(r"\S")


def _strip_comments(text: str, source: str) -> str:
    """Blank out // and /* */ comments and trailing commas, keeping every line and column."""
    pieces: list[str] = []
    commas: list[int] = []
    done = 0
    for token in _JSONC_TOKEN.finditer(text):
        value = token.group()
        if value == ",":
            commas.append(token.start())
        elif value == "/*":
            line = text.count("\n", 0, token.start()) + 1
            col = token.start() - (text.rfind("\n", 0, token.start()) + 1) + 1
            raise ConfigError(
                source, f"line {line} column {col}", "invalid JSON: unterminated /* comment"
            )
        elif value[0] == "/":
            pieces.append(text[done : token.start()])
            pieces.append(_NOT_NEWLINE.sub(" ", value))
            done = token.end()
    if not pieces and not commas:
        return text
    pieces.append(text[done:])
    stripped = "".join(pieces)
    out = list(stripped)
    for pos in commas:
        following = _NON_SPACE.search(stripped, pos + 1)
        after = following.group() if following else ""
        before = pos - 1
        while before >= 0 and stripped[before].isspace():
            before -= 1
        if after in ("}", "]") and before >= 0 and stripped[before] not in "[{,":
            out[pos] = " "  # a trailing comma, as .NET's AllowTrailingCommas accepts
    return "".join(out)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
