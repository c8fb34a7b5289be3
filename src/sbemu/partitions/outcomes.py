"""What a receiver decides for a locked message, as one value [contract 5.1]: Entity.settle
takes an Outcome and hands it down to the partition that holds the lock (PartitionBroker.settle,
then Receiving.settle), one path for every kind instead of a method per kind at each layer."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OutcomeKind(enum.Enum):
    COMPLETE = "complete"  # the message is deleted
    ABANDON = "abandon"  # unlocked, delivery count + 1 (dead-lettered at MaxDeliveryCount)
    DEFER = "defer"  # set aside, fetched again by sequence number
    DEAD_LETTER = "dead-letter"  # moved to the dead-letter queue with a reason


@dataclass(frozen=True, slots=True)
class Outcome:
    """A settlement: its kind, the application properties to modify (abandon, defer and
    dead-letter; encoded values by name) and, for a dead-lettering, its reason and
    description."""

    kind: OutcomeKind
    overrides: dict[str, bytes] | None = None
    reason: str | None = None
    description: str | None = None

    @classmethod
    def abandon(cls, overrides: dict[str, bytes] | None = None) -> Outcome:
        return cls(OutcomeKind.ABANDON, overrides)

    @classmethod
    def defer(cls, overrides: dict[str, bytes] | None = None) -> Outcome:
        return cls(OutcomeKind.DEFER, overrides)

    @classmethod
    def dead_letter(
        cls,
        reason: str | None = None,
        description: str | None = None,
        overrides: dict[str, bytes] | None = None,
    ) -> Outcome:
        return cls(OutcomeKind.DEAD_LETTER, overrides, reason, description)


COMPLETE = Outcome(OutcomeKind.COMPLETE)  # (one value: a completion carries nothing)
