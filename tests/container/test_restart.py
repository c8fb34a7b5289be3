"""A container killed with SIGKILL and started again on the same data volume has every message
whose send was acknowledged, and a new container on that volume serves them too (sbemu
acknowledges a send only after its LMDB commit; the image keeps /data on the volume)."""

from __future__ import annotations

import uuid

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from container_support import podman, remove, run_sbemu, start_again, wait_healthy

COUNT = 300


def receive(connection_string: str, queue: str, limit: int = COUNT * 2) -> list[str]:
    """Receive and complete up to ``limit`` messages (until the queue stays empty for 5 s)."""
    bodies: list[str] = []
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
            while len(bodies) < limit:
                want = min(100, limit - len(bodies))
                batch = receiver.receive_messages(max_message_count=want, max_wait_time=5)
                if not batch:
                    break
                for message in batch:
                    bodies.append(str(message))
                    receiver.complete_message(message)
    return bodies


def test_kill_9_then_start_again_on_the_same_volume_loses_nothing(sbemu_image: str) -> None:
    volume = f"sbemu-test-{uuid.uuid4().hex[:8]}"
    podman("volume", "create", volume)
    containers = []
    try:
        first = run_sbemu(sbemu_image, volumes=[f"{volume}:/data"])
        containers.append(first)
        wait_healthy(first)
        sent = [f"message {i} {uuid.uuid4()}" for i in range(COUNT)]
        with ServiceBusClient.from_connection_string(first.connection_string()) as client:
            with client.get_queue_sender("queue.1") as sender:
                sender.send_messages([ServiceBusMessage(b) for b in sent[: COUNT // 2]])
                for body in sent[COUNT // 2 :]:  # batches, then single sends: all acknowledged
                    sender.send_messages(ServiceBusMessage(body))
        podman("kill", "--signal", "KILL", first.cid)
        assert podman("wait", first.cid).strip() == "137"  # 128 + SIGKILL

        again = start_again(first)  # the same container on the same volume
        wait_healthy(again)
        part = receive(again.connection_string(), "queue.1", limit=COUNT // 3)
        assert len(part) == COUNT // 3 and set(part) <= set(sent)
        remove(again)

        new = run_sbemu(sbemu_image, volumes=[f"{volume}:/data"])  # a new container on it
        containers.append(new)
        wait_healthy(new)
        rest = receive(new.connection_string(), "queue.1")
        assert sorted(part + rest) == sorted(sent)
    finally:
        for running in containers:
            remove(running)
        podman("volume", "rm", "-f", volume, check=False)
