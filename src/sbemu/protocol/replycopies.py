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
and it is just as true two seconds later.

Copies cost the peer credit, and pyamqp grants its `$management` reply link 10,000 credits
once and never more (against Azure as well: after 10,000 answers the link takes none). So
copies are owed only where the drop can happen and spend at most half of that credit:

* only for renewals in a burst: another renewal on the connection arrived within ``BURST`` s
  of it, before or after (several locks renewed together, from the AutoLockRenewer's several
  threads). An answer can only be dropped by a thread that reads the socket while waiting for
  an answer of its own; one lock renewed alone, every few seconds, gets one answer, and costs
  one credit as against Azure;
* never below the floor: half of the credit the reply link had when its first copy was owed.
  A peer keeps at least half its credit for real answers however many copies it was sent.

A copy is best effort: it is also skipped when that link has answers waiting or is gone.

Nudges: pyamqp grants a new reply link its credit in a flow it writes while it handles our
attach, and that write needs the socket lock that the other renewing threads keep taking for
their reads (each holds it in `recv` up to 0.2 s and takes it again at once; Python's locks are
not fair). On a loaded machine the flow went out 3.2 s after the attach, and until it came
sbemu could not answer at all (AMQP allows no transfer without credit); locks of 5 s then
expired on the client's clock. So while an answer to a pyamqp peer waits for credit, the
connection writes an empty frame (a heartbeat [AMQP 1.0 2.4.5]) every ``NUDGE`` s, for at
most ``NUDGE_FOR`` s: each one ends a reader's wait at once and frees the lock for the flow.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
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

# While an answer waits for a pyamqp peer's credit: an empty frame every NUDGE s, for at most
# NUDGE_FOR s after the last answer that had to wait (a peer that never grants credit costs 100
# small writes a second for that long, then nothing). Under two `yes` and four test processes
# the slowest renewal of ten locks took at most 0.64 s with nudges (160 runs, none lost a
# lock), and up to 4.7 s without (320 runs, 3 lost their locks): docs/sdk-suite.md.
NUDGE = 0.01
NUDGE_FOR = 10.0
# an empty AMQP frame: size 8, data offset 2, type 0 (AMQP), channel 0 [AMQP 1.0 2.3.1]
EMPTY_FRAME = b"\x00\x00\x00\x08\x02\x00\x00\x00"

# the `$management` operations whose answers are copied: AutoLockRenewer's two renewals
COPIED_OPERATIONS = frozenset({"com.microsoft:renew-lock", "com.microsoft:renew-session-lock"})


def wants_copies(properties: Mapping[Any, Any] | None) -> bool:
    """Whether a peer's open properties name pyamqp as its AMQP stack (azure-servicebus puts
    `azsdk-python-servicebus/VERSION pyamqp/VERSION Python/...` in `user-agent`)."""
    if not properties:
        return False
    agent = properties.get("user-agent")
    return isinstance(agent, str) and " pyamqp/" in agent


# Seconds within which two renewals on one connection are a burst (see the module docstring):
# the AutoLockRenewer's threads renew the locks of a batch of messages within milliseconds of
# each other; under load their requests spread over a few hundred.
BURST = 1.0


class _Answer:
    """One renewal's answer and whether it was part of a burst."""

    __slots__ = ("data", "in_burst", "reply")

    def __init__(self, reply: Any, data: bytes, in_burst: bool) -> None:
        self.reply = reply
        self.data = data
        self.in_burst = in_burst


class ReplyCopies:
    """The copies a connection still owes."""

    __slots__ = ("_due", "_last", "_last_at", "_nudge_at", "_nudge_until")

    def __init__(self) -> None:
        # per delay, (when, answer): one delay per queue, so each queue's arrival order is its
        # due order
        self._due: tuple[deque[tuple[float, _Answer]], ...] = tuple(deque() for _ in COPY_DELAYS)
        self._last: _Answer | None = None
        self._last_at = 0.0
        self._nudge_at: float | None = None  # when the next empty frame is due, if nudging
        self._nudge_until = 0.0

    def add(self, now: float, reply: Any, data: bytes, credit: int) -> None:
        """Owe copies of `data` on `reply` (which has `credit` left after it), one
        COPY_DELAYS[i] from `now` for each i, sent if it turns out part of a burst. The first
        answer owed copies on a reply link sets its `copy_floor`: half of `credit`."""
        last = self._last
        in_burst = last is not None and now - self._last_at <= BURST
        if in_burst:
            assert last is not None
            last.in_burst = True  # the one before was not alone either
        answer = _Answer(reply, data, in_burst)
        self._last, self._last_at = answer, now
        if reply.copy_floor is None:
            reply.copy_floor = credit // 2
        for delay, due in zip(COPY_DELAYS, self._due, strict=True):
            due.append((math.ceil(round((now + delay) / TICK, 6)) * TICK, answer))

    def next_deadline(self) -> float | None:
        """When the next copy falls due, if one is owed."""
        heads = [due[0][0] for due in self._due if due]
        if self._nudge_at is not None:
            heads.append(self._nudge_at)
        return min(heads) if heads else None

    def answer_waits(self, now: float) -> None:
        """An answer waits for the peer's credit: nudge from the next NUDGE on, for NUDGE_FOR s."""
        if self._nudge_at is None:
            self._nudge_at = now + NUDGE
        self._nudge_until = now + NUDGE_FOR

    def nudge_due(self, now: float, waiting: Callable[[], bool]) -> bool:
        """Whether an empty frame goes now; `waiting()`: whether answers still wait for credit
        (asked only when a nudge is due: once none do, or NUDGE_FOR is over, nudging stops)."""
        at = self._nudge_at
        if at is None or at > now:
            return False
        if now > self._nudge_until or not waiting():
            self._nudge_at = None
            return False
        self._nudge_at = now + NUDGE
        return True

    def take_due(self, now: float) -> list[tuple[Any, bytes]]:
        """The copies due by `now` of answers in a burst (all due by `now` removed)."""
        out = []
        for due in self._due:
            while due and due[0][0] <= now:
                _, answer = due.popleft()
                if answer.in_burst:
                    out.append((answer.reply, answer.data))
        if self._last is not None and not any(self._due):
            self._last = None  # nothing owed: no answer to keep alive
        return out
