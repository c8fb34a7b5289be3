"""`session_id=1` (an int) in the Python SDK [issue 23 item 5]: pyamqp puts it on the wire as
an AMQP int and leaves the refusal to the service; the SDK suite's test_sessions expects a
ServiceBusError, at once (amqp:not-implemented is not retried)."""

from __future__ import annotations

import time

import pytest
from azure.servicebus import ServiceBusClient
from azure.servicebus.exceptions import ServiceBusError
from integration_support import ServerProcess, queue_def

SBEMU_QUEUES = [queue_def("sf-sess", RequiresSession=True)]


def test_numeric_session_id_is_refused(server: ServerProcess) -> None:
    with ServiceBusClient.from_connection_string(server.conn_str) as client:  # default retries
        t0 = time.monotonic()
        with pytest.raises(ServiceBusError, match="invalid filter type") as info:
            with client.get_queue_receiver("sf-sess", session_id=1):  # type: ignore[arg-type]
                pass
        assert "System.Int32" in str(info.value)
        assert time.monotonic() - t0 < 10  # refused once, not retried
        # a string session id still works on the same client
        with client.get_queue_receiver("sf-sess", session_id="1", max_wait_time=1) as rx:
            assert rx.session.session_id == "1"
