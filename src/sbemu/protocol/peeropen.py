"""The peer's open as proton sees it: its max-frame-size lowered by the padding's headroom.

frames.FramePadder pads proton's performatives after proton has framed them, and proton fills
a large delivery's transfer frames right up to the peer's max-frame-size [AMQP 2.7.1]. So the
open that reaches proton says a limit PAD_HEADROOM bytes lower (never below AMQP's 512), and
every padded frame still fits the limit the peer really set: a client that enforces it
(proton-c, proton-j) otherwise closed the connection with framing-error at the first frame of
a multi-frame delivery. Only the peer's first frame (its open) is looked at; the filter is
dropped after it, so the input path costs nothing more. The peer's own limit is kept in
`peer_max_frame` for the padder's last guard (frames.FramePadder.limit).
"""

from __future__ import annotations

import struct

from .codec import _decode, _skip, enc_list, enc_uint
from .frames import PAD_HEADROOM

MIN_MAX_FRAME = 512  # [AMQP 2.7.1] the smallest max-frame-size a peer may set
_OPEN = b"\x00\x53\x10"
_AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
_LARGEST_OPEN = 65_536  # an open frame larger than this (it never is) is passed on untouched


class PeerOpenFilter:
    """Input filter for the start of one connection's AMQP byte stream (after SASL)."""

    __slots__ = ("_carry", "_header", "done", "peer_max_frame")

    def __init__(self) -> None:
        self._carry = b""
        self._header = 0  # bytes of the protocol header passed on (it is never held back)
        self.done = False  # the open has passed (or the stream is not one we understand)
        self.peer_max_frame = 0  # the peer's own max-frame-size; 0: no limit

    def feed(self, data: bytes) -> bytes:
        """The bytes proton should see of `data`: the protocol header at once (a peer may wait
        for ours before it opens), the open frame once it is whole."""
        if self.done:
            return data
        head = b""
        if self._header < 8:
            take = min(8 - self._header, len(data))
            if bytes(data[:take]) != _AMQP_HEADER[self._header : self._header + take]:
                self.done = True  # not AMQP 1.0: proton answers it
                return data
            self._header += take
            head, data = data[:take], data[take:]
            if not data:
                return head
        buf = self._carry + data if self._carry else data
        self._carry = b""
        if len(buf) < 8:
            self._carry = bytes(buf)
            return head
        size, doff = int.from_bytes(buf[0:4], "big"), buf[4]
        if buf[5] != 0 or size < 8 or doff < 2 or doff * 4 > size or size > _LARGEST_OPEN:
            self.done = True  # not an AMQP frame we understand: proton reports it
            return head + buf
        if len(buf) < size:
            self._carry = bytes(buf)
            return head
        self.done = True
        try:
            frame = self._lowered(bytes(buf[:size]), doff)
        except (IndexError, ValueError, TypeError, struct.error, RecursionError):
            frame = None  # malformed: proton reports it properly
        if frame is None:
            return head + buf
        return head + frame + buf[size:]

    def _lowered(self, frame: bytes, doff: int) -> bytes | None:
        """The open frame with max-frame-size lowered (None: leave it as it is)."""
        body = doff * 4
        if frame[body : body + 3] != _OPEN:
            return None
        p = body + 3
        ctor = frame[p]
        if ctor == 0xC0:
            count, q, end = frame[p + 2], p + 3, p + 2 + frame[p + 1]
        elif ctor == 0xD0:
            count = int.from_bytes(frame[p + 5 : p + 9], "big")
            q, end = p + 9, p + 5 + int.from_bytes(frame[p + 1 : p + 5], "big")
        else:
            return None  # list0: no max-frame-size, no limit
        raw: list[bytes] = []
        for _ in range(count):
            r = _skip(frame, q)
            raw.append(frame[q:r])
            q = r
        if q != end or count < 3 or raw[2] == b"\x40":
            return None  # malformed (proton says so) or no limit
        limit = _decode(raw[2], 0)[0]
        if not isinstance(limit, int) or limit <= 0:
            return None
        self.peer_max_frame = limit
        lowered = max(MIN_MAX_FRAME, limit - PAD_HEADROOM)
        if lowered >= limit:
            return None
        raw[2] = enc_uint(lowered)
        perf = _OPEN + enc_list(raw)
        rest = frame[end:]
        size = body + len(perf) + len(rest)
        return size.to_bytes(4, "big") + frame[4:body] + perf + rest
