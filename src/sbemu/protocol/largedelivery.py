"""Large deliveries handed to the engine a slice per loop pass, so that sending one (up to
100 MB on Premium) never holds the event loop for long.

A message larger than LARGE_DELIVERY leaves outgoing.py unjoined (`Pieces`: its few hundred
bytes of sections, then the stored tail itself), and its delivery is given to proton
SEND_SLICE bytes at a time (pn_link_send may be called many times for one delivery before
pn_link_advance; proton frames what it has as transfers with `more` set). Each slice goes in
on a loop pass of its own, and only once the connection's output gate has room: the peer has
taken what was produced before (backpressure.py), so proton never holds more than about a
slice of it and nothing copies the whole message. While a large delivery is under way the gate
reports its connection blocked, so the dispatcher hands its receivers nothing more (their
credit reads 0); the messages of the run that came after it are sent once it is done, in
order.

A connection that closes, or a link that detaches, mid-delivery stops it (the rest is
dropped; proton lets go of the unfinished delivery with its link): the message's lock is left
as any delivery's the client did not settle, and expires, making the message available again. The in-memory test harness gives no `defer`: there every slice goes in at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cproton_ffi import ffi as _ffi
from cproton_ffi import lib as _lib

__all__ = ["LARGE_DELIVERY", "SEND_SLICE", "LargeSend", "Pieces"]

# A delivery larger than this is sent a slice per loop pass (below it: in one call, as ever).
LARGE_DELIVERY = 4 * 1024 * 1024
# Bytes handed to proton per pass: the output bound, so a reader that keeps up has the next
# slice ready as it takes this one (backpressure.OUTPUT_BOUND, listener.WRITE_SLICE).
SEND_SLICE = 4 * 1024 * 1024


class Pieces:
    """A message's bytes as the parts that make it up, not joined (their len is the sum)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: Sequence[bytes | memoryview]) -> None:
        self.parts = parts
        self.size = sum(len(p) for p in parts)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


class LargeSend:
    """One large delivery under way on a link: `step()` hands proton the next slice of it,
    and advances the link (settling it first if pre-settled) after the last."""

    __slots__ = ("link", "delivery", "settle", "_views", "_sent", "size", "then")

    def __init__(
        self,
        link: Any,
        delivery: Any,
        data: Pieces | bytes,
        settle: bool,
        then: Callable[[], None],
    ) -> None:
        self.link = link  # the C link; its current delivery is `delivery`
        self.delivery = delivery
        self.settle = settle  # receive-and-delete: pre-settled once complete
        parts = data.parts if type(data) is Pieces else (data,)
        self._views = [memoryview(p) for p in reversed(parts) if len(p)]  # type: ignore[arg-type]
        self._sent = 0
        self.size = len(data)
        self.then = then  # run once the delivery is complete (the rest of its run)

    @property
    def done(self) -> bool:
        return not self._views

    def step(self, limit: int = SEND_SLICE) -> int:
        """Hand proton up to `limit` more bytes (views of the parts: proton copies them);
        the bytes handed over. After the last, the delivery is complete."""
        views, link, sent = self._views, self.link, 0
        while views and sent < limit:
            view = views[-1]
            piece = view[: limit - sent]
            _lib.pn_link_send(link, _ffi.from_buffer(piece), len(piece))
            sent += len(piece)
            if len(piece) == len(view):
                views.pop()
            else:
                views[-1] = view[len(piece) :]
        self._sent += sent
        if not views:
            _lib.pn_link_advance(link)
            if self.settle:
                _lib.pn_delivery_settle(self.delivery)
        return sent
