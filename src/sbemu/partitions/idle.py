"""AutoDeleteOnIdle: a queue or topic with no sends, receives or management access for its
window is deleted with its data [Azure: AutoDeleteOnIdle, minimum 5 minutes; shorter windows
only through the emulator's SbemuTestAutoDeleteOnIdle extension, see config.py].

Activity is noted cheaply where it happens (`Entity.touched`: a send, a link attach or
management request, a settlement, a receiver being served) and turned into a time here, on the
server's timer; an open receiver counts as activity, as it keeps receiving.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .router import Entity


class IdleTracker:
    """When each entity with an AutoDeleteOnIdle window was last active."""

    def __init__(self) -> None:
        self._last: dict[Entity, int] = {}

    def due(self, entities: list[Entity], now_ms: int) -> list[Entity]:
        """The entities idle for at least their window now."""
        out: list[Entity] = []
        for entity in entities:
            window = entity.settings.auto_delete_on_idle_ms
            if window is None:
                self._last.pop(entity, None)
                continue
            busy = entity.touched or any(
                v.consumers or v.session_waiters for v in entity.views.values()
            )
            entity.touched = False
            if busy or entity not in self._last:
                self._last[entity] = now_ms
                continue
            if now_ms - self._last[entity] >= window:
                out.append(entity)
        return out

    def forget(self, entity: Entity) -> None:
        """The entity was deleted."""
        self._last.pop(entity, None)
