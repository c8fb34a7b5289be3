"""A large $management answer (a peek of many big messages) asks the server to give the C
heap back (Services.trim_heap, runtime/heap.py): its temporaries, freed in glibc's arenas,
otherwise stay with the process for as long as the peer keeps the connection, read or not."""

from __future__ import annotations

from amqp_harness import EnginePair
from proton import Link, Message, int32

from sbemu.protocol.requestlinks import LARGE_ANSWER

Q = "queue.1"
BODY = 200_000  # under the queue's 256 KB message limit
COUNT = LARGE_ANSWER // BODY + 2  # their peek answer is over LARGE_ANSWER


def _peek(pair: EnginePair, links: tuple[Link, Link], count: int) -> bytes:
    _, raw = pair.mgmt(
        links,
        "com.microsoft:peek-message",
        {"from-sequence-number": 0, "message-count": int32(count)},
    )
    return raw


def test_a_large_peek_answer_asks_for_one_heap_trim_and_a_small_one_none(pair):
    asked: list[int] = []
    pair.services.trim_heap = lambda: asked.append(1)
    snd = pair.sender(Q)
    for i in range(COUNT):
        pair.send(snd, Message(id=f"m-{i}", body=b"x" * BODY))
    links = pair.mgmt_links(Q)
    assert len(_peek(pair, links, 1)) < LARGE_ANSWER
    assert asked == []  # lock renewals, small peeks: no trim
    assert len(_peek(pair, links, COUNT)) >= LARGE_ANSWER
    assert asked == [1]
