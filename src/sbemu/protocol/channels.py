"""Input fixes for two SDK habits Azure tolerates, applied to the bytes before proton sees them.

1. Frames a peer sends on a channel after it ended that channel's session are dropped.
2. Delivery-ids on request links (`$management`, `$cbs`) are renumbered into sequence.

[AMQP 1.0 2.7.8] `end` closes a session; after it the channel is unmapped until a `begin`
maps it again. pyamqp (azure-servicebus) ends the session of a closed receiver and then still
sends the `detach` of its `$management` links on the same channel. proton answers that frame
with a connection-level error (`amqp:not-allowed`, "no such channel"), which tears down every
other link on the shared connection. Azure ignores such frames; so does sbemu: the frames are
dropped here, before proton sees them, and logged at debug level only.

[AMQP 1.0 2.6.12] delivery-ids are numbered per session. azure-servicebus's AutoLockRenewer
renews locks from several threads over one `$management` link, and pyamqp's threads race on
the session's next id: transfers arrive as 1, 2, ..., 6, 4 (the same id twice). proton closes
the connection ("sequencing error"), and the receiver dies. Azure serves the sample, so on
request links (client-to-service links whose target is `$management` or `$cbs`, where each
request is answered by correlation id, never by delivery-id) sbemu gives such a transfer the
id the session expects. Message links keep proton's full check: a message sender with ids out
of sequence is still refused.

The filter walks the incoming byte stream frame by frame (8-byte frame headers [AMQP 1.0
2.3.1], plus the performative's descriptor for AMQP frames). Frames are passed through as one
unchanged buffer unless one is dropped, so the common case copies nothing.
"""

from __future__ import annotations

import logging
import struct

from .codec import Described, _decode, _skip, enc_list, enc_uint

log = logging.getLogger("sbemu.connection")

_BEGIN = 0x11
_ATTACH = 0x12
_TRANSFER = 0x14
_DETACH = 0x16
_END = 0x17
_REQUEST_NODES = ("$management", "$cbs")
# session-level performatives (attach .. end) [AMQP 1.0 2.7]; open/close belong to the
# connection and travel on any channel, so they always pass
_SESSION_LEVEL = range(0x12, 0x18)
_AMQP_HEADER = b"AMQP"
# [AMQP 1.0 2.3.1] frame header: size, data offset (in 4-byte words), type, channel
_FRAME_HEADER = struct.Struct(">IBBH").unpack_from


class EndedChannelFilter:
    """Input filter for one connection's AMQP byte stream (after SASL)."""

    __slots__ = (
        "_carry",
        "_started",
        "_skip",
        "_dropping",
        "_ended",
        "_off",
        "connection_id",
        "_next_id",
        "_requests",
        "_continuing",
    )

    def __init__(self, connection_id: int = 0) -> None:
        self._carry = b""
        self._started = False
        self._skip = 0  # bytes of the current frame still to pass (or drop)
        self._dropping = False
        self._ended: set[int] = set()  # channels whose session the peer ended
        self._off = False  # not an AMQP stream we understand: pass everything to proton
        # per channel: the delivery-id the session expects next (known once it is tracked)
        self._next_id: dict[int, int | None] = {}
        # per channel: handles of the client's request-sending links ($management, $cbs)
        self._requests: dict[int, set[int]] = {}
        # (channel, handle) of a request transfer continued in the next frame, and its id
        self._continuing: dict[tuple[int, int], int] = {}
        self.connection_id = connection_id

    def feed(self, data: bytes) -> bytes:
        """Return the bytes of `data` proton should see (frames may be held back until whole
        enough to classify)."""
        if self._off:
            return data
        buf = self._carry + data if self._carry else data
        self._carry = b""
        pos = 0
        if not self._started:
            if len(buf) < 8:
                self._carry = buf
                return b""
            if buf[:4] != _AMQP_HEADER:
                self._off = True
                return buf
            self._started = True
            pos = 8
        cuts: list[tuple[int, int, bytes]] = []  # [start, stop) replaced by bytes
        limit = self._walk(buf, pos, cuts)
        if limit < len(buf):
            self._carry = buf[limit:]
        return _splice(buf, cuts, limit)

    def _walk(self, buf: bytes, pos: int, cuts: list[tuple[int, int, bytes]]) -> int:
        """Walk the frames of `buf` from `pos`, adding to `cuts` what is dropped or rewritten;
        return where the bytes to carry to the next call begin (len(buf): none)."""
        n = len(buf)
        while pos < n:
            if self._skip:  # the rest of a frame begun in an earlier call
                take = min(self._skip, n - pos)
                if self._dropping:
                    cuts.append((pos, pos + take, b""))
                self._skip -= take
                pos += take
                continue
            if n - pos < 8:
                return pos
            size, doff, frame_type, channel = _FRAME_HEADER(buf, pos)
            if size < 8 or doff < 2 or doff * 4 > size:
                self._off = True  # malformed: proton reports it properly
                return n
            drop = False
            if frame_type == 0 and size > doff * 4:  # an AMQP frame with a performative
                verdict = self._performative(buf, pos, pos + doff * 4, size, channel, cuts)
                if verdict is None:
                    return pos
                drop = verdict
            end = pos + size
            if end > n:
                self._skip = end - n
                self._dropping = drop
                end = n
            if drop:
                cuts.append((pos, end, b""))
            pos = end
        return n

    def _performative(
        self,
        buf: bytes,
        pos: int,
        body: int,
        size: int,
        channel: int,
        cuts: list[tuple[int, int, bytes]],
    ) -> bool | None:
        """Classify the frame at `pos` by its performative: True to drop it (a session frame
        on a channel the peer ended), False to pass it (a renumbered transfer is added to
        `cuts`), None when not enough of it has arrived to tell."""
        n = len(buf)
        if n - body >= 3 and buf[body] == 0x00 and buf[body + 1] == 0x53:
            code = buf[body + 2]  # the smallulong descriptor every peer sends
        else:
            descriptor = self._descriptor(buf, body, pos + size)
            if descriptor is None:
                return None
            code = descriptor
        ended = self._ended
        if ended and channel in ended:
            if code == _BEGIN:
                ended.discard(channel)  # mapped again: tracked below
            elif code in _SESSION_LEVEL:
                log.debug(
                    "connection %d: ignoring a frame (performative %#04x) on channel "
                    "%d after the peer ended its session",
                    self.connection_id,
                    code,
                    channel,
                )
                return True
        elif code == _END:
            ended.add(channel)
            self._forget(channel)
        if code == _TRANSFER:  # followed only on a session with a request link
            requests = self._requests
            if not (requests and requests.get(channel)):
                return False
        elif code != _BEGIN and code != _ATTACH and code != _DETACH:
            return False
        try:
            replacement = self._track(code, buf, pos, body, size, channel)
        except (IndexError, ValueError, TypeError, struct.error, RecursionError):
            if pos + size > n:  # the performative has not all arrived yet
                return None
            replacement = None  # malformed: proton reports it properly
        if replacement is not None:
            new_header, perf_end = replacement
            cuts.append((pos, perf_end, new_header))
        return False

    def _forget(self, channel: int) -> None:
        self._next_id.pop(channel, None)
        self._requests.pop(channel, None)
        for key in [k for k in self._continuing if k[0] == channel]:
            del self._continuing[key]

    def _track(
        self, code: int, buf: bytes, pos: int, body: int, size: int, channel: int
    ) -> tuple[bytes, int] | None:
        """Follow begin/attach/detach/transfer on a channel; for a request transfer whose
        delivery-id is out of sequence return (new frame header + performative, end of the
        old performative). Raises IndexError when the performative is incomplete."""
        perf_end = _skip(buf, body)
        if perf_end > pos + size:
            raise ValueError("performative runs past its frame")
        perf = _decode(buf, body)[0]
        fields = perf.value if isinstance(perf, Described) and isinstance(perf.value, list) else []
        if code == _BEGIN:
            self._forget(channel)
            self._next_id[channel] = int(fields[1]) if len(fields) > 1 else None
            return None
        if code == _ATTACH:
            role = fields[2] if len(fields) > 2 else None
            target = fields[6] if len(fields) > 6 else None
            address = ""
            if isinstance(target, Described) and isinstance(target.value, list) and target.value:
                address = str(target.value[0] or "")
            if role is False and address.endswith(_REQUEST_NODES):
                if not self._requests.get(channel):
                    # transfers are followed only on sessions with a request link: the id is
                    # learnt again from the next transfer
                    self._next_id[channel] = None
                self._requests.setdefault(channel, set()).add(int(fields[1]))
            return None
        if code == _DETACH:
            handles = self._requests.get(channel)
            if handles and fields:
                handles.discard(int(fields[0]))
            return None
        # a transfer on a session that has a request link
        handle = int(fields[0])
        delivery_id = fields[1] if len(fields) > 1 else None
        more = bool(fields[5]) if len(fields) > 5 and fields[5] is not None else False
        expected = self._next_id.get(channel)
        key = (channel, handle)
        if key in self._continuing:  # a later frame of a multi-frame request
            wanted = self._continuing[key]
            if not more:
                del self._continuing[key]
            if delivery_id is None or delivery_id == wanted:
                return None
            return self._rewrite(buf, pos, body, perf_end, fields, wanted, channel)
        if delivery_id is None:
            return None
        if handle not in self._requests.get(channel, ()) or expected is None:
            self._next_id[channel] = (int(delivery_id) + 1) & 0xFFFFFFFF
            if more and handle in self._requests.get(channel, ()):
                # the id is learnt from this request: its later frames keep it [AMQP 2.6.14]
                self._continuing[key] = int(delivery_id)
            return None  # message links keep proton's own check
        self._next_id[channel] = (expected + 1) & 0xFFFFFFFF
        if more:
            self._continuing[key] = expected
        if delivery_id == expected:
            return None
        log.debug(
            "connection %d: request transfer on channel %d handle %d renumbered %s -> %d",
            self.connection_id,
            channel,
            handle,
            delivery_id,
            expected,
        )
        return self._rewrite(buf, pos, body, perf_end, fields, expected, channel)

    @staticmethod
    def _rewrite(
        buf: bytes, pos: int, body: int, perf_end: int, fields: list, new_id: int, channel: int
    ) -> tuple[bytes, int]:
        # re-encode the transfer's field list with the new delivery-id; every other field
        # keeps its original bytes
        at = body + (3 if buf[body + 1] == 0x53 else 10)  # smallulong / ulong descriptor
        c = buf[at]
        p = at + (3 if c == 0xC0 else 9 if c == 0xD0 else 1)
        raw: list[bytes] = []
        for _ in range(len(fields)):
            q = _skip(buf, p)
            raw.append(buf[p:q])
            p = q
        raw[1] = enc_uint(new_id)
        perf = b"\x00\x53\x14" + enc_list(raw)
        old_size = int.from_bytes(buf[pos : pos + 4], "big")
        new_size = old_size - (perf_end - pos) + 8 + len(perf)
        header = new_size.to_bytes(4, "big") + bytes((2, 0)) + channel.to_bytes(2, "big")
        return header + perf, perf_end

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


def _splice(buf: bytes, cuts: list[tuple[int, int, bytes]], limit: int) -> bytes:
    """`buf` up to `limit` with each [start, stop) of `cuts` replaced by its bytes (in order,
    not overlapping); `buf` itself when nothing is cut, so the common case copies nothing."""
    if not cuts:
        return buf if limit == len(buf) else buf[:limit]
    parts: list[bytes] = []
    at = 0
    for start, stop, new in cuts:
        parts.append(buf[at:start])
        if new:
            parts.append(new)
        at = stop
    parts.append(buf[at:limit])
    return b"".join(parts)
