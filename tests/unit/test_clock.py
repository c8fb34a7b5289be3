"""The server's time source (sbemu.clock): wall-clock time that only tests move forward."""

from __future__ import annotations

import math

import pytest

from sbemu.clock import TestClock


class FakeBase:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def test_runs_with_its_base_and_jumps_on_advance() -> None:
    base = FakeBase()
    clock = TestClock(base)
    assert clock() == 1_000.0
    base.t += 2.5  # real time passing still counts
    assert clock() == 1_002.5
    assert clock.advance(10) == 1_012.5
    assert clock() == 1_012.5 and clock.offset == 10
    base.t += 1
    assert clock() == 1_013.5


def test_advance_tells_every_listener_after_the_move() -> None:
    clock = TestClock(FakeBase())
    seen: list[float] = []
    clock.on_advance(lambda: seen.append(clock()))
    clock.on_advance(lambda: seen.append(-clock.offset))
    clock.advance(5)
    clock.advance(0)  # a zero advance is a read with a sweep: allowed
    assert seen == [1_005.0, -5.0, 1_005.0, -5.0]


@pytest.mark.parametrize("bad", [-0.001, -5, math.inf, math.nan])
def test_time_never_goes_back_or_to_infinity(bad: float) -> None:
    clock = TestClock(FakeBase())
    called: list[int] = []
    clock.on_advance(lambda: called.append(1))
    with pytest.raises(ValueError, match="forward"):
        clock.advance(bad)
    assert clock.offset == 0 and called == []
