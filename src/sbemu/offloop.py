"""Work the server runs on a worker thread, off the event loop, one run at a time.

Log retention passes (sbemu.logs.retention) and saves of the AutoDeleteOnIdle times
(sbemu.admin.idledeletion) read or write files for a while: each runs in the server's worker
pool so the loop keeps serving, never two of the same kind at once, and a failure is reported to
its owner instead of vanishing with the future.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any


class OffLoopJob:
    """One kind of off-loop work: `start` runs a function on `executor`, unless a run is under
    way; `failed` gets the exception a run raised (on the loop)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        executor: concurrent.futures.Executor,
        failed: Callable[[BaseException], None],
    ) -> None:
        self._loop = loop
        self._executor = executor
        self._failed = failed
        self._running: asyncio.Future[Any] | None = None

    @property
    def running(self) -> bool:
        """Whether a run is under way."""
        return self._running is not None

    def start(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run `fn(*args)` on a worker thread; False (and nothing started) while one runs."""
        if self._running is not None:
            return False
        future = self._loop.run_in_executor(self._executor, fn, *args)
        self._running = future
        future.add_done_callback(self._done)
        return True

    def _done(self, future: asyncio.Future[Any]) -> None:
        self._running = None
        if not future.cancelled() and future.exception() is not None:
            error = future.exception()
            assert error is not None
            self._failed(error)

    async def wait(self) -> None:
        """Until the run under way (if any) has finished."""
        if self._running is not None:
            await asyncio.wait([self._running])
