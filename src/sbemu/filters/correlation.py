"""Correlation filters: equality on a fixed set of system properties and on user properties.

From "Topic filters and actions" (Microsoft Learn): "A match exists when an arriving message's
value for a property is equal to the value specified in the correlation filter. For string
expressions, the comparison is case-sensitive. If you specify multiple match properties, the
filter combines them as a logical AND condition". The filter-examples page states the
equivalence ``Label='Important', ReplyTo='x', Properties['color']='Red'`` ==
``sys.ReplyTo = 'x' AND sys.Label = 'Important' AND color = 'Red'``, so:

* system fields compare with the SQL ``=`` semantics (case-sensitive strings, int/float
  promotion, different kinds never equal);
* user property names are looked up like SQL property names (exact key, then
  case-insensitively); values compare with SQL ``=``; an absent property never matches, except
  that a ``None`` filter value matches a property that is absent or None;
* a filter with no condition at all matches every message (``MessageView`` is only read).
"""

from __future__ import annotations

from collections.abc import Mapping

from .sql.message import MessageView, user_key
from .sql.values import equal

__all__ = ["CorrelationFilter", "CORRELATION_FIELDS"]

# keyword argument -> canonical system property name
CORRELATION_FIELDS: dict[str, str] = {
    "correlation_id": "CorrelationId",
    "message_id": "MessageId",
    "to": "To",
    "reply_to": "ReplyTo",
    "label": "Label",
    "session_id": "SessionId",
    "reply_to_session_id": "ReplyToSessionId",
    "content_type": "ContentType",
}


class CorrelationFilter:
    __slots__ = ("_system", "_properties")

    def __init__(
        self,
        *,
        correlation_id: object = None,
        message_id: object = None,
        to: object = None,
        reply_to: object = None,
        label: object = None,
        session_id: object = None,
        reply_to_session_id: object = None,
        content_type: object = None,
        properties: Mapping[str, object] | None = None,
    ):
        given = {
            "CorrelationId": correlation_id,
            "MessageId": message_id,
            "To": to,
            "ReplyTo": reply_to,
            "Label": label,
            "SessionId": session_id,
            "ReplyToSessionId": reply_to_session_id,
            "ContentType": content_type,
        }
        self._system: tuple[tuple[str, object], ...] = tuple(
            (k, v) for k, v in given.items() if v is not None
        )
        self._properties: tuple[tuple[str, object], ...] = tuple((properties or {}).items())

    @property
    def system(self) -> dict[str, object]:
        """The system conditions given, by canonical name."""
        return dict(self._system)

    @property
    def properties(self) -> dict[str, object]:
        """The user property conditions."""
        return dict(self._properties)

    def matches(self, msg: MessageView) -> bool:
        system = msg.system
        for key, wanted in self._system:
            value = system.get(key)
            if value is None or not equal(value, wanted):
                return False
        if self._properties:
            user = msg.user
            for name, wanted in self._properties:
                found = name if name in user else user_key(user, name)
                value = None if found is None else user[found]
                if wanted is None:
                    if value is not None:
                        return False
                elif value is None or not equal(value, wanted):
                    return False
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CorrelationFilter):
            return NotImplemented
        return self.system == other.system and self.properties == other.properties

    def __hash__(self) -> int:
        return hash(("correlation", self._system))

    def __repr__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self._system]
        if self._properties:
            parts.append(f"properties={dict(self._properties)!r}")
        return f"CorrelationFilter({', '.join(parts)})"
