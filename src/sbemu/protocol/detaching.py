"""Detach (and end, close) replies held while a receive link's outcomes are still committing.

A client that settles messages and detaches at once (Java's ServiceBusProcessorClient closing
while its completions commit) waits for the outcome of each settlement; a broker that answers
the detach at once never sends those dispositions, and the client reports "The receiver didn't
receive the disposition acknowledgment due to receive link closure". So the connection counts
each receive link's outcomes in flight (a client's unsettled disposition whose commit has not
landed yet) and, when the peer detaches such a link (or ends its session, or closes the
connection: Java closes a processor's connection right after its last complete), answers only
after the last of them is answered, or after DETACH_HOLD_SECONDS at most (a store that stalls must not hold a
link forever; the late outcomes then have nobody to reach and are dropped with the link).

No clocks here: `now` (Unix seconds) is passed in; the connection asks next_deadline() for its
timer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DETACH_HOLD_SECONDS = 5.0  # longest a detach reply waits for its link's outcomes


class DetachHold:
    """Outcomes in flight per link, and the detach, end or close replies that wait for them."""

    def __init__(self) -> None:
        self._in_flight: dict[Any, int] = {}  # link state -> outcomes not answered yet
        # what the peer closed -> (when to answer regardless, which links it waits for,
        # how to answer), in arrival order (a link's detach before its session's end)
        self._held: dict[Any, tuple[float, Callable[[Any], bool], Callable[[], None]]] = {}

    def started(self, state: Any) -> None:
        """An outcome on the link went to the store; its answer is pending."""
        self._in_flight[state] = self._in_flight.get(state, 0) + 1

    def answered(self, state: Any) -> None:
        """An outcome on the link was answered (or failed)."""
        left = self._in_flight.get(state, 0) - 1
        if left > 0:
            self._in_flight[state] = left
        else:
            self._in_flight.pop(state, None)

    def hold(
        self, key: Any, now: float, covers: Callable[[Any], bool], answer: Callable[[], None]
    ) -> bool:
        """The peer detached a link, ended a session or closed the connection (`key`): True
        when the reply (`answer`) must wait, because a link it `covers` has outcomes in flight."""
        if not any(covers(state) for state in self._in_flight):
            return False
        self._held[key] = (now + DETACH_HOLD_SECONDS, covers, answer)
        return True

    def release(self, now: float) -> list[Callable[[], None]]:
        """The held replies that may go now, in arrival order: nothing they wait for is left in
        flight, or they were held too long (what they waited for is then given up)."""
        if not self._held:
            return []
        answers = []
        for key, (until, covers, answer) in list(self._held.items()):
            waiting = [state for state in self._in_flight if covers(state)]
            if waiting and until > now:
                continue
            for state in waiting:
                del self._in_flight[state]
            del self._held[key]
            answers.append(answer)
        return answers

    def holding(self) -> bool:
        """Whether a reply is held (the peer may have closed its input: wait for our answer)."""
        return bool(self._held)

    def next_deadline(self) -> float | None:
        """When the first held reply must go regardless, if any is held."""
        return min(until for until, _, _ in self._held.values()) if self._held else None

    def clear(self) -> None:
        """The connection is gone: nothing is held."""
        self._in_flight.clear()
        self._held.clear()
