"""A few kill -9 points of the crash-consistency suite (the full run is `make crash-test`)."""

from __future__ import annotations

import os

from hardening.crash import run

KILLS = int(os.environ.get("SBEMU_CRASH_KILLS", "2"))


def test_kill9_under_load_keeps_every_promise(tmp_path):
    r = run(tmp_path / "crash", KILLS, seed=7)
    assert r["kills"] == KILLS
    assert r["acked"] > 0 and r["completed"] > 0
    assert r["ops"].get("tx committed", 0) > 0 and r["forwarded_acked"] > 0  # both exercised
    assert r["problems"] == [], r["problems"][:20]
    assert r["tracebacks"] == []


def test_sigterm_under_load_drains_and_exits_quickly(tmp_path):
    r = run(tmp_path / "term", 1, seed=8, sigterm=True)
    assert r["problems"] == [], r["problems"][:20]
    assert r["acked"] > 0
    assert max(r["sigterm_exit_seconds"]) < 5.0, r["sigterm_exit_seconds"]
    assert r["tracebacks"] == []
