"""The whole way: azure-servicebus SDK -> `python -m sbemu serve` -> partition logs -> Spark.

The job reads the logs while the server keeps them open and keeps writing (another process),
which is how `sbemu report` is used.
"""

from __future__ import annotations

import threading
import time

from spark_traffic import all_records, reference_tables, spark_tables

from sbemu.logs import reader as logreader
from sbemu.logs.export import export_logs
from sbemu.testing import SbemuProcess

NS = "sbemulatorns"


class Server(SbemuProcess):
    def __init__(self, data_dir: str, log_path: str, *extra: str) -> None:
        # --keep-logs: these tests rebuild their reference from the whole log after the
        # report ran, so the server must not trim below the report's registered offsets.
        super().__init__(
            data_dir=data_dir, log_level="info", stderr=log_path, args=["--keep-logs", *extra]
        )
        self.conn = self.start(30).connection_string


def receive(receiver, n: int, timeout: float = 20.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += receiver.receive_messages(max_message_count=n - len(got), max_wait_time=2)
    assert len(got) == n
    return got


def test_sdk_traffic_to_reporting_tables(spark, tmp_path):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from sparkjobs import report

    data, out = str(tmp_path / "data"), str(tmp_path / "reports")
    server = Server(data, str(tmp_path / "server.log"))
    try:
        with ServiceBusClient.from_connection_string(server.conn, retry_total=1) as client:
            with client.get_queue_sender("queue.1") as s:
                s.send_messages(
                    [ServiceBusMessage(f"body {i}", message_id=f"q1-{i}") for i in range(10)]
                )
            with client.get_queue_receiver("queue.1", prefetch_count=0) as r:
                msgs = receive(r, 10)
                for m in msgs[:5]:
                    r.complete_message(m)
                for m in msgs[5:7]:
                    r.abandon_message(m)
                for m in msgs[7:]:
                    r.dead_letter_message(m, reason="bad", error_description="test")
            with client.get_queue_sender("queue.partitioned") as s:
                s.send_messages(
                    [ServiceBusMessage(f"p{i}", partition_key="pk-1") for i in range(6)]
                )
            with client.get_queue_receiver("queue.partitioned", prefetch_count=0) as r:
                for m in receive(r, 6):
                    r.complete_message(m)

            # Keep sending to topic.1 while the first run reads the logs.
            stop = threading.Event()
            sent = []

            errors: list[BaseException] = []

            def keep_sending() -> None:
                try:
                    with client.get_topic_sender("topic.1") as s:
                        while not stop.is_set() and len(sent) < 400:
                            s.send_messages([ServiceBusMessage("t") for _ in range(5)])
                            sent.append(5)
                            stop.wait(0.02)
                except BaseException as exc:  # reported by the main thread
                    errors.append(exc)

            sender = threading.Thread(target=keep_sending)
            sender.start()
            try:
                deadline = time.monotonic() + 30
                while not sent:
                    assert not errors and time.monotonic() < deadline, errors
                    time.sleep(0.05)
                first = report.run(spark, source="lmdb", path=data, out=out)
            finally:
                stop.set()
                sender.join(60)
            assert not errors, errors
        second = report.run(spark, source="lmdb", path=data, out=out)

        records = all_records(data)  # the server is still up, holding its write handles
        assert second.total_events == len(records) == first.total_events + second.new_events
        assert first.new_events > 0 and second.new_events > 0
        assert spark_tables(spark, out) == reference_tables(records, logreader.read_layout(data))

        rows = {r["entity"]: r for r in second.summary}
        assert (
            rows["queue.1"]["enqueued"],
            rows["queue.1"]["completed"],
            rows["queue.1"]["abandoned"],
            rows["queue.1"]["deadlettered"],
        ) == (10, 5, 2, 3)
        assert rows["queue.1"]["delivered"] >= 10
        reasons = {
            (r.entity, r.reason): r["count"]
            for r in report.read_table(spark, out, "deadletter_reasons").collect()
        }
        assert reasons == {("queue.1", "bad"): 3}
        skew = {r.entity: r for r in report.read_table(spark, out, "partition_skew").collect()}
        assert skew["queue.partitioned"].partitions == 16  # from entity.json
        assert (
            skew["queue.partitioned"].messages == skew["queue.partitioned"].max_per_partition == 6
        )
        assert sorted(skew["queue.partitioned"].messages_per_partition)[-2:] == [0, 6]
        assert rows["queue.partitioned"]["completed"] == 6
        topic_sent = sum(sent)
        assert skew["topic.1"].messages == topic_sent
        assert rows["topic.1"]["enqueued"] % topic_sent == 0  # one copy per subscription
    finally:
        server.stop()
        logreader.close_all()


def test_follow_mode_picks_up_new_traffic(spark, tmp_path):
    """--follow: a processing-time trigger; tables are rebuilt after batches with events."""
    from spark_traffic import NS as TNS
    from spark_traffic import Entity, message
    from sparkjobs import report

    data, out = str(tmp_path / "data"), str(tmp_path / "reports")
    q = Entity(data, TNS, "q")
    q.send(0, [message("m0"), message("m1")], 1000)
    batches: list[int] = []
    stop = threading.Event()
    result: list = []
    job = threading.Thread(
        target=lambda: result.append(
            report.run(
                spark,
                source="lmdb",
                path=data,
                out=out,
                follow=True,
                interval_seconds=0.5,
                should_stop=stop.is_set,
                on_batch=lambda batch_id, rows: batches.append(rows),
            )
        )
    )
    job.start()
    try:
        deadline = time.monotonic() + 60
        while sum(batches) < 2:
            assert time.monotonic() < deadline and job.is_alive()
            time.sleep(0.1)
        q.send(0, [message("m2")], 2000)  # the writer stays open: Spark reads in other processes
        while sum(batches) < 3:
            assert time.monotonic() < deadline and job.is_alive()
            time.sleep(0.1)
    finally:
        stop.set()
        job.join(60)
        q.close()
    assert not job.is_alive()
    assert result[0].total_events == 3 and result[0].new_events == 3
    traffic = report.read_table(spark, out, "traffic_by_minute").collect()
    assert sum(r.enqueued for r in traffic) == 3


def test_application_properties_and_bodies_reach_the_event_stream(spark, tmp_path):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from sparkjobs.source import segments_batch

    data = str(tmp_path / "data")
    server = Server(data, str(tmp_path / "server.log"), "--log-bodies")
    try:
        with ServiceBusClient.from_connection_string(server.conn, retry_total=1) as client:
            with client.get_queue_sender("queue.1") as s:
                s.send_messages(
                    [
                        ServiceBusMessage(
                            b"payload-1",
                            message_id="p1",
                            application_properties={"color": "red", "n": 42, "ok": True, "x": 1.5},
                        ),
                        ServiceBusMessage("plain", message_id="p2"),
                    ]
                )
            with client.get_queue_receiver("queue.1", prefetch_count=0) as r:
                for m in receive(r, 2):
                    r.complete_message(m)
    finally:
        server.stop()
    rows = (
        spark.read.format("sbemu").option("path", data).load().where("entity = 'queue.1'").collect()
    )
    by = {(r.message_id, r.event): r for r in rows}
    want = {"color": "red", "n": "42", "ok": "true", "x": "1.5"}
    for event in ("enqueued", "delivered", "completed"):
        assert by[("p1", event)].properties == want
        assert by[("p1", event)].body == b"payload-1"
        assert not by[("p2", event)].properties
        assert by[("p2", event)].body == b"plain"
    # the same through exported segments
    export_logs(data, str(tmp_path / "seg"))
    seg = segments_batch(spark, str(tmp_path / "seg")).where("entity = 'queue.1'").collect()
    sby = {(r.message_id, r.event): r for r in seg}
    assert sby[("p1", "completed")].properties == want
    assert sby[("p1", "completed")].body == b"payload-1"
    logreader.close_all()


def test_bodies_are_not_logged_by_default(tmp_path):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    data = str(tmp_path / "data")
    server = Server(data, str(tmp_path / "server.log"))
    try:
        with ServiceBusClient.from_connection_string(server.conn, retry_total=1) as client:
            with client.get_queue_sender("queue.1") as s:
                s.send_messages(ServiceBusMessage(b"secret", application_properties={"k": "v"}))
    finally:
        server.stop()
    recs = [r for r in all_records(data) if r["entity"] == "queue.1"]
    assert recs and all(r.get("body") is None for r in recs)
    assert all(r["properties"] is not None for r in recs)
    logreader.close_all()
