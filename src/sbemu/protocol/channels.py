"""Drop the frames a peer sends on a channel after it ended that channel's session.

[AMQP 1.0 2.7.8] `end` closes a session; after it the channel is unmapped until a `begin`
maps it again. pyamqp (azure-servicebus) ends the session of a closed receiver and then still
sends the `detach` of its `$management` links on the same channel. proton answers that frame
with a connection-level error (`amqp:not-allowed`, "no such channel"), which tears down every
other link on the shared connection. Azure ignores such frames; so does sbemu: the frames are
dropped here, before proton sees them, and logged at debug level only.

The filter walks the incoming byte stream frame by frame (8-byte frame headers [AMQP 1.0
2.3.1], plus the performative's descriptor for AMQP frames). Frames are passed through as one
unchanged buffer unless one is dropped, so the common case copies nothing.
"""

from __future__ import annotations

import logging

log = logging.getLogger("sbemu.connection")

_BEGIN = 0x11
_END = 0x17
# session-level performatives (attach .. end) [AMQP 1.0 2.7]; open/close belong to the
# connection and travel on any channel, so they always pass
_SESSION_LEVEL = range(0x12, 0x18)
_AMQP_HEADER = b"AMQP"


class EndedChannelFilter:
    """Input filter for one connection's AMQP byte stream (after SASL)."""

    __slots__ = ("_carry", "_started", "_skip", "_dropping", "_ended", "_off", "connection_id")

    def __init__(self, connection_id: int = 0) -> None:
        self._carry = b""
        self._started = False
        self._skip = 0  # bytes of the current frame still to pass (or drop)
        self._dropping = False
        self._ended: set[int] = set()  # channels whose session the peer ended
        self._off = False  # not an AMQP stream we understand: pass everything to proton
        self.connection_id = connection_id

    def feed(self, data: bytes) -> bytes:
        """Return the bytes of `data` proton should see (frames may be held back until whole
        enough to classify)."""
        if self._off:
            return data
        buf = self._carry + data if self._carry else data
        self._carry = b""
        n = len(buf)
        pos = 0
        limit = n  # bytes from `limit` on are carried to the next call
        cuts: list[tuple[int, int]] = []
        if not self._started:
            if n < 8:
                self._carry = buf
                return b""
            if buf[:4] != _AMQP_HEADER:
                self._off = True
                return buf
            self._started = True
            pos = 8
        while pos < n:
            if self._skip:
                take = min(self._skip, n - pos)
                if self._dropping:
                    cuts.append((pos, pos + take))
                self._skip -= take
                pos += take
                continue
            if n - pos < 8:
                limit = pos
                break
            size = int.from_bytes(buf[pos : pos + 4], "big")
            doff = buf[pos + 4]
            channel = (buf[pos + 6] << 8) | buf[pos + 7]
            if size < 8 or doff < 2 or doff * 4 > size:
                self._off = True  # malformed: proton reports it properly
                break
            drop = False
            body = pos + doff * 4
            if buf[pos + 5] == 0 and size > doff * 4:  # an AMQP frame with a performative
                code = self._descriptor(buf, body, pos + size)
                if code is None:
                    limit = pos
                    break
                if channel in self._ended:
                    if code == _BEGIN:
                        self._ended.discard(channel)
                    elif code in _SESSION_LEVEL:
                        drop = True
                        log.debug(
                            "connection %d: ignoring a frame (performative %#04x) on channel "
                            "%d after the peer ended its session",
                            self.connection_id,
                            code,
                            channel,
                        )
                elif code == _END:
                    self._ended.add(channel)
            end = pos + size
            if end > n:
                self._skip = end - n
                self._dropping = drop
                end = n
            if drop:
                cuts.append((pos, end))
            pos = end
        if limit < n:
            self._carry = buf[limit:]
        if not cuts:
            return buf if limit == n else buf[:limit]
        parts = []
        at = 0
        for start, stop in cuts:
            parts.append(buf[at:start])
            at = stop
        parts.append(buf[at:limit])
        return b"".join(parts)

    @staticmethod
    def _descriptor(buf: bytes, body: int, frame_end: int) -> int | None:
        """The performative's descriptor code; None when not all of it has arrived yet;
        -1 for a form we do not classify (symbolic)."""
        n = len(buf)
        if n - body < 3:
            return None if frame_end > n else -1
        if buf[body] != 0x00:
            return -1
        if buf[body + 1] == 0x53:
            return buf[body + 2]
        if buf[body + 1] == 0x80:
            if n - body < 10:
                return None if frame_end > n else -1
            return int.from_bytes(buf[body + 2 : body + 10], "big")
        return -1
