"""Regression (found by `make crash-test --sigterm`): a SIGTERM while receivers held locks
released them after the commit pool had shut down, and the server logged a traceback."""

from __future__ import annotations

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from hardening.common import Server, make_config, queue_def


def test_sigterm_with_locked_messages_exits_cleanly(tmp_path):
    srv = Server(tmp_path, make_config([queue_def("shutq")])).start()
    try:
        client = ServiceBusClient.from_connection_string(srv.conn_str, retry_total=0)
        with client.get_queue_sender("shutq") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(20)])
        receiver = client.get_queue_receiver("shutq", prefetch_count=20)
        receiver.__enter__()
        got = []
        while len(got) < 20:
            got += receiver.receive_messages(max_message_count=20, max_wait_time=5)
        assert srv.stop() == 0  # locks still held by the open receiver
        assert srv.tracebacks() == [], srv.stderr()
    finally:
        srv.kill()
    srv.start()  # the locked messages are all there again
    try:
        with (
            ServiceBusClient.from_connection_string(srv.conn_str) as client,
            client.get_queue_receiver("shutq") as receiver,
        ):
            again = []
            while len(again) < 20:
                batch = receiver.receive_messages(max_message_count=20, max_wait_time=5)
                assert batch
                again += batch
            assert sorted(str(m) for m in again) == sorted(f"m{i}" for i in range(20))
    finally:
        srv.stop()
