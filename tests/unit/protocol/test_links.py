"""The link lifecycle table (protocol/links.py): every allowed move, and the refused ones."""

from __future__ import annotations

import pytest
from proton import Connection

from sbemu.protocol.links import (
    CoordinatorLink,
    LinkPhase,
    LinkStateError,
    advance,
)

A, W, T, D = LinkPhase.ATTACHING, LinkPhase.WAITING, LinkPhase.ATTACHED, LinkPhase.DETACHED
ALLOWED = {(A, W), (A, T), (A, D), (W, T), (W, D), (T, D)}


def _link_in(phase: LinkPhase) -> CoordinatorLink:
    link = Connection().session().receiver("txn-controller")
    state = CoordinatorLink(link)
    assert state.phase is A  # every link starts at the peer's attach
    path = {A: [], W: [W], T: [T], D: [D]}[phase]
    for step in path:
        advance(state, step)
    return state


@pytest.mark.parametrize("start", list(LinkPhase))
@pytest.mark.parametrize("to", list(LinkPhase))
def test_transition_table(start: LinkPhase, to: LinkPhase) -> None:
    state = _link_in(start)
    if (start, to) in ALLOWED:
        advance(state, to)
        assert state.phase is to
    else:
        with pytest.raises(LinkStateError) as info:
            advance(state, to)
        assert state.phase is start  # a refused move changes nothing
        # the connection's one error path detaches with this condition (no traceback)
        assert info.value.condition == "amqp:illegal-state"
        assert "txn-controller" in info.value.description
        assert start.value in info.value.description and to.value in info.value.description


def test_detached_is_final() -> None:
    state = _link_in(D)
    for to in LinkPhase:
        with pytest.raises(LinkStateError):
            advance(state, to)
