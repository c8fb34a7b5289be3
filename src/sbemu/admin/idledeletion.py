"""AutoDeleteOnIdle at run time: deleting what the idle tracker reports, and keeping its clocks.

The tracker (sbemu.partitions.idle.IdleTracker, owned by the router) says which queues, topics
and subscriptions have been idle for their window; here they are deleted as the admin API's
DELETE deletes them (Management.delete_entity / delete_subscription: links detached with
not-found, catalog updated, stores closed after their last commit). A deletion that fails (a
partition out of service) is tried again after another window. The last-activity times are
saved at most every SAVE_INTERVAL_MS on a worker thread, and once more, exactly, at a clean
stop, so the idle clocks survive a restart (see partitions/idle.py). The server's timer calls
`on_timer` with its clock's `now_ms` (a failed deletion is timed by the management plane's,
the same clock).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from pathlib import Path
from typing import Any

from ..errors import EntityNotFound
from ..offloop import OffLoopJob
from ..partitions import SAVE_INTERVAL_MS, Entity, save_idle_times
from .management import Management

log = logging.getLogger("sbemu.server")


class IdleDeletion:
    """Deletes idle entities through the management plane and saves the idle clocks."""

    def __init__(
        self,
        management: Management,
        data_dir: Path,
        loop: asyncio.AbstractEventLoop,
        executor: concurrent.futures.Executor,
    ) -> None:
        self.management = management
        self.tracker = management.router.idle
        self.data_dir = data_dir
        # the saves run on the server's worker threads, one at a time
        self._saves = OffLoopJob(loop, executor, self._save_failed)
        self._saved_ms = 0

    def on_timer(self, now_ms: int) -> None:
        """Delete what came due; save the changed last-activity times when a save is due."""
        for entity, sub_queue in self.management.router.idle_entities(now_ms):
            self._delete(entity, sub_queue)
        if self._saves.running or now_ms - self._saved_ms < SAVE_INTERVAL_MS:
            return
        times = self.tracker.snapshot()
        if times is not None:
            self._saved_ms = now_ms
            self._saves.start(save_idle_times, self.data_dir, times, False)

    def _save_failed(self, error: BaseException) -> None:
        """A save failed: the times are saved again next time."""
        self.tracker.changed = True
        log.warning("cannot save the AutoDeleteOnIdle times: %s", error)

    async def stop(self) -> None:
        """At a clean stop: after a save under way, the exact last-activity times (a restart
        takes them as they are)."""
        await self._saves.wait()
        times = self.tracker.snapshot(force=True)
        assert times is not None
        try:
            save_idle_times(self.data_dir, times, True)
        except OSError as exc:
            log.warning("cannot save the AutoDeleteOnIdle times: %s", exc)

    def _delete(self, entity: Entity, sub_queue: str | None) -> None:
        ns = entity.spec.namespace
        if sub_queue is None:
            window = entity.settings.auto_delete_on_idle_ms
            what = f"{entity.spec.kind} {ns}/{entity.name}"
            job = self.management.delete_entity(ns, entity.name)
        else:
            window = entity.settings.subscriptions[sub_queue].auto_delete_on_idle_ms
            name = sub_queue.split("/", 1)[1]
            desc = self.management.subscription(entity, name) or {"name": name}
            what = f"subscription {ns}/{entity.name}/{desc['name']}"
            job = self.management.delete_subscription(ns, entity.name, name)
        task = asyncio.ensure_future(job)
        task.add_done_callback(functools.partial(self._deleted, (entity, sub_queue), what, window))

    def _deleted(self, key: Any, what: str, window: int | None, task: asyncio.Future[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            log.warning("%s deleted: idle for its AutoDeleteOnIdle window (%s ms)", what, window)
        elif not isinstance(error, EntityNotFound):  # gone already: nothing to do
            log.warning(
                "idle deletion of %s failed (tried again after another window): %s", what, error
            )
            self.tracker.failed(key, self.management.now_ms())  # the server's clock
