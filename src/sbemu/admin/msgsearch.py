"""The explorer's search: by message id, or by an application property (``name`` or
``name=value``), over messages as the explorer describes them (admin/explorer.describe).

Matching is on what a person reads in the explorer: the message id as text (a substring,
case-insensitive, so part of a GUID finds it) and a property's value as text (exact,
case-sensitive; ``name`` alone: the property is set). Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentError

__all__ = ["MAX_SEARCH_TEXT", "MessageSearch"]

MAX_SEARCH_TEXT = 512  # characters of a search term


@dataclass(frozen=True)
class MessageSearch:
    message_id: str | None = None  # substring of the message id (case-insensitive)
    property_name: str | None = None  # an application property that must be set ...
    property_value: str | None = None  # ... to this text (None: to anything)

    @classmethod
    def parse(cls, message_id: str | None, prop: str | None) -> MessageSearch | None:
        """From the explorer's query parameters; None when both are empty. ``prop`` is
        ``name`` or ``name=value``; raises ArgumentError for an unusable term."""
        message_id = (message_id or "").strip() or None
        prop = (prop or "").strip() or None
        for term in (message_id, prop):
            if term is not None and len(term) > MAX_SEARCH_TEXT:
                raise ArgumentError(f"a search term is at most {MAX_SEARCH_TEXT} characters.")
        if message_id is None and prop is None:
            return None
        name = value = None
        if prop is not None:
            name, sep, rest = prop.partition("=")
            name = name.strip()
            if not name:
                raise ArgumentError("property search: use name or name=value.")
            value = rest.strip() if sep else None
        return cls(message_id.lower() if message_id else None, name, value)

    def id_matches(self, message_id: Any) -> bool:
        """Whether a message id (as described) matches the id term (True without one)."""
        if self.message_id is None:
            return True
        return message_id is not None and self.message_id in _text(message_id).lower()

    def matches(self, message: dict[str, Any]) -> bool:
        """Whether a described message matches every given term."""
        if not self.id_matches(message.get("message_id")):
            return False
        if self.property_name is not None:
            props = message.get("application_properties") or {}
            if self.property_name not in props:
                return False
            if self.property_value is not None:
                return _text(props[self.property_name]) == self.property_value
        return True


def _text(value: Any) -> str:
    """A described value as the explorer shows it (strings as they are, the rest as JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)
