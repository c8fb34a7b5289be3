"""What a filter reads: the message view, the system property names and the property lookups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import FilterEvaluationError

MISSING = object()


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


def canonical_system_name(name: str) -> str | None:
    """The canonical name of a system property (case-insensitive, aliases), or None."""
    return _SYS_BY_FOLDED.get(name.casefold())


def user_scan(user: Mapping[str, object], folded: str) -> object:
    for k, v in user.items():
        if isinstance(k, str) and k.casefold() == folded:
            return v
    return None


def user_key(user: Mapping[str, object], name: str) -> str | None:
    """The key under which ``name`` is stored (exact, else case-insensitive), or None."""
    if name in user:
        return name
    folded = name.casefold()
    for k in user:
        if isinstance(k, str) and k.casefold() == folded:
            return k
    return None


def sys_dynamic(system: Mapping[str, object], name: str) -> object:
    canon = _SYS_BY_FOLDED.get(name.casefold())
    if canon is not None:
        return system.get(canon)
    folded = name.casefold()
    for k, v in system.items():
        if isinstance(k, str) and k.casefold() == folded:
            return v
    raise FilterEvaluationError(f"'sys.{name}' is not a system property")


def lookup_by_name(msg: MessageView, name: str) -> object:
    """property(name): ``sys.X`` / ``user.X`` / ``X`` (user)."""
    head, dot, rest = name.partition(".")
    if dot:
        scope = head.casefold()
        if scope == "sys":
            return sys_dynamic(msg.system, rest)
        if scope == "user":
            name = rest
    v = msg.user.get(name, MISSING)
    return user_scan(msg.user, name.casefold()) if v is MISSING else v
