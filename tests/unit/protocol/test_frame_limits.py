"""The peer's max-frame-size holds for the padded frames the server writes [AMQP 2.7.1].

frames.FramePadder adds explicit nulls (and may widen the list header) after proton has framed
its output, and proton fills a large delivery's transfer frames up to the peer's limit: unless
proton frames for a limit lowered by the padding's headroom, every such frame came out a few
bytes over it, and a client that enforces its limit (proton-c, proton-j: "malformed frame",
framing-error) dropped the connection at the first transfer of a multi-frame delivery."""

from __future__ import annotations

import os

import pytest
from amqp_harness import BEGIN, OPEN, TRANSFER, EnginePair, frame_bytes, parse_frames
from proton import Message

from sbemu.protocol import codec
from sbemu.protocol.frames import PAD_HEADROOM
from sbemu.protocol.peeropen import MIN_MAX_FRAME, PeerOpenFilter


@pytest.mark.parametrize("max_frame", [512, 4096, 32_768])
def test_transfer_frames_stay_within_the_peers_max_frame_size(services, max_frame):
    pair = EnginePair(services, sasl="PLAIN")
    pair.transport.max_frame_size = max_frame
    pair.open()
    body = os.urandom(100_000)
    snd = pair.sender("queue.1")
    pair.send(snd, Message(body=body))
    rcv = pair.receiver("queue.1", credit=1)
    pair.pump()
    frames = [f for f in parse_frames(pair.s2c) if f.header is None]
    transfers = [f for f in frames if f.code == TRANSFER]
    assert len(transfers) > 1  # a multi-frame delivery, each frame filled up to the limit
    sizes = [8 + len(f.body) for f in frames]  # header (doff 2) + performative + payload
    assert max(sizes) <= max_frame, (
        f"frames over {max_frame}: {[s for s in sizes if s > max_frame]}"
    )
    if max_frame >= MIN_MAX_FRAME + PAD_HEADROOM:  # still padded [contract 0.1]
        assert all(len(t.fields or []) == 11 for t in transfers)
    else:  # proton cannot be told less than 512: full frames go out as proton wrote them
        assert any(len(t.fields or []) < 11 for t in transfers)
    assert pair.transport.condition is None and not pair.server.closed
    (got,) = pair.take(rcv)
    message = Message()
    message.decode(got[1])
    assert message.body == body


def test_the_open_is_rewritten_however_it_is_split_and_the_header_is_never_held():
    header = b"AMQP\x00\x01\x00\x00"
    open_frame = frame_bytes(OPEN, [codec.enc_string("c"), b"\x40", codec.enc_uint(32_768)])
    begin = frame_bytes(
        BEGIN, [b"\x40", codec.enc_uint(0), codec.enc_uint(100), codec.enc_uint(100)]
    )
    for step in (1, 3, 8, 1000):
        f = PeerOpenFilter()
        assert f.feed(header) == header  # a peer may wait for our header before its open
        stream = open_frame + begin
        out = b"".join(f.feed(stream[i : i + step]) for i in range(0, len(stream), step))
        assert f.done and f.peer_max_frame == 32_768
        first, second = parse_frames(out)
        assert first.code == OPEN and first.field(2) == 32_768 - PAD_HEADROOM
        assert first.field(0) == "c" and second.code == BEGIN and second.body == begin[8:]
    unlimited = PeerOpenFilter()
    plain = header + frame_bytes(OPEN, [codec.enc_string("c")])
    assert unlimited.feed(plain) == plain and unlimited.done and unlimited.peer_max_frame == 0
    other = PeerOpenFilter()
    assert other.feed(b"GET / HTTP") == b"GET / HTTP" and other.done  # proton answers that
    broken = PeerOpenFilter()
    broken.feed(header)
    bad = frame_bytes(OPEN, [codec.enc_string("c"), b"\x40", b"\x70\x00"])  # a cut-off uint
    assert broken.feed(bad) == bad and broken.done  # passed on: proton closes with its error
