"""No single request holds the event loop for long (issue 35: 50 ms at most): the largest
batch the limits let through (4,500 messages in one transfer) on a plain and a 16-partition
queue, and a 99 MB message on a Premium queue, sent and delivered (`recv`: a receiver with
credit 1 that accepts it; only the delivery is watched; `session`: the same in a session;
`again`: given back once and delivered again; `peek` and `deferred`: in a `$management`
answer; `schedule`: scheduled, inside a `$management` request), with a watch on the server's loop
(hardening/loophold.py, which `make loop-hold` runs with the strict 50 ms on a quiet machine).

Here the bound is checked with a margin for a machine busy with other work: the loop thread's
CPU between two runs of a callback due every millisecond stays under HELD_CPU_MS for a 99 MB
message (400-600 ms before its intake was split over loop passes, 28-35 ms after, on a machine
with a load of 3-10), and for its delivery (430-760 ms in one piece before it was handed to
the engine a slice per pass; after, 22-28 ms while the message is in memory and 85-130 ms when
it is read back from LMDB, its decode, at a load of 3-8: see docs/large-messages.md; now that
read is off the loop, for a first delivery, a session's message (`session`: 82-99 ms before on
a quiet machine, 18 ms after) and one delivered again after an abandon (`again`: 79-108 ms
before, 19-35 ms after), and in a `$management` answer (`peek`: 852 ms before, 19 ms after;
`deferred`, received by its sequence number: 716 ms before, 32 ms after), and in a
`$management` request, then cancelled (`schedule`: 408 ms before, 11 ms after), and purged
through the admin API (`purge`: 121 ms for two before, 11 ms after) or expired (`expire`: 55-72
ms before, 10.6 ms after): both read it by the next commit, off the loop). A batch's largest piece (staging 4,500 messages) is 15-20 ms on a quiet
machine and 100-130 ms under a load of 10, where the whole batch was 50 and 200 ms: no margin
a timed test could keep on a shared machine, so the batches here only have to get through the
watched server and stay under BATCH_CPU_MS, and how a batch is split is checked exactly (a
chunk per step, nothing stored before the last) by tests/unit/protocol/test_intake.py."""

from __future__ import annotations

import pytest
from hardening import loophold

HELD_CPU_MS = 150.0  # 3x the 50 ms asked for: room for a loaded machine, not for the 400 ms
BATCH_CPU_MS = 400.0  # a sanity bound only (see above)
ROUNDS = 3  # requests per case, each watched alone


@pytest.mark.parametrize(
    ("premium", "queue", "kind"),
    [
        (False, loophold.PLAIN, "tiny"),
        (False, loophold.PARTITIONED, "tiny"),
        (True, loophold.BIG, "big"),
        (True, loophold.BIG, "recv"),
        (True, loophold.BIG_SESSIONS, "session"),
        (True, loophold.BIG, "again"),
        (True, loophold.BIG, "peek"),
        (True, loophold.BIG, "deferred"),
        (True, loophold.BIG, "schedule"),
        (True, loophold.BIG, "purge"),
        (True, loophold.BIG, "expire"),
    ],
)
def test_one_request_holds_the_loop_briefly(tmp_path, premium: bool, queue: str, kind: str):
    srv = loophold.WatchedServer(tmp_path, premium).start()
    try:
        rounds = [loophold.measure(srv, queue, kind, 1) for _ in range(ROUNDS)]
    finally:
        srv.stop()
    for got in rounds:
        print(got)
    assert [got["accepted"] for got in rounds] == [1] * ROUNDS
    # Each round is one request, watched alone. A request that holds the loop does so in every
    # round; a round inflated by the machine (a shared VM charges the running thread for time
    # it did not run: CI once saw 555 ms for a batch's pass measured at 53-57 ms here beside
    # four busy processes) does not repeat. So the least of the rounds' worst passes is checked.
    least = min(got["worst_cpu_ms"] for got in rounds)
    assert least < (BATCH_CPU_MS if kind in ("tiny", "sdk") else HELD_CPU_MS), rounds
