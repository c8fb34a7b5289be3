"""The session filter's value must be the SessionId string [issue 23 item 5].

The Python SDK sends `session_id=1` as an AMQP int (pyamqp: "if its not a type that is known,
raise the error from the server"); the service refuses the attach with its "invalid filter
type" description, which the SDK's tests expect as a ServiceBusError. Engine pair, in memory."""

from __future__ import annotations

import uuid

import pytest
from amqp_harness import EnginePair
from proton import Described, Message, int32, symbol, ulong

SOURCE = "amqps://localhost:5671/queue.session"


def _attach(pair: EnginePair, value: object, name: str):
    rcv = pair.session.receiver(name)
    rcv.source.address = SOURCE
    rcv.target.address = f"receiver-link-{name}"
    rcv.source.filter.put_dict({symbol("com.microsoft:session-filter"): value})
    rcv.open()
    pair.pump()
    return rcv


@pytest.mark.parametrize(
    ("value", "dotnet"),
    [
        (int32(1), "System.Int32"),  # what `session_id=1` puts on the wire
        (1, "System.Int64"),
        (ulong(7), "System.UInt64"),
        (b"sess-a", "System.ArraySegment`1[System.Byte]"),
        (uuid.UUID(int=5), "System.Guid"),
        (
            Described(symbol("x"), "sess-a"),
            "Microsoft.ServiceBus.Messaging.Amqp.Encoding.DescribedType",
        ),
    ],
)
def test_non_string_session_filter_is_refused(spair, value, dotnet):
    rcv = _attach(spair, value, f"bad-{dotnet}")
    cond = rcv.remote_condition
    assert cond is not None and cond.name == "amqp:not-implemented"
    assert cond.description == (
        "The link contains invalid filter type. System only support Jms or Apache selector "
        f"filter type but we found type '{dotnet}' associated with key "
        "'com.microsoft:session-filter'."
    )
    assert rcv.remote_source.address is None  # refused: null source [contract 3.1]


@pytest.mark.parametrize("value", ["sess-a", symbol("sess-a"), None])
def test_string_symbol_or_null_session_filter_is_accepted(spair, value):
    snd = spair.sender("queue.session")
    spair.send(snd, Message(id="s-1", body=b"x", group_id="sess-a"))
    rcv = _attach(spair, value, f"ok-{value}")
    assert rcv.remote_condition is None
    data = rcv.remote_source.filter
    data.rewind()
    data.next()
    filt = {str(k): v for k, v in data.get_object().items()}
    assert filt["com.microsoft:session-filter"] == "sess-a"
