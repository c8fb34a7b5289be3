"""/metrics counts bytes beside messages: a real server, the SDK sending and receiving, scrapes.

``sbemu_incoming_bytes_total`` adds the size of each message a committed send accepted (the same
size the ``sbemu_size_bytes`` gauge sums over the stored messages), and
``sbemu_outgoing_bytes_total`` the size of each message delivered, per partition."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest
from integration_support import drain, queue_def, send_plain

pytest.importorskip("azure.servicebus")
from azure.servicebus import ServiceBusMessage  # noqa: E402

SBEMU_QUEUES = [queue_def("bytesq", partitioned=True), queue_def("quietq")]
WAIT = 15.0  # seconds for the dashboard's snapshot (at most ~1 s old) to show a send
BODIES = [b"x" * 10, b"y" * 1000, b"z" * 50_000, b"w" * 3]


def scrape(server: Any) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=10) as r:
        return r.read().decode()


def entity_sum(text: str, family: str, entity: str) -> int:
    """A family's samples of one entity, summed over its partitions."""
    prefix = f'{family}{{namespace="sbemulatorns",entity="{entity}",'
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def test_bytes_in_are_the_stored_sizes_and_bytes_out_the_delivered(server: Any, sb_client: Any):
    send_plain(sb_client, "bytesq", [ServiceBusMessage(body) for body in BODIES])
    text = scrape(server)
    assert "# TYPE sbemu_incoming_bytes_total counter" in text
    assert "# TYPE sbemu_outgoing_bytes_total counter" in text
    assert entity_sum(text, "sbemu_incoming_messages_total", "bytesq") == len(BODIES)
    incoming = entity_sum(text, "sbemu_incoming_bytes_total", "bytesq")
    # each message is its body and the AMQP sections around it
    assert sum(map(len, BODIES)) < incoming < sum(map(len, BODIES)) + 1024 * len(BODIES)
    assert entity_sum(text, "sbemu_outgoing_bytes_total", "bytesq") == 0
    assert entity_sum(text, "sbemu_incoming_bytes_total", "quietq") == 0
    # the counter adds the sizes the Size gauge sums over the stored messages (the gauge comes
    # from the dashboard's snapshot, refreshed at most once a second: look again until it has)
    deadline = time.monotonic() + WAIT
    while entity_sum(scrape(server), "sbemu_size_bytes", "bytesq") != incoming:
        assert time.monotonic() < deadline, scrape(server)
        time.sleep(0.2)  # the snapshot's age, not an event: nothing to wait on but a scrape

    assert drain(sb_client, "bytesq") == len(BODIES)
    text = scrape(server)
    assert entity_sum(text, "sbemu_outgoing_messages_total", "bytesq") == len(BODIES)
    assert entity_sum(text, "sbemu_outgoing_bytes_total", "bytesq") == incoming
    assert entity_sum(text, "sbemu_incoming_bytes_total", "bytesq") == incoming
