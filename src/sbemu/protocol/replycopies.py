"""Copies of each lock renewal's answer, for azure-servicebus's pure-Python AMQP stack.

azure-servicebus's AutoLockRenewer renews locks from worker threads that share one
`$management` link and one socket, and pyamqp (its default transport) sends a request *before*
it registers the operation that waits for the answer (`ManagementLink.execute_operation`).
Every waiting thread reads the socket. When the renewing thread loses the CPU right after its
write (a loaded machine, a handful of threads contending for the GIL), another thread reads
the answer, finds no operation with that correlation-id and drops it; the renewing thread then
waits with no deadline and the lock expires (MessageLockLostError on complete). The gap
between the write and the registration is microseconds when the thread keeps running, but
loaded runs measured tens of milliseconds, up to half a second (docs/sdk-suite.md). sbemu
answers on loopback in about a millisecond. Holding every answer back until the gap is closed
would not help: a thread waiting for its answer holds pyamqp's socket lock in `recv`, so the
other threads could not send their renewals meanwhile, and a 300-lock renewal burst no longer
fits in its 10 s window.

So a connection whose open names pyamqp in its user-agent is sent each lock renewal's answer
at once and again at each of COPY_DELAYS later, the same message with the same correlation-id.
pyamqp ignores an answer that matches no waiting operation (an earlier copy already completed
it), and a later copy completes an operation whose earlier copies were dropped. Only renewals
are copied: they are what the AutoLockRenewer sends from its threads, their answer is small,
and it is just as true two seconds later. A copy is best effort: it needs credit of its own
on the reply link and is skipped when that link has answers waiting, has no credit to spare
(pyamqp grants its reply link 10,000 credits once and never more) or is gone.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

# Seconds after the answer that its copies go. Under load (two `yes`, two test processes), a
# dropped answer's thread registered its operation a median 0.6 ms after the drop, 31 ms at the
# 99th percentile and 470 ms at most (282 drops). The first copy catches almost all of them,
# and ends sooner than pyamqp's 0.2 s socket timeout the wait of a thread that sits in `recv`
# for a frame that is not coming (its answer was read by another thread), which otherwise
# blocks every other thread's send; the later ones catch the tail, well inside the 10 s the
# AutoLockRenewer leaves before a lock expires.
COPY_DELAYS = (0.03, 0.3, 2.0)
# Due times are rounded up to this grid, so that one timer tick sends every copy due in it
# rather than one tick per copy (at hundreds of renewals a second the ticks cost more than the
# copies).
TICK = 0.01

# the `$management` operations whose answers are copied: AutoLockRenewer's two renewals
COPIED_OPERATIONS = frozenset({"com.microsoft:renew-lock", "com.microsoft:renew-session-lock"})


def wants_copies(properties: Mapping[Any, Any] | None) -> bool:
    """Whether a peer's open properties name pyamqp as its AMQP stack (azure-servicebus puts
    `azsdk-python-servicebus/VERSION pyamqp/VERSION Python/...` in `user-agent`)."""
    if not properties:
        return False
    agent = properties.get("user-agent")
    return isinstance(agent, str) and " pyamqp/" in agent


class ReplyCopies:
    """The copies a connection still owes."""

    __slots__ = ("_due",)

    def __init__(self) -> None:
        # per delay, (when, reply link state, encoded answer): one delay per queue, so each
        # queue's arrival order is its due order
        self._due: tuple[deque[tuple[float, Any, bytes]], ...] = tuple(deque() for _ in COPY_DELAYS)

    def add(self, now: float, reply: Any, data: bytes) -> None:
        """Owe copies of `data` on `reply`, one COPY_DELAYS[i] from `now` for each i."""
        for delay, due in zip(COPY_DELAYS, self._due, strict=True):
            due.append((math.ceil(round((now + delay) / TICK, 6)) * TICK, reply, data))

    def next_deadline(self) -> float | None:
        """When the next copy falls due, if one is owed."""
        heads = [due[0][0] for due in self._due if due]
        return min(heads) if heads else None

    def take_due(self, now: float) -> list[tuple[Any, bytes]]:
        """The copies due by `now` (removed from those owed)."""
        out = []
        for due in self._due:
            while due and due[0][0] <= now:
                _, reply, data = due.popleft()
                out.append((reply, data))
        return out
