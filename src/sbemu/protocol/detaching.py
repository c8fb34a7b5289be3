"""Detach replies held while a receive link's outcomes are still committing.

A client that settles messages and detaches at once (Java's ServiceBusProcessorClient closing
while its completions commit) waits for the outcome of each settlement; a broker that answers
the detach at once never sends those dispositions, and the client reports "The receiver didn't
receive the disposition acknowledgment due to receive link closure". So the connection counts
each receive link's outcomes in flight (a client's unsettled disposition whose commit has not
landed yet) and, when the peer detaches such a link, answers the detach only after the last of
them is answered, or after DETACH_HOLD_SECONDS at most (a store that stalls must not hold a
link forever; the late outcomes then have nobody to reach and are dropped with the link).

No clocks here: `now` (Unix seconds) is passed in; the connection asks next_deadline() for its
timer.
"""

from __future__ import annotations

from typing import Any

DETACH_HOLD_SECONDS = 5.0  # longest a detach reply waits for its link's outcomes


class DetachHold:
    """Outcomes in flight per link, and the links whose detach reply waits for them."""

    def __init__(self) -> None:
        self._in_flight: dict[Any, int] = {}  # link state -> outcomes not answered yet
        self._held: dict[Any, float] = {}  # link state -> when to detach regardless

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

    def hold(self, state: Any, now: float) -> bool:
        """The peer detached the link: True when its reply must wait (outcomes in flight)."""
        if state not in self._in_flight:
            return False
        self._held[state] = now + DETACH_HOLD_SECONDS
        return True

    def release(self, now: float) -> list[Any]:
        """The held links whose reply may go now: nothing left in flight, or held too long."""
        if not self._held:
            return []
        done = [s for s, until in self._held.items() if s not in self._in_flight or until <= now]
        for state in done:
            del self._held[state]
            self._in_flight.pop(state, None)
        return done

    def next_deadline(self) -> float | None:
        """When the first held link must be released regardless, if any is held."""
        return min(self._held.values()) if self._held else None

    def clear(self) -> None:
        """The connection is gone: nothing is held."""
        self._in_flight.clear()
        self._held.clear()
