"""A peer that does not read (issue 35) on every transport: the server stops reading from it
and producing for it once its socket's buffer is full, holds no more for it than a connection
that reads one answer, and closes it after SBEMU_WRITE_STALL_TIMEOUT with a logged reason,
while everyone else is served. The probe is hardening/backpressure.py's (`python -m
hardening.backpressure` prints the figures)."""

from __future__ import annotations

import pytest
from hardening import backpressure as bp

# what a stuck peer may cost beyond a peer that reads one 20 MB answer [issue 35: 10 MB]
MARGIN_MB = 10.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = bp.start_server(tmp_path_factory.mktemp("backpressure"))
    bp.fill(srv)
    # a normal connection: one peek answer (20 MB), read
    srv.normal = bp.peek_probe(srv, "amqp", read=True, requests=1)  # type: ignore[attr-defined]
    yield srv
    assert srv.tracebacks() == [], srv.tracebacks()
    srv.stop()


@pytest.mark.parametrize("transport", bp.TRANSPORTS)
def test_a_peer_that_never_reads_its_peek_answers_costs_one_answer_and_is_closed(server, transport):
    stuck = bp.peek_probe(server, transport, read=False)
    normal = server.normal
    print(f"normal {normal}\nstuck {stuck}")
    # twelve 20 MB answers asked for, none read: once idle, the server holds about one of
    # them, not 240 MB
    assert stuck["idle"], ("the server kept working for a stuck peer", stuck)
    assert stuck["held_growth_mb"] <= normal["peak_growth_mb"] + MARGIN_MB, (stuck, normal)
    assert stuck["closed_after_s"] is not None, server.stderr()
    assert bp.STALL_LOG in server.stderr()
    server.health()  # the others are served


def test_unread_pongs_stop_the_reading_of_pings(server):
    pings = bp.ping_probe(server, "ws")
    print(pings)
    # before: 61 MB of pings gave +57 MB of queued pongs; now reading stops at the high-water
    # mark, so the client's socket fills long before that
    assert pings["sent_mb"] < 61, pings
    assert pings["growth_mb"] <= MARGIN_MB, pings


def test_a_receiver_that_never_reads_its_deliveries_is_closed(server):
    # last: its messages stay locked (PT1M) after it is closed; the peeks above do not mind
    stuck = bp.delivery_probe(server, "amqp")
    print(stuck)
    # Credit for all 100 messages (20 MB), none read. They are one dispatch run (at most 128
    # messages), produced before the gate can shut, so this shows the close, not the bound: the
    # run's records, their encoding and proton's copy (measured +61 MB, before and after).
    assert stuck["held_growth_mb"] <= 80, stuck
    assert stuck["closed_after_s"] is not None, server.stderr()
