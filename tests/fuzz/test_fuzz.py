"""Bounded protocol fuzzing over real sockets (the long run is `make fuzz`), and the cases the
fuzzer found, kept as regression tests."""

from __future__ import annotations

import os

import pytest
from hardening import amqpraw as raw
from hardening.common import Server
from hardening.fuzz import FUZZ_QUEUE, check_management, check_output, fuzz, fuzz_config, run_case
from proton import Message

from sbemu.protocol import codec

CASES = int(os.environ.get("SBEMU_FUZZ_CASES", "2000"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("fuzz"), fuzz_config()).start()
    yield srv
    srv.stop()


def test_bounded_fuzz_run(server):
    report = fuzz(server, CASES, seed=1515)
    print("\n".join(report.lines()))
    assert sum(report.cases.values()) >= CASES * 0.9
    assert report.findings == []
    assert report.probe_errors == [] and report.probe_rounds > 0
    assert report.tracebacks == []
    assert server.alive()
    # memory back to its baseline (allow allocator slack)
    assert report.rss_after_kb - report.rss_before_kb < 20 * 1024


# ------------------------------------------------------------------------------ regressions
def test_open_with_invalid_utf8_hostname_is_a_decode_error(server):
    """Found by fuzzing: proton decodes the host name lazily; invalid UTF-8 was an internal
    error with a traceback."""
    bad_open = raw.frame(raw.OPEN, [codec.enc_string("fuzz"), b"\xa1\x03\x08\xf3r"])
    out, eof = run_case(
        server.port, raw.SASL_HEADER + raw.sasl_plain() + raw.AMQP_HEADER + bad_open
    )
    frames = check_output(out, eof, "bad hostname")
    closes = [f for f in frames if f.code == raw.CLOSE]
    assert closes and closes[-1].error() == "amqp:decode-error"
    assert server.tracebacks() == []


@pytest.mark.parametrize(
    "node,operation,body",
    [
        (FUZZ_QUEUE, "com.microsoft:receive-by-sequence-number", {"sequence-numbers": [[1]]}),
        (FUZZ_QUEUE, "com.microsoft:peek-message", {"from-sequence-number": [1]}),
        (FUZZ_QUEUE, "com.microsoft:cancel-scheduled-message", {"sequence-numbers": "x"}),
        ("fuzzt", "com.microsoft:peek-message", {"from-sequence-number": 0}),
    ],
    ids=["receive-by-seq-list", "peek-list", "cancel-string", "peek-on-topic"],
)
def test_management_wrong_types_get_a_4xx(server, node, operation, body):
    """Found by fuzzing: wrong field types (and peek on a topic) were internal errors."""
    mgmt = f"{node}/$management"
    steps = [
        raw.handshake("plain")
        + raw.attach_frame("mr", 0, True, mgmt, reply_address="rep")
        + raw.flow_frame(0, 10)
        + raw.attach_frame("ms", 1, False, mgmt),
        raw.transfer_frame(
            1,
            0,
            Message(id=1, reply_to="rep", properties={"operation": operation}, body=body).encode(),
        ),
    ]
    out, eof = run_case(server.port, steps + [raw.close_frame()], step_wait=2.0)
    frames = check_output(out, eof, operation)
    replies = [f for f in frames if f.code == raw.TRANSFER]
    assert len(replies) == 1
    m = Message()
    m.decode(replies[0].payload)
    assert 400 <= m.properties["statusCode"] < 500, m.properties
    check_management(server.port, steps, 1)
    assert server.tracebacks() == []


@pytest.mark.parametrize("form", ["ulong", "symbolic"])
def test_a_batch_in_long_form_descriptors_is_split(server, form):
    """Issue 35 item 5: a batch whose messages are written with ulong (or symbolic) section
    descriptors was stored as one message; it is split into its 20 like the smallulong form."""
    from azure.servicebus import ServiceBusClient
    from hardening.fuzz import long_descriptor

    tag = f"lf-{form}"
    inner = [
        long_descriptor(0x73, form)
        + codec.enc_list([codec.enc_string(f"{tag}-{i}")])
        + long_descriptor(0x77, form)
        + codec.enc_string(f"body-{i}")
        for i in range(20)
    ]
    payload = b"".join(long_descriptor(0x75, form) + codec.enc_binary(m) for m in inner)
    out, eof = run_case(
        server.port,
        [
            raw.handshake("plain") + raw.attach_frame("s", 0, False, FUZZ_QUEUE),
            raw.transfer_frame(0, 0, payload),
            raw.detach_frame(0) + raw.close_frame(),
        ],
    )
    frames = check_output(out, eof, "long-form batch")
    dispositions = [f for f in frames if f.code == raw.DISPOSITION]
    assert dispositions and dispositions[-1].fields[4].descriptor == 0x24  # accepted
    with ServiceBusClient.from_connection_string(server.conn_str) as sb:
        with sb.get_queue_receiver(FUZZ_QUEUE) as receiver:
            ids = []
            seq = 0
            while batch := receiver.peek_messages(max_message_count=250, sequence_number=seq):
                ids += [m.message_id for m in batch if (m.message_id or "").startswith(tag)]
                seq = batch[-1].sequence_number + 1
    assert sorted(ids) == sorted(f"{tag}-{i}" for i in range(20))
    assert server.tracebacks() == []
