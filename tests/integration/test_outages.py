"""Partition outages and full partition stores [SB partitioning P7, P8, P10, P18].

The operator takes one partition of a running server out of service with
``sbemu partition offline NAMESPACE/ENTITY N`` (or ``POST /partitions/<ns>/<entity>/<n>/offline``
on the admin port) and brings it back with ``online``. While it is out:

* key-less sends keep succeeding, on the other partitions (P8);
* sends pinned to it by a partition key fail with server-busy naming the partition (P7), which
  the SDK retries, so a send succeeds when the partition is back inside the retry window;
* its messages are neither delivered nor lost (P10) and come back with it;
* the entity is reported "Limited" instead of "Available" (P18).

A full partition store (``MaxSizeInMegabytes`` reached) refuses new messages with
quota-exceeded (amqp:resource-limit-exceeded) on a plain queue; on a partitioned queue key-less
sends fail over to partitions with room, and only a completely full entity refuses them.
Everything is observed through the public surface: the SDK, the CLI and the admin HTTP port.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import (
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
)
from integration_support import (
    NAMESPACE,
    PARTITIONS,
    body_text,
    drain,
    partition_of,
    queue_def,
    receive_n,
)

from sbemu.partitions.keys import partition_for_key

SBEMU_QUEUES = [
    queue_def("out-pq", partitioned=True),
    queue_def("out-retry", partitioned=True),
    queue_def("out-http", partitioned=True),
    queue_def("out-plain"),
    # 1 MB per partition store (P5; sizes below 1024 are allowed for tests).
    queue_def("full-pq", partitioned=True, MaxSizeInMegabytes=1),
    queue_def("full-q", MaxSizeInMegabytes=1),
    queue_def("bystander"),
]

OFFLINE_PID = 5
RETRY_PID = 9
HTTP_PID = 12


def key_for(pid: int, prefix: str = "key") -> str:
    """A partition key that hashes to partition ``pid`` of a 16-partition entity (P7)."""
    for i in range(100_000):
        key = f"{prefix}-{i}"
        if partition_for_key(key, PARTITIONS) == pid:
            return key
    raise AssertionError(f"no key for partition {pid}")


def admin_url(server: Any) -> str:
    return f"http://127.0.0.1:{server.admin_port}"


def cli(server: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``sbemu partition ...`` against the server's admin port."""
    return subprocess.run(
        [sys.executable, "-m", "sbemu", "partition", *args, "--admin-url", admin_url(server)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def cli_ok(server: Any, *args: str) -> Any:
    """The admin port's JSON answer (--json: without it, sbemu prints a table or a sentence)."""
    proc = cli(server, *args, "--json")
    assert proc.returncode == 0, f"sbemu partition {args}: rc={proc.returncode} {proc.stderr!r}"
    return json.loads(proc.stdout)


def http(server: Any, method: str, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        admin_url(server) + path,
        data=b"" if method == "POST" else None,
        method=method,
        headers=server.admin_headers() if method == "POST" else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def entity_status(server: Any, entity: str) -> dict[str, Any]:
    """The entry of GET /partitions for one entity."""
    status, body = http(server, "GET", "/partitions")
    assert status == 200, body
    for e in body["entities"]:
        if e["entity"].lower() == entity.lower():
            return e
    raise AssertionError(f"{entity} not in GET /partitions: {body}")


def partition_entry(status: dict[str, Any], pid: int) -> dict[str, Any]:
    return next(p for p in status["partitions"] if p["partition"] == pid)


def client_for(server: Any, **kwargs: Any) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(server.conn_str, **kwargs)


def receive_complete_all(
    client: ServiceBusClient,
    queue: str,
    *,
    expected: int = 0,
    max_wait: float = 1.0,
    timeout: float = 30.0,
) -> list:
    """Receive and complete everything that is receivable now. An empty receive ends it once
    ``expected`` messages came (a loaded machine may take longer than one ``max_wait`` to hand
    over the first ones; up to ``timeout`` s), so the callers' counts still catch a lost or an
    extra message."""
    got: list = []
    deadline = time.monotonic() + timeout
    with client.get_queue_receiver(queue, max_wait_time=max_wait, prefetch_count=50) as receiver:
        while True:
            batch = receiver.receive_messages(max_message_count=50, max_wait_time=max_wait)
            if not batch:
                if len(got) >= expected or time.monotonic() >= deadline:
                    break
                continue
            for m in batch:
                receiver.complete_message(m)
            got.extend(batch)
    return got


# ------------------------------------------------------------------------------- outages


def test_offline_partition_keyless_failover_pinned_busy_messages_wait(server):
    """P7, P8, P10, P18 driven through the CLI."""
    entity = "out-pq"
    key = key_for(OFFLINE_PID)
    with client_for(server, retry_total=0) as client:
        # Three messages on partition N before the outage.
        with client.get_queue_sender(entity) as sender:
            for i in range(3):
                sender.send_messages(ServiceBusMessage(f"before-{i}", partition_key=key))
        with client.get_queue_receiver(entity) as receiver:
            peeked = receiver.peek_messages(max_message_count=10)
        assert sorted(body_text(m) for m in peeked) == ["before-0", "before-1", "before-2"]
        assert {partition_of(m.sequence_number) for m in peeked} == {OFFLINE_PID}

        assert entity_status(server, entity)["status"] == "Available"
        out = cli_ok(server, "offline", f"{NAMESPACE}/{entity}", str(OFFLINE_PID))
        assert out["status"] == "Limited", out
        assert partition_entry(out, OFFLINE_PID)["online"] is False, out
        try:
            # P18: GET /partitions and `status` report the entity Limited, that partition down.
            st = entity_status(server, entity)
            assert st["status"] == "Limited", st
            assert partition_entry(st, OFFLINE_PID)["online"] is False
            assert all(p["online"] for p in st["partitions"] if p["partition"] != OFFLINE_PID), st
            status_out = cli_ok(server, "status")
            by_name = {e["entity"].lower(): e for e in status_out["entities"]}
            assert by_name[entity]["status"] == "Limited"
            assert by_name["out-plain"]["status"] == "Available"

            # P8: key-less sends keep succeeding, on the other partitions.
            n = 2 * PARTITIONS
            with client.get_queue_sender(entity) as sender:
                for i in range(n):
                    sender.send_messages(ServiceBusMessage(f"rr-{i}"))

                # P7: a send pinned to the offline partition fails with server-busy.
                with pytest.raises(ServiceBusServerBusyError) as info:
                    sender.send_messages(ServiceBusMessage("pinned", partition_key=key))
                assert f"Partition {OFFLINE_PID}" in str(info.value), str(info.value)
                # The sender link survives the refusal: key-less sends still go through.
                sender.send_messages(ServiceBusMessage("rr-after-busy"))

            # P10: the receiver sees every partition but N; N's messages wait.
            got = receive_complete_all(client, entity, expected=n + 1)
            bodies = sorted(body_text(m) for m in got)
            assert bodies == sorted([f"rr-{i}" for i in range(n)] + ["rr-after-busy"]), bodies
            parts = Counter(partition_of(m.sequence_number) for m in got)
            assert OFFLINE_PID not in parts, f"a message landed on the offline partition: {parts}"
            assert len(parts) == PARTITIONS - 1, f"round-robin skips only N: {parts}"
        finally:
            out = cli_ok(server, "online", f"{NAMESPACE}/{entity}", str(OFFLINE_PID))
        assert out["status"] == "Available", out
        assert partition_entry(out, OFFLINE_PID)["online"] is True
        assert entity_status(server, entity)["status"] == "Available"

        # Back online: the waiting messages are delivered (none was lost), in order.
        with client.get_queue_receiver(entity, max_wait_time=5) as receiver:
            back = receive_n(receiver, 3, timeout=15)
            for m in back:
                receiver.complete_message(m)
        assert [body_text(m) for m in back] == ["before-0", "before-1", "before-2"]
        assert {partition_of(m.sequence_number) for m in back} == {OFFLINE_PID}

        # The same key's send succeeds again and lands on N.
        with client.get_queue_sender(entity) as sender:
            sender.send_messages(ServiceBusMessage("pinned-after", partition_key=key))
        got = receive_complete_all(client, entity, expected=1)
        assert [body_text(m) for m in got] == ["pinned-after"]
        assert partition_of(got[0].sequence_number) == OFFLINE_PID


def test_sdk_default_retries_ride_out_a_short_outage(server):
    """P7 + P19: server-busy is retryable; a partition back inside the retry window lets the
    SDK's own retries (retry_total=3, backoff 0.8 s) deliver the pinned send."""
    entity = "out-retry"
    key = key_for(RETRY_PID, "retry")
    cli_ok(server, "offline", f"{NAMESPACE}/{entity}", str(RETRY_PID))
    errors: list[BaseException] = []

    def back_online() -> None:
        time.sleep(1.0)
        try:
            status, body = http(
                server, "POST", f"/partitions/{NAMESPACE}/{entity}/{RETRY_PID}/online"
            )
            assert status == 200, body
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    try:
        with client_for(server) as client:  # default retry policy
            with client.get_queue_sender(entity) as sender:
                sender.send_messages(ServiceBusMessage("warm-up"))  # link attached
                t = threading.Thread(target=back_online, daemon=True)
                t0 = time.monotonic()
                t.start()
                sender.send_messages(ServiceBusMessage("retried", partition_key=key))
                elapsed = time.monotonic() - t0
                t.join(10)
            assert not errors, errors
            assert elapsed >= 0.9, (
                f"the send cannot have succeeded before the partition was back ({elapsed:.2f}s)"
            )
            got = receive_complete_all(client, entity, expected=2)
    finally:
        http(server, "POST", f"/partitions/{NAMESPACE}/{entity}/{RETRY_PID}/online")
    by_body = {body_text(m): m for m in got}
    assert sorted(by_body) == ["retried", "warm-up"], sorted(by_body)
    assert partition_of(by_body["retried"].sequence_number) == RETRY_PID


def test_lock_held_across_an_outage(server):
    """A message locked on partition N when N goes offline: settling it fails with server-busy
    (retryable, not lock-lost) while N is out; once N is back the same lock completes it, and
    nothing is redelivered (P10: neither lost nor duplicated)."""
    entity = "out-http"
    pid = HTTP_PID
    key = key_for(pid, "lock")
    with client_for(server, retry_total=0) as client:
        with client.get_queue_sender(entity) as sender:
            sender.send_messages(ServiceBusMessage("locked", partition_key=key))
        with client.get_queue_receiver(entity, max_wait_time=3) as receiver:
            got = receive_n(receiver, 1, timeout=10)
            assert [body_text(m) for m in got] == ["locked"]
            assert partition_of(got[0].sequence_number) == pid
            status, body = http(server, "POST", f"/partitions/{NAMESPACE}/{entity}/{pid}/offline")
            assert status == 200, body
            try:
                with pytest.raises(ServiceBusServerBusyError):
                    receiver.complete_message(got[0])
            finally:
                status, body = http(
                    server, "POST", f"/partitions/{NAMESPACE}/{entity}/{pid}/online"
                )
            assert status == 200 and body["status"] == "Available", body
            receiver.complete_message(got[0])  # the lock (PT5S) is still valid
            assert receiver.receive_messages(max_message_count=5, max_wait_time=0.5) == []
        with client.get_queue_receiver(entity) as receiver:
            assert receiver.peek_messages(max_message_count=5) == []


def test_outage_over_http_admin_endpoints(server):
    """POST /partitions/<ns>/<entity>/<n>/offline|online and GET /partitions; /health keeps
    answering healthy while one partition of one entity is down."""
    entity = "out-http"
    status, body = http(server, "POST", f"/partitions/{NAMESPACE}/{entity}/{HTTP_PID}/offline")
    assert status == 200, body
    try:
        assert body["status"] == "Limited"
        assert partition_entry(body, HTTP_PID)["online"] is False
        assert entity_status(server, entity)["status"] == "Limited"
        # Other entities are untouched.
        assert entity_status(server, "out-pq")["status"] == "Available"
        status, health = http(server, "GET", "/health")
        assert status == 200 and health["status"] == "healthy", health
        with client_for(server, retry_total=0) as client:
            with client.get_queue_sender(entity) as sender:
                with pytest.raises(ServiceBusServerBusyError):
                    sender.send_messages(
                        ServiceBusMessage("x", partition_key=key_for(HTTP_PID, "http"))
                    )
            # A second offline is idempotent.
            status, body = http(
                server, "POST", f"/partitions/{NAMESPACE}/{entity}/{HTTP_PID}/offline"
            )
            assert status == 200 and body["status"] == "Limited", body
    finally:
        status, body = http(server, "POST", f"/partitions/{NAMESPACE}/{entity}/{HTTP_PID}/online")
    assert status == 200 and body["status"] == "Available", body
    assert all(p["online"] for p in body["partitions"])
    with client_for(server, retry_total=0) as client:
        with client.get_queue_sender(entity) as sender:
            sender.send_messages(ServiceBusMessage("y", partition_key=key_for(HTTP_PID, "http")))
        assert [body_text(m) for m in receive_complete_all(client, entity, expected=1)] == ["y"]


@pytest.mark.parametrize(
    "args",
    [
        ("offline", f"{NAMESPACE}/no-such-queue", "0"),
        ("online", f"{NAMESPACE}/no-such-queue", "0"),
        ("offline", "othernamespace/out-pq", "0"),
        ("offline", f"{NAMESPACE}/out-pq", str(PARTITIONS)),
        ("offline", f"{NAMESPACE}/out-pq", "99"),
        ("offline", f"{NAMESPACE}/out-plain", "1"),  # a plain queue has one partition: 0
        ("offline", f"{NAMESPACE}/out-pq"),  # partition number missing
        ("offline", "out-pq", "0"),  # namespace missing
    ],
    ids=[
        "unknown-entity",
        "unknown-entity-online",
        "unknown-namespace",
        "partition-16",
        "partition-99",
        "plain-partition-1",
        "missing-partition",
        "missing-namespace",
    ],
)
def test_cli_rejects_unknown_entity_or_partition(server, args):
    proc = cli(server, *args)
    assert proc.returncode != 0, f"{args}: rc=0, stdout={proc.stdout!r}"
    assert proc.stderr.strip(), "the failure is explained on stderr"
    # Nothing was taken offline by the refused command.
    for name in ("out-pq", "out-plain"):
        assert entity_status(server, name)["status"] == "Available"


def test_http_rejects_unknown_entity_or_partition(server):
    status, _ = http(server, "POST", f"/partitions/{NAMESPACE}/no-such-queue/0/offline")
    assert status == 404
    status, _ = http(server, "POST", f"/partitions/{NAMESPACE}/out-pq/{PARTITIONS}/offline")
    assert status == 404
    status, _ = http(server, "POST", f"/partitions/{NAMESPACE}/out-pq/0/sideways")
    assert status == 400
    assert entity_status(server, "out-pq")["status"] == "Available"


# ------------------------------------------------------------------------------- full stores

PAYLOAD = 200 * 1024  # bytes per message (Standard max message size is 256 KB)


def _fill(sender: Any, label: str, limit: int) -> tuple[int, BaseException | None]:
    """Send key-less PAYLOAD-sized messages until one fails; returns (count sent, error)."""
    body = b"x" * PAYLOAD
    for i in range(limit):
        try:
            sender.send_messages(ServiceBusMessage(body, message_id=f"{label}-{i}"))
        except (ServiceBusQuotaExceededError, ServiceBusServerBusyError) as exc:
            return i, exc
    return limit, None


def _condition(exc: BaseException) -> str:
    """The AMQP error condition behind an SDK exception (pyamqp's AMQPException)."""
    for candidate in (getattr(exc, "error", None), exc.__cause__, exc.__context__):
        cond = getattr(candidate, "condition", None)
        if cond is not None:
            return cond.decode() if isinstance(cond, bytes) else str(getattr(cond, "value", cond))
    return ""


class Bystander:
    """A sender and a receiver on an unrelated queue, open for the whole test."""

    def __init__(self, client: ServiceBusClient) -> None:
        self.sender = client.get_queue_sender("bystander")
        self.receiver = client.get_queue_receiver(
            "bystander", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, max_wait_time=5
        )

    def __enter__(self) -> Bystander:
        self.sender.__enter__()
        self.receiver.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.receiver.__exit__(*exc)
        self.sender.__exit__(*exc)

    def roundtrip(self, tag: str) -> None:
        self.sender.send_messages(ServiceBusMessage(tag))
        got = receive_n(self.receiver, 1, timeout=10)
        assert [body_text(m) for m in got] == [tag], "the bystander queue was not served"


def test_full_store_plain_and_partitioned(server):
    """Plain queue: quota-exceeded once its one store is full. Partitioned queue: key-less sends
    fail over to partitions with room (P8) until every partition is full, then quota-exceeded.
    Completing messages makes room again; other entities are served throughout."""
    with client_for(server, retry_total=0) as client, Bystander(client) as bystander:
        bystander.roundtrip("before")
        # -- plain queue, one 1 MB store
        with client.get_queue_sender("full-q") as sender:
            plain_count, error = _fill(sender, "plain", 200)
        assert isinstance(error, ServiceBusQuotaExceededError), repr(error)
        assert _condition(error) == "amqp:resource-limit-exceeded", (_condition(error), error)
        assert 1 <= plain_count <= 8, f"{plain_count} x 200 KB in a 1 MB store?"
        bystander.roundtrip("during-plain-full")

        # -- partitioned queue, 16 x 1 MB stores
        with client.get_queue_sender("full-pq") as sender:
            part_count, error = _fill(sender, "part", 16 * 10)
            assert isinstance(error, ServiceBusQuotaExceededError), repr(error)
            assert _condition(error) == "amqp:resource-limit-exceeded", _condition(error)
            assert part_count >= 8 * plain_count, (
                f"key-less sends must fail over to every partition: {part_count} fit in the "
                f"partitioned queue, {plain_count} in one store"
            )
            st = entity_status(server, "full-pq")
            assert st["status"] == "Limited", st
            assert not any(p["accepting"] for p in st["partitions"]), st
            # A pinned send to a full partition fails too (quota: every partition is full).
            with pytest.raises((ServiceBusQuotaExceededError, ServiceBusServerBusyError)):
                sender.send_messages(
                    ServiceBusMessage(b"y" * PAYLOAD, partition_key=key_for(3, "full"))
                )
            bystander.roundtrip("during-partitioned-full")

        # The plain queue is still full; receiving + completing frees room on both.
        with client.get_queue_receiver("full-q", max_wait_time=3) as receiver:
            got = receive_n(receiver, plain_count, timeout=20)
            assert len(got) == plain_count
            assert sorted(m.message_id for m in got) == sorted(
                f"plain-{i}" for i in range(plain_count)
            )
            for m in got:
                receiver.complete_message(m)
        with client.get_queue_sender("full-q") as sender:
            sender.send_messages(ServiceBusMessage(b"z" * PAYLOAD, message_id="plain-again"))

        got = receive_complete_all(client, "full-pq", expected=part_count)
        assert len(got) == part_count, f"received {len(got)} of {part_count} (none lost)"
        per_partition = Counter(partition_of(m.sequence_number) for m in got)
        assert set(per_partition) == set(range(PARTITIONS)), per_partition
        with client.get_queue_sender("full-pq") as sender:
            for i in range(PARTITIONS):
                sender.send_messages(ServiceBusMessage(b"z" * PAYLOAD, message_id=f"again-{i}"))
            sender.send_messages(
                ServiceBusMessage(b"z" * PAYLOAD, partition_key=key_for(3, "full"))
            )
        assert entity_status(server, "full-pq")["status"] == "Available"
        assert drain(client, "full-pq") == PARTITIONS + 1
        assert drain(client, "full-q") == 1
        bystander.roundtrip("after")
