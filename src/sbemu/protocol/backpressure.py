"""Backpressure: whether a connection may produce more output for its peer (sans-IO).

A peer that does not read must not make the server buffer without limit (issue 35). Output
for a peer grows in two places: proton's buffers (the deliveries and management answers handed
to the engine, framed only as `data_to_send` takes them) and the socket's write buffer (the
adapter's). The adapter tells the gate when the socket's buffer passes its high-water mark
(asyncio's pause_writing) and when it drained (resume_writing); the connection tells it what it
handed to proton (`produced`) and, each time the adapter took output, how much proton still
holds (`taken`: the sessions' outgoing bytes, exact even for a peer whose session window holds
transfers back). While the gate is blocked:

* receive links report no credit, so the dispatcher hands them nothing (the messages stay
  ready, their locks untaken);
* `$management` requests wait, undecoded, in the connection (what was read before the adapter
  stopped reading: at most one read);
* the adapter neither reads from the peer nor takes output from the engine.

When it opens again, whatever waited (`starved`) is served. What is queued for one peer is
thus bounded by the socket's buffer, plus ``OUTPUT_BOUND``, plus the last run of deliveries
(at most ``DISPATCH_RUN`` messages) or the last management answer, which were produced before
the bound was reached. A peer that reads nothing for ``SBEMU_WRITE_STALL_TIMEOUT`` seconds is
closed by the adapter (listener.py), which owns the clock.

A large delivery (largedelivery.py) is handed to proton a slice at a time: while one is under
way (`begin_send` .. `end_send`) the gate reads blocked, so nothing else is produced for the
peer, and its next slice waits (`wait_for_room`) until what came before was taken.

Hot path: a receive link's credit() reads one attribute (`blocked`); a run of deliveries adds
its byte count once.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["OUTPUT_BOUND", "OutputGate"]

# Bytes handed to proton and not yet taken by the adapter beyond which nothing more is
# produced: one write slice (listener.WRITE_SLICE), so a reader that keeps up always has the
# next slice ready while it reads this one.
OUTPUT_BOUND = 4 * 1024 * 1024


class OutputGate:
    """One connection's output bound; see the module docstring."""

    __slots__ = ("blocked", "bound", "paused", "queued", "sending", "starved", "_waiting")

    def __init__(self, bound: int = OUTPUT_BOUND) -> None:
        self.bound = bound
        self.queued = 0  # bytes produced into the engine and not framed out yet
        self.paused = False  # the socket's write buffer is over its high-water mark
        self.blocked = False  # paused, or queued >= bound: produce nothing more
        self.starved = False  # something waited while blocked: serve it when it opens
        self.sending = 0  # large deliveries under way: blocked until they are done
        self._waiting: list[Callable[[], object]] = []  # their next slices, run once room

    @property
    def room(self) -> bool:
        """A large delivery's next slice may go in: the socket keeps up and what was
        produced before was taken."""
        return not self.paused and self.queued < self.bound

    def begin_send(self) -> None:
        """A large delivery starts: produce nothing else until it is done."""
        self.sending += 1
        self.blocked = True

    def end_send(self) -> bool:
        """A large delivery is done (or dropped); True when the gate just opened for
        something that waited."""
        self.sending -= 1
        return self._update()

    def wait_for_room(self, then: Callable[[], object]) -> None:
        """Run `then` once there is room (from taken or resume)."""
        self._waiting.append(then)

    def produced(self, nbytes: int) -> None:
        """Deliveries or an answer of `nbytes` went into the engine."""
        self.queued += nbytes
        if self.queued >= self.bound:
            self.blocked = True

    def taken(self, queued: int) -> bool:
        """The adapter took output; `queued` bytes of deliveries and answers are still in the
        engine (proton's count). True when the gate just opened for something that waited."""
        self.queued = queued
        return self._update()

    def pause(self) -> None:
        """The socket's write buffer passed its high-water mark."""
        self.paused = self.blocked = True

    def resume(self) -> bool:
        """The socket drained below its low-water mark; True when something waits."""
        self.paused = False
        return self._update()

    def _update(self) -> bool:
        was = self.blocked
        room = self.room
        self.blocked = not room or self.sending > 0
        if room and self._waiting:
            waiting, self._waiting = self._waiting, []
            for then in waiting:
                then()
        return was and not self.blocked and self.starved
