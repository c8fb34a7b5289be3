"""Completion callbacks shared by the partitions and protocol sides (no state, no imports).

A `Done` is called once with the error an operation ended with, or None; brokers call it
after the group commit that made the operation durable.
"""

from __future__ import annotations

from collections.abc import Callable

Done = Callable[[Exception | None], None]


def join_completions(count: int, done: Done) -> Done:
    """A completion to hand to `count` operations; `done` runs once, after the last, with
    the first error any of them reported (or None)."""
    remaining = count
    failure: list[Exception] = []

    def one_done(error: Exception | None) -> None:
        nonlocal remaining
        remaining -= 1
        if error is not None and not failure:
            failure.append(error)
        if remaining == 0:
            done(failure[0] if failure else None)

    return one_done
