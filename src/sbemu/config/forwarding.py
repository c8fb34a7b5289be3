"""Auto-forwarding destinations: the one rule for the configuration file and the admin API.

Azure takes any queue or topic of the namespace as the destination of a queue's or
subscription's ForwardTo and ForwardDeadLetteredMessagesTo: the entity itself and cycles
included, and chains of any length. It refuses only a destination that does not exist ("The
destination entity must exist at the time the source entity is created" [Azure: Chaining
Service Bus entities with autoforwarding]). A message that goes round a loop or along a long
chain stops after 4 hops, in the source's transfer dead-letter queue with the reason
MaxTransferHopCountExceeded (sbemu.partitions.forwarding). `missing_forward_targets` is that
rule: Config.json's reader (sbemu.config.reader) reports what it finds with the JSON path, the
admin API (sbemu.admin.management) with Azure's status and message.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from sbemu.config.model import QueueConfig, SubscriptionConfig, TopicConfig

FORWARD_KEYS = ("ForwardTo", "ForwardDeadLetteredMessagesTo")


@dataclass(frozen=True)
class MissingForwardTarget:
    """A forwarding setting that names no queue or topic of the namespace."""

    owner: str  # the queue ('q') or subscription ('t/Subscriptions/s') it is set on
    key: str  # ForwardTo or ForwardDeadLetteredMessagesTo
    target: str  # as written

    def __str__(self) -> str:
        return (
            f"The auto-forwarding destination '{self.target}' ({self.key} of '{self.owner}') "
            "does not exist"
        )


def forward_owners(
    cfg: QueueConfig | TopicConfig,
) -> list[tuple[str, QueueConfig | SubscriptionConfig]]:
    """(label, settings) of what forwards in a queue (itself) or a topic (its subscriptions)."""
    if isinstance(cfg, QueueConfig):
        return [(cfg.name, cfg)]
    return [(f"{cfg.name}/Subscriptions/{s.name}", s) for s in cfg.subscriptions]


def missing_forward_targets(
    configs: Iterable[QueueConfig | TopicConfig], names: Collection[str] | None = None
) -> list[MissingForwardTarget]:
    """Every ForwardTo / ForwardDeadLetteredMessagesTo of `configs` that names none of `names`
    (the namespace's queue and topic names; default: those of `configs`), in order. Loops,
    the entity itself and long chains are not problems (see the module comment)."""
    configs = list(configs)
    known = {n.casefold() for n in (names if names is not None else [c.name for c in configs])}
    found = []
    for cfg in configs:
        for label, owner in forward_owners(cfg):
            targets = (owner.forward_to, owner.forward_dead_lettered_messages_to)
            for key, target in zip(FORWARD_KEYS, targets, strict=True):
                if target is not None and target.casefold() not in known:
                    found.append(MissingForwardTarget(label, key, target))
    return found
