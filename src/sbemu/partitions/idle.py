"""AutoDeleteOnIdle: a queue, topic or subscription idle for its window is deleted with its
data [Azure: AutoDeleteOnIdle, minimum 5 minutes; shorter windows only through the emulator's
SbemuTestAutoDeleteOnIdle extension, see config/entities.py].

What counts as activity follows Azure's idleness table ("Message expiration", section
Idleness):

* queue: sends, receives, updates, scheduled messages, browse/peek;
* topic: sends, updates, scheduled messages, and any of the above on its subscriptions;
* subscription: receives, updates, rules added, browse/peek. A send to the topic is not
  activity of its subscriptions: a subscription nobody receives from is deleted even while
  its topic is busy (and its messages with it);
* a queue or subscription that auto-forwards (ForwardTo) is never idle: Azure counts the
  forwarding as a receiver that keeps receiving. An open receiver counts the same way.

Activity is noted cheaply where it happens (`Entity.touched` and `Entity.touched_subs`: a
send, a link attach or management request, a settlement, an admin update or rule change) and
turned into a time here, on the server's timer, never per message.

The last-activity times survive a restart: the server saves `snapshot()` at most once every
SAVE_INTERVAL_MS (and once more at a clean stop) and hands the file back to `restore()` at
start, so an entity idle for longer than its window before a restart is deleted at the first
tick after it, as in Azure, where the clock never stops. Idle time runs on while the emulator
is down. After a crash the saved times can be up to SAVE_INTERVAL_MS old (activity after the
last save is unknown), so they are taken as SAVE_INTERVAL_MS later: an entity is deleted at
most that much late, never early.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from ..atomicfile import atomic_write
from .entitystatus import EntitySettings

log = logging.getLogger(__name__)

SAVE_INTERVAL_MS = 5_000  # at most one save of the last-activity times per this many ms
IDLE_FILE = "idle.json"
FORMAT = 1


# ------------------------------------------------------------------ what the tracker reads
# The tracker is below the router (which owns it): it names what it reads of an entity
# (router.Entity) in these Protocols instead of importing the router.
class _Spec(Protocol):
    @property
    def namespace(self) -> str: ...


class _ReceivingView(Protocol):
    @property
    def consumers(self) -> Collection[object]: ...
    @property
    def session_waiters(self) -> Collection[object]: ...


class IdleEntity(Protocol):
    """What the tracker reads of a queue or topic (router.Entity), and its activity flags,
    which it clears."""

    touched: bool

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> _Spec: ...
    @property
    def settings(self) -> EntitySettings: ...
    @property
    def views(self) -> Mapping[str, _ReceivingView]: ...
    @property
    def subscriptions(self) -> object: ...  # None for a queue
    @property
    def touched_subs(self) -> set[str]: ...


E = TypeVar("E", bound=IdleEntity)

# What the tracker follows: a queue or topic (sub-queue None), or one subscription of a topic
# (its sub-queue name, 'subscriptions/<name>').
IdleKey = tuple[E, str | None]
# The same in the saved file: (namespace, entity, subscription sub-queue or None), lower case.
SavedKey = tuple[str, str, "str | None"]


class IdleTracker(Generic[E]):
    """When each queue, topic and subscription with an AutoDeleteOnIdle window was last
    active (epoch ms, from the `now_ms` the server passes in)."""

    def __init__(self) -> None:
        self._last: dict[IdleKey[E], int] = {}
        self._deleting: set[IdleKey[E]] = set()  # reported due; the server's delete runs
        self._restored: dict[SavedKey, int] = {}
        self.changed = False  # since the last snapshot (set again when a save failed)

    # ------------------------------------------------------------ restart
    def restore(self, saved: dict[SavedKey, int], clean: bool) -> None:
        """Last-activity times saved before a restart, for the entities the first `due` call
        sees (the ones loaded at start). `clean`: saved at a clean stop (exact), else up to SAVE_INTERVAL_MS old."""
        slack = 0 if clean else SAVE_INTERVAL_MS
        self._restored = {key: ms + slack for key, ms in saved.items()}

    def snapshot(self, force: bool = False) -> dict[SavedKey, int] | None:
        """The last-activity times to save, or None when nothing changed since the last call
        (`force`: the times in any case)."""
        if not (self.changed or force):
            return None
        self.changed = False
        # before the first tick the restored times are not applied yet: keep them
        times = dict(self._restored)
        times.update((_saved_key(key), ms) for key, ms in self._last.items())
        return times

    # ------------------------------------------------------------ the timer
    def due(self, entities: Iterable[E], now_ms: int) -> list[IdleKey[E]]:
        """The queues, topics and subscriptions idle for at least their window now (each is
        reported once; `failed` makes it count again)."""
        out: list[IdleKey[E]] = []
        live: set[IdleKey[E]] = set()
        for entity in entities:
            if (entity, None) in self._deleting:
                continue  # its subscriptions go with it
            for key, window, busy in _followed(entity):
                if window is None or key in self._deleting:
                    continue
                live.add(key)
                last = self._last.get(key)
                if busy:
                    now_last = now_ms
                elif last is None:  # first seen: since the restart's saved time, or now
                    now_last = min(self._restored.get(_saved_key(key), now_ms), now_ms)
                else:
                    now_last = last
                if now_last != last:
                    self._last[key] = now_last
                    self.changed = True
                if now_ms - now_last >= window:
                    out.append(key)
            entity.touched = False
            entity.touched_subs.clear()
        for key in [k for k in self._last if k not in live and k not in self._deleting]:
            del self._last[key]  # deleted, or its window was removed
            self.changed = True
        topics = {entity for entity, sub in out if sub is None}
        out = [key for key in out if key[1] is None or key[0] not in topics]  # go with it
        self._deleting.update(out)
        self._restored = {}  # every entity of the restart was seen on the first tick
        return out

    def failed(self, key: IdleKey[E], now_ms: int) -> None:
        """The deletion of a due entity was refused (e.g. a partition out of service): it is
        tried again after another window."""
        self._deleting.discard(key)
        self._last[key] = now_ms
        self.changed = True

    def forget(self, entity: E, sub_queue: str | None = None) -> None:
        """A queue or topic (with its subscriptions), or one subscription, was deleted."""
        for key in [k for k in (*self._last, *self._deleting) if k[0] is entity]:
            if sub_queue is None or key[1] == sub_queue:
                self._last.pop(key, None)
                self._deleting.discard(key)
                self.changed = True


def _followed(entity: E) -> list[tuple[IdleKey[E], int | None, bool]]:
    """(key, window, active since the last tick) for an entity and each of its subscriptions."""
    settings = entity.settings
    receiving = {
        queue for queue, view in entity.views.items() if view.consumers or view.session_waiters
    }
    if entity.subscriptions is None:
        busy = entity.touched or bool(receiving) or settings.forward_to is not None
        return [((entity, None), settings.auto_delete_on_idle_ms, busy)]
    out: list[tuple[IdleKey[E], int | None, bool]] = []
    any_sub_busy = False
    for sub, sub_settings in settings.subscriptions.items():
        busy = (
            sub in entity.touched_subs
            or sub_settings.forward_to is not None
            or any(q == sub or q.startswith(sub + "/") for q in receiving)
        )
        any_sub_busy = any_sub_busy or busy
        out.append(((entity, sub), sub_settings.auto_delete_on_idle_ms, busy))
    topic_busy = entity.touched or bool(receiving) or any_sub_busy
    out.insert(0, ((entity, None), settings.auto_delete_on_idle_ms, topic_busy))
    return out


def _saved_key(key: IdleKey[IdleEntity]) -> SavedKey:
    entity, sub = key
    return (entity.spec.namespace.lower(), entity.name.lower(), sub)


# ------------------------------------------------------------------ the file
def save_idle_times(data_dir: Path, times: dict[SavedKey, int], clean: bool) -> None:
    """Write the last-activity times to `<data dir>/idle.json` (atomically)."""
    body: dict[str, Any] = {
        "format": FORMAT,
        "clean": clean,
        "last_active_ms": [
            [ns, name, sub, ms]
            for (ns, name, sub), ms in sorted(
                times.items(), key=lambda item: (item[0][0], item[0][1], item[0][2] or "")
            )
        ],
    }
    atomic_write(Path(data_dir) / IDLE_FILE, json.dumps(body, indent=1).encode())


def load_idle_times(data_dir: Path) -> tuple[dict[SavedKey, int], bool]:
    """The saved last-activity times and whether they were saved at a clean stop; none when
    the file is missing or unreadable (then the idle clocks start at the start-up)."""
    path = Path(data_dir) / IDLE_FILE
    try:
        body = json.loads(path.read_bytes())
        if body.get("format") != FORMAT:
            raise ValueError(f"format {body.get('format')!r}, expected {FORMAT}")
        times = {
            (str(ns), str(name), None if sub is None else str(sub)): int(ms)
            for ns, name, sub, ms in body["last_active_ms"]
        }
        return times, bool(body.get("clean"))
    except FileNotFoundError:
        return {}, True
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s is unreadable (%s): AutoDeleteOnIdle clocks start again now", path, exc)
        return {}, True
