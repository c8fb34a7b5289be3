"""The server's time source: wall-clock seconds, which a test can move forward.

The core never reads a clock (every call takes ``now``); the server asks its clock once per
event (a frame, a timer sweep, an admin request) and passes the answer in. Production uses
``time.time``. A test that must see a lock expire, a message's time-to-live pass or a scheduled
message come due starts the server with a :class:`TestClock` (``SBEMU_TEST_CLOCK=1`` for
``sbemu serve``) and advances it, instead of sleeping through those seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

Clock = Callable[[], float]  # Unix seconds
SYSTEM_CLOCK: Clock = time.time  # production's clock: the server's default


class TestClock:
    """Wall-clock time plus an offset that only ever grows.

    Between two :meth:`advance` calls it runs at the speed of real time, so everything that
    waits in real time (socket timeouts, a receiver's drain) behaves as before; ``advance``
    jumps it forward and tells the listeners (the server re-runs its lock, TTL and schedule
    sweep at once).
    """

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, base: Clock = time.time) -> None:
        self._base = base
        self.offset = 0.0
        self._listeners: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self._base() + self.offset

    def on_advance(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every advance (on the caller's thread)."""
        self._listeners.append(listener)

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward; returns the new time. Time never goes back."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"a clock only moves forward by a finite amount, not {seconds!r}")
        self.offset += seconds
        for listener in list(self._listeners):
            listener()
        return self()
