"""Frames a client sends on a channel after ending its session are ignored, not fatal.

pyamqp (azure-servicebus) ends a closed receiver's session and then still sends the detach of
its `$management` links on that channel. proton would close the whole connection ("no such
channel"), killing every other link the client shares on it; Azure ignores such frames.
"""

from __future__ import annotations

import random
import time

from amqp_harness import (
    AMQP_HEADER,
    ATTACH,
    BEGIN,
    CLOSE,
    DETACH,
    END,
    FLOW,
    OPEN,
    TRANSFER,
    codec,
    frame_bytes,
    parse_frames,
)

from sbemu.protocol.channels import EndedChannelFilter
from sbemu.protocol.connection import AmqpConnection

OPEN_FRAME = frame_bytes(OPEN, [codec.enc_string("raw-client"), codec.enc_string("localhost")])


def begin(channel: int) -> bytes:
    return frame_bytes(
        BEGIN,
        [codec.enc_null(), codec.enc_uint(0), codec.enc_uint(1000), codec.enc_uint(1000)],
        channel=channel,
    )


def end(channel: int) -> bytes:
    return frame_bytes(END, [], channel=channel)


def detach(channel: int, handle: int) -> bytes:
    return frame_bytes(DETACH, [codec.enc_uint(handle), codec.enc_bool(True)], channel=channel)


def flow(channel: int) -> bytes:
    fields = [codec.enc_uint(0), codec.enc_uint(1000), codec.enc_uint(0), codec.enc_uint(1000)]
    return frame_bytes(FLOW, fields, channel=channel)


def _run(services, stream: bytes, chunk: int | None = None) -> tuple[AmqpConnection, list]:
    conn = AmqpConnection(services, time.time())
    out = bytearray()
    step = chunk or len(stream)
    for i in range(0, len(stream), step):
        conn.receive_data(stream[i : i + step], time.time())
        out += conn.data_to_send()
    return conn, parse_frames(bytes(out))


def _assert_same_in_pieces(stream: bytes, whole: bytes, *, seed: int, most_cuts: int) -> None:
    """Fed in 200 random splits of up to `most_cuts` cuts, a new filter gives `whole`."""
    rng = random.Random(seed)
    for _ in range(200):
        f = EndedChannelFilter()
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, most_cuts)))
        parts = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert b"".join(f.feed(p) for p in parts) == whole


AFTER_END = (
    AMQP_HEADER
    + OPEN_FRAME
    + begin(0)
    + begin(1)
    + end(1)
    + detach(1, 4)
    + flow(1)  # the peer's own session is over: ignored
    + begin(1)  # the channel is mapped again
    + flow(0)
)


SESSIONS = sorted([OPEN, BEGIN, BEGIN, END, BEGIN])  # no close


def test_frames_after_the_peers_end_are_ignored(services):
    conn, frames = _run(services, AFTER_END)
    assert sorted(f.code for f in frames if f.code in (OPEN, BEGIN, END, CLOSE)) == SESSIONS
    assert not [f for f in frames if f.code == CLOSE]
    assert not conn.closed


def test_byte_at_a_time_same_outcome(services):
    conn, frames = _run(services, AFTER_END, chunk=1)
    assert sorted(f.code for f in frames if f.code in (OPEN, BEGIN, END, CLOSE)) == SESSIONS
    assert not conn.closed


def test_close_on_an_ended_channel_still_closes(services):
    # rhea ends its sessions, then sends close on channel 0
    close = frame_bytes(CLOSE, [])
    conn, frames = _run(services, AMQP_HEADER + OPEN_FRAME + begin(0) + end(0) + close)
    assert [f.code for f in frames if f.code in (OPEN, BEGIN, END, CLOSE)] == [
        OPEN,
        BEGIN,
        END,
        CLOSE,
    ]
    assert frames[-1].field(0) is None  # a clean close, no error


def test_a_channel_never_begun_is_still_an_error(services):
    stray = frame_bytes(TRANSFER, [codec.enc_uint(0)], channel=3)
    conn, frames = _run(services, AMQP_HEADER + OPEN_FRAME + begin(0) + stray)
    closes = [f for f in frames if f.code == CLOSE]
    assert closes and str(closes[-1].field(0).value[0]) == "amqp:not-allowed"


def test_filter_is_chunking_independent():
    stream = AFTER_END + frame_bytes(TRANSFER, [codec.enc_uint(0)], payload=b"x" * 3000)
    whole = EndedChannelFilter().feed(stream)
    assert whole == AMQP_HEADER + OPEN_FRAME + begin(0) + begin(1) + end(1) + begin(1) + flow(0) + (
        frame_bytes(TRANSFER, [codec.enc_uint(0)], payload=b"x" * 3000)
    )
    _assert_same_in_pieces(stream, whole, seed=7, most_cuts=12)


def test_unchanged_stream_is_not_copied():
    stream = AMQP_HEADER + OPEN_FRAME + begin(0) + flow(0)
    assert EndedChannelFilter().feed(stream) is stream


# --- request links: delivery-ids renumbered into sequence (AutoLockRenewer's racing threads)


def attach(channel: int, handle: int, address: str, *, sender: bool = True) -> bytes:
    terminus = codec.enc_list([codec.enc_string(address)])
    return frame_bytes(
        ATTACH,
        [
            codec.enc_string(f"link-{handle}"),
            codec.enc_uint(handle),
            codec.enc_bool(not sender),  # role: false = sender
            codec.enc_null(),
            codec.enc_null(),
            codec.enc_described(0x28, terminus),
            codec.enc_described(0x29, terminus),
        ],
        channel=channel,
    )


def transfer(channel: int, handle: int, delivery_id: int, body: bytes = b"req") -> bytes:
    return frame_bytes(
        TRANSFER,
        [
            codec.enc_uint(handle),
            codec.enc_uint(delivery_id),
            codec.enc_binary(delivery_id.to_bytes(4, "big")),
            codec.enc_uint(0),
            codec.enc_bool(False),
        ],
        channel=channel,
        payload=codec.enc_described(0x77, codec.enc_binary(body)),
    )


def begin_at(channel: int, next_outgoing_id: int) -> bytes:
    return frame_bytes(
        BEGIN,
        [
            codec.enc_null(),
            codec.enc_uint(next_outgoing_id),
            codec.enc_uint(1000),
            codec.enc_uint(1000),
        ],
        channel=channel,
    )


def test_request_link_delivery_ids_renumbered_message_links_untouched():
    stream = (
        AMQP_HEADER
        + OPEN_FRAME
        + begin_at(1, 1)
        + attach(1, 3, "q")  # a message sender on the same session
        + attach(1, 4, "q/$management")
        + transfer(1, 4, 1)
        + transfer(1, 4, 2)
        + transfer(1, 4, 3, b"x" * 2000)
        + transfer(1, 4, 2)  # pyamqp's threads raced: the same id twice
        + transfer(1, 3, 5)  # in sequence after the renumbering
        + transfer(1, 3, 9)  # a message link out of sequence: left for proton to refuse
    )
    out = parse_frames(EndedChannelFilter().feed(stream))
    got = [(f.field(0), f.field(1), f.payload[-4:]) for f in out if f.code == TRANSFER]
    assert [(h, i) for h, i, _ in got] == [(4, 1), (4, 2), (4, 3), (4, 4), (3, 5), (3, 9)]
    assert got[2][2] == b"xxxx" and got[3][2].endswith(b"req")  # payloads intact


def test_renumbering_is_chunking_independent():
    stream = (
        AMQP_HEADER
        + OPEN_FRAME
        + begin_at(0, 0)
        + attach(0, 1, "$cbs")
        + transfer(0, 1, 0)
        + transfer(0, 1, 0)
        + transfer(0, 1, 7, b"y" * 500)
        + end(0)
        + detach(0, 1)
        + begin_at(0, 10)
        + attach(0, 2, "q/$management")
        + transfer(0, 2, 3)
    )
    whole = EndedChannelFilter().feed(stream)
    ids = [f.field(1) for f in parse_frames(whole) if f.code == TRANSFER]
    assert ids == [0, 1, 2, 3]  # a new request link: the next transfer gives the id again
    _assert_same_in_pieces(stream, whole, seed=11, most_cuts=15)
