"""Entity status (Active, Disabled, SendDisabled, ReceiveDisabled) and the runtime settings of
an entity that can change while links are open [Azure: suspend and reactivate entities].

Azure's rules, as enforced here:
- no send to a queue or topic that is Disabled or SendDisabled;
- no receive or settlement from a queue or subscription that is Disabled or ReceiveDisabled,
  nor from a subscription of a Disabled topic (a topic's own receive side does not exist);
- an Active topic still copies messages into a disabled subscription, and due scheduled
  messages are still fanned out; management operations (peek, rules, sessions) stay allowed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..errors import EntityDisabled


class EntityStatus(str, enum.Enum):
    """The settable values of an entity's Status."""

    ACTIVE = "Active"
    DISABLED = "Disabled"
    SEND_DISABLED = "SendDisabled"
    RECEIVE_DISABLED = "ReceiveDisabled"

    @property
    def can_send(self) -> bool:
        return self in (EntityStatus.ACTIVE, EntityStatus.RECEIVE_DISABLED)

    @property
    def can_receive(self) -> bool:
        return self in (EntityStatus.ACTIVE, EntityStatus.SEND_DISABLED)


# Which values Azure lets each kind of entity take.
ALLOWED_STATUS = {
    "queue": tuple(EntityStatus),
    "topic": (EntityStatus.ACTIVE, EntityStatus.DISABLED, EntityStatus.SEND_DISABLED),
    "subscription": (EntityStatus.ACTIVE, EntityStatus.DISABLED, EntityStatus.RECEIVE_DISABLED),
}


@dataclass(frozen=True, slots=True)
class ReceiverSettings:
    """The runtime settings of a receivable sub-queue set (a queue or one subscription)."""

    status: EntityStatus = EntityStatus.ACTIVE
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    auto_delete_on_idle_ms: int | None = None  # a subscription's own window (None: never)


@dataclass(frozen=True, slots=True)
class EntitySettings:
    """The runtime settings of a queue or topic; for a topic, one ReceiverSettings per
    subscription, keyed by its sub-queue name ('subscriptions/<name>')."""

    status: EntityStatus = EntityStatus.ACTIVE
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    auto_delete_on_idle_ms: int | None = None
    subscriptions: dict[str, ReceiverSettings] = field(default_factory=dict)


def check_send(kind: str, path: str, status: EntityStatus) -> None:
    """Raise EntityDisabled when a send to this queue or topic is not allowed now."""
    if not status.can_send:
        raise EntityDisabled(
            f"Sending to {kind} '{path}' is disabled: the messaging entity is "
            f"{status.value}. Enable it again (Status Active) to send."
        )


def check_receive(kind: str, path: str, status: EntityStatus, topic: EntityStatus | None) -> None:
    """Raise EntityDisabled when receiving from (or settling on) this queue or subscription is
    not allowed now; `topic` is the status of a subscription's topic."""
    if topic is EntityStatus.DISABLED:
        raise EntityDisabled(f"Receiving from {kind} '{path}' is disabled: its topic is Disabled.")
    if not status.can_receive:
        raise EntityDisabled(
            f"Receiving from {kind} '{path}' is disabled: the messaging entity is "
            f"{status.value}. Enable it again (Status Active) to receive."
        )
