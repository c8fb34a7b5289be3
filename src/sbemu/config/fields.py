"""Typed access to a decoded document: every failure names the source and the JSON path."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import NoReturn

from sbemu.config.durations import format_duration_ms, parse_duration_ms
from sbemu.config.jsonc import _json_type
from sbemu.config.model import INT32_MAX, ConfigError


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Reader:
    """Typed access to a JSON document; every failure names the source and the JSON path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> NoReturn:
        raise ConfigError(self.source, path or "(document)", message)

    def fields(self, value: object, path: str, allowed: Sequence[str]) -> dict[str, object]:
        """The members of an object keyed by their canonical names; unknown names are errors."""
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, got {_json_type(value)}")
        for dup in getattr(value, "duplicates", ()):
            self.fail(_child(path, dup), "property is given more than once")
        canonical = {name.casefold(): name for name in allowed}
        result: dict[str, object] = {}
        for key, member in value.items():
            name = canonical.get(str(key).casefold())
            if name is None:
                hint = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                self.fail(
                    _child(path, str(key)),
                    f"unknown property (did you mean {hint[0]!r}?)"
                    if hint
                    else f"unknown property; allowed here: {', '.join(allowed)}",
                )
            if name in result:
                self.fail(_child(path, name), f"property is given more than once (as {key!r})")
            result[name] = member
        return result

    def required(self, fields: dict[str, object], path: str, name: str) -> object:
        if name not in fields:
            self.fail(_child(path, name), "required property is missing")
        return fields[name]

    def array(self, value: object, path: str) -> list[object]:
        if not isinstance(value, list):
            self.fail(path, f"expected an array, got {_json_type(value)}")
        return value

    def string(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {_json_type(value)}")
        return value

    def boolean(self, value: object, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_json_type(value)}")
        return value

    def integer(self, value: object, path: str, low: int, high: int = INT32_MAX) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {_json_type(value)}")
        if not low <= value <= high:
            bound = f"at least {low}" if high == INT32_MAX else f"between {low} and {high}"
            self.fail(path, f"{value} is out of range: must be {bound}")
        return value

    def duration(self, value: object, path: str, low_ms: int, high_ms: int) -> int:
        text = self.string(value, path)
        try:
            ms = parse_duration_ms(text)
        except ValueError as exc:
            self.fail(path, str(exc))
        if not low_ms <= ms <= high_ms:
            self.fail(
                path,
                f"{text} is out of range: must be between "
                f"{format_duration_ms(low_ms)} and {format_duration_ms(high_ms)}",
            )
        return ms

    def name(
        self, value: object, path: str, pattern: re.Pattern[str], max_len: int, rule: str
    ) -> str:
        text = self.string(value, path)
        if not 1 <= len(text) <= max_len or not pattern.match(text):
            self.fail(path, f"invalid name {text!r}: {rule}")
        return text
