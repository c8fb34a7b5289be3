"""A real Spark standalone cluster: master + two workers from the installed pyspark.

Follows docs/spark.md's cluster section literally: export the live server's logs to segments on
storage every JVM sees (here: one loopback machine, so a directory), zip sparkjobs/, and
spark-submit sparkjobs/submit.py with --master spark://127.0.0.1:<port> --py-files. The tables
must equal those of a local run over the same segments (and the exact reference). Select with
``-m cluster``; part of ``make test``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from spark_traffic import all_records, reference_tables, spark_tables
from test_spark_server import Server, receive

from sbemu.logs import reader as logreader
from sbemu.logs.export import export_logs

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # spark-class / spark-submit of the installed pyspark


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One spark-class process in its own process group, its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.log_path = logs / f"{name}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(BIN / "spark-class"), *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log_path.read_text():
            assert self.proc.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, f"no {text!r}: {self.log_path.read_text()}"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:<port> with two workers (1 core, 1 GB, own work dirs); stopped after."""
    from sparkjobs.launch import spark_missing_reason

    reason = spark_missing_reason()
    if reason:
        pytest.skip(f"the cluster test needs pyspark and java: {reason}")
    base = tmp_path_factory.mktemp("cluster")
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(base),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_NO_DAEMONIZE="1",
    )
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    daemons = []
    try:
        master = Daemon(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(free_port()),
            ],
            env,
            base,
        )
        daemons.append(master)
        master.wait_for("I have been elected leader")
        for i in (1, 2):
            work = base / f"worker-{i}"
            work.mkdir()
            worker = Daemon(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--work-dir",
                    str(work),
                    "--webui-port",
                    str(free_port()),
                    url,
                ],
                env,
                base,
            )
            daemons.append(worker)
        for worker in daemons[1:]:
            worker.wait_for("Successfully registered with master")
        yield url, env, base
    finally:
        for d in reversed(daemons):
            d.stop()


def test_standalone_cluster_tables_equal_a_local_run(cluster, spark, tmp_path):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from sparkjobs import report

    url, env, base = cluster
    data, shared = str(tmp_path / "data"), tmp_path / "shared"
    seg, out_cluster = str(shared / "sbemu-segments"), str(shared / "sbemu-reports")
    out_local = str(tmp_path / "reports-local")
    server = Server(data, str(tmp_path / "server.log"))
    try:
        with ServiceBusClient.from_connection_string(server.conn, retry_total=1) as client:
            with client.get_queue_sender("queue.partitioned") as s:
                s.send_messages(
                    [
                        ServiceBusMessage(f"p{i}", session_id=None, partition_key=f"k{i % 5}")
                        for i in range(40)
                    ]
                )
            with client.get_queue_receiver("queue.partitioned", prefetch_count=0) as r:
                msgs = receive(r, 40)
                for m in msgs[:30]:
                    r.complete_message(m)
                for m in msgs[30:]:
                    r.dead_letter_message(m, reason="cluster-test")
            with client.get_topic_sender("topic.1") as s:
                s.send_messages([ServiceBusMessage("t") for _ in range(10)])
        # docs/spark.md, cluster section: export beside the broker into shared storage (live server)
        stats = export_logs(data, seg, segment_records=25)
        assert stats.records > 0
        records = all_records(data)
        layout = logreader.read_layout(data)
    finally:
        server.stop()
        logreader.close_all()

    # docs/spark.md: python -m zipfile -c sparkjobs.zip sparkjobs/ ; spark-submit ... --py-files
    zipped = tmp_path / "sparkjobs.zip"
    subprocess.run(
        [sys.executable, "-m", "zipfile", "-c", str(zipped), "sparkjobs/"], cwd=ROOT, check=True
    )
    submit = subprocess.run(
        [
            str(BIN / "spark-submit"),
            "--master",
            url,
            "--py-files",
            str(zipped),
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "--conf",
            "spark.sql.session.timeZone=UTC",
            "--executor-memory",
            "512m",
            "--total-executor-cores",
            "2",
            "sparkjobs/submit.py",
            "--segments",
            seg,
            "--out",
            out_cluster,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert submit.returncode == 0, submit.stdout + submit.stderr[-5000:]
    assert (Path(out_cluster) / "_state" / "totals.json").exists()

    local = report.run(spark, source="segments", path=seg, out=out_local)
    assert local.total_events == len(records)
    cluster_tables = spark_tables(spark, out_cluster)
    assert cluster_tables == spark_tables(spark, out_local)
    assert cluster_tables == reference_tables(records, layout)
    for i in (1, 2):  # an executor of this application ran on each worker
        assert list((base / f"worker-{i}").glob("app-*/*")), f"worker {i} ran no executor"
