#!/usr/bin/env python
"""sbemu vs RabbitMQ with the same client: ``make bench-compare`` (``bench/compare.py``).

Starts Debian's RabbitMQ (3.10, AMQP 1.0 plugin) with its own data, log and config directory
on free loopback ports (AMQP, Erlang distribution, its own epmd port: nothing clashes with a
system RabbitMQ), declares a durable classic queue, and starts sbemu (``python -m sbemu serve``,
temporary data directory) with a plain queue ``bench`` and a partitioned queue ``benchp``. Then
for ``--rounds`` rounds, alternating the brokers, the rhea client (``bench/node/rhea-bench.js``)
sends ``--count`` durable messages of ``--size`` bytes with at most ``--credit`` unsettled, and
receives them with credit ``--credit`` and auto-accept (peek-lock + complete). Prints every
round, then the medians and the ratios sbemu/RabbitMQ (plain and partitioned queue, each against
the same RabbitMQ queue). Then, again in alternating rounds, the send-to-receive latency (p50,
p99) of each at a fixed offered rate of ``--latency-rate`` msg/s, and of an in-memory forwarder
(``bench/node/forwarder.js``: no storage, accepts and hands on at once) that shows what the client
and the machine cost by themselves: the floor no broker gets under here. Prints the medians.
Everything it started is stopped on the way out. Exit 1 if a phase fails (lost, refused or
duplicated messages).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import Server as SbemuServer  # noqa: E402  (bench/bench.py, next to this file)

NODE_DIR = HERE / "node"
CLIENT = NODE_DIR / "rhea-bench.js"
FORWARDER = NODE_DIR / "forwarder.js"
RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
# Apache ActiveMQ Artemis from its binary distribution on Maven Central (`make bench-artemis`
# downloads it, checks the SHA-256 pinned in the Makefile and unpacks it here).
ARTEMIS_HOME = HERE / "artemis" / "apache-artemis"
ARTEMIS_QUEUE = "bench"
RABBIT_QUEUE = "bench"
SBEMU_USER, SBEMU_PASSWORD = "RootManageSharedAccessKey", "SAS_KEY_VALUE"
FLOOR = "floor (forwarder)"
MACHINE = "machine (fixed CPU work)"
START_TIMEOUT = 90.0
PHASE_TIMEOUT = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_cpu_seconds(root: int) -> float:
    """CPU time (user + system) so far of `root` and every process below it: a broker's own
    cost, whatever it forks (RabbitMQ's beam.smp and epmd, Artemis's JVM under its script)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(child for child, up in parent.items() if up == pid)
    return total


class Rabbit:
    """A private RabbitMQ node: own HOME (cookie), mnesia, logs, config, ports and epmd."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.node = f"sbemubench{os.getpid()}@localhost"
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = dict(os.environ)
        conf = workdir / "rabbitmq.conf"
        conf.write_text(
            "loopback_users = none\n"
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            "log.console = false\nlog.file.level = warning\n"
        )
        plugins = workdir / "enabled_plugins"
        plugins.write_text("[rabbitmq_amqp1_0].\n")
        env_conf = workdir / "rabbitmq-env.conf"
        env_conf.write_text("")
        self.env.update(
            HOME=str(workdir),  # .erlang.cookie lives here
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
            RABBITMQ_MNESIA_BASE=str(workdir / "mnesia"),
            RABBITMQ_LOG_BASE=str(workdir / "log"),
            RABBITMQ_CONFIG_FILE=str(conf),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(workdir / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(env_conf),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(plugins),
            RABBITMQ_PLUGINS_EXPAND_DIR=str(workdir / "plugins-expand"),
            RABBITMQ_PID_FILE=str(workdir / "rabbit.pid"),
        )

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        out = subprocess.run(
            [str(RABBIT_BIN / "rabbitmqctl"), "-n", self.node, *args],
            env=self.env, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {out.stderr or out.stdout}")
        return out.stdout

    def start(self) -> None:
        log = open(self.dir / "server.out", "wb")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [str(RABBIT_BIN / "rabbitmq-server")],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"compare: RabbitMQ exited:\n{self._tail()}")
            try:
                self.ctl("await_startup", timeout=30)
                break
            except (RuntimeError, subprocess.TimeoutExpired):
                if time.monotonic() > deadline:
                    raise SystemExit(f"compare: RabbitMQ did not start:\n{self._tail()}") from None
                time.sleep(1)
        # A durable classic queue, declared the way an operator would before the test.
        self.ctl(
            "eval",
            'rabbit_amqqueue:declare(rabbit_misc:r(<<"/">>, queue, '
            f'<<"{RABBIT_QUEUE}">>), true, false, [], none, <<"bench">>).',
        )

    def _tail(self) -> str:
        text = ""
        for p in [self.dir / "server.out", *sorted((self.dir / "log").glob("*.log"))]:
            if p.exists():
                text += p.read_text(errors="replace")[-2000:]
        return text

    @property
    def pid(self) -> int | None:
        """The process it started (the broker's CPU is that process's tree)."""
        return self.proc.pid if self.proc is not None else None

    def purge(self) -> None:
        self.ctl("purge_queue", RABBIT_QUEUE)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.ctl("stop", timeout=60)
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # The epmd that the node started on our private port.
        subprocess.run(
            ["epmd", "-port", str(self.epmd_port), "-kill"],
            env=self.env, capture_output=True, timeout=10, check=False,
        )  # fmt: skip


class Artemis:
    """A private ActiveMQ Artemis instance (``artemis create`` in ``workdir``), its AMQP
    acceptor on a free loopback port, the other protocols off, no web console, one anycast
    durable queue. Persistence is on and the journal syncs as shipped (``artemis create``
    picks the journal type the machine supports and auto-tunes its buffer timeout)."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.port = free_port()
        self.core_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.journal: re.Match[str] | None = None
        self.env = dict(os.environ, ARTEMIS_INSTANCE=str(workdir / "instance"))

    def create(self) -> None:
        out = subprocess.run(
            [str(ARTEMIS_HOME / "bin" / "artemis"), "create", "--silent", "--no-web",
             "--allow-anonymous", "--user", "bench", "--password", "bench",
             "--host", "127.0.0.1", "--no-hornetq-acceptor", "--no-mqtt-acceptor",
             "--no-stomp-acceptor", f"--queues={ARTEMIS_QUEUE}:anycast",
             str(self.dir / "instance")],
            capture_output=True, text=True, timeout=START_TIMEOUT, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise SystemExit(f"compare: artemis create failed:\n{out.stdout}{out.stderr}")
        broker_xml = self.dir / "instance" / "etc" / "broker.xml"
        xml = broker_xml.read_text()
        # The two acceptors `artemis create` writes listen on 61616 (all protocols) and 5672
        # (AMQP): move both to free ports so nothing clashes with sbemu or a system broker.
        for default, port in (("127.0.0.1:61616", self.core_port), ("127.0.0.1:5672", self.port)):
            if default not in xml:
                raise SystemExit(f"compare: artemis broker.xml has no acceptor on {default}")
            xml = xml.replace(default, f"127.0.0.1:{port}")
        broker_xml.write_text(xml)
        self.journal = re.search(r"<journal-type>(\w+)</journal-type>", xml)

    def start(self) -> None:
        self.create()
        log = open(self.dir / "server.out", "wb")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [str(self.dir / "instance" / "bin" / "artemis"), "run"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"compare: Artemis exited:\n{self._tail()}")
            # AMQ221007: "Server is now active" once every acceptor is up.
            if "AMQ221007" in self._tail():
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"compare: Artemis did not start:\n{self._tail()}")
            time.sleep(0.5)

    def _tail(self) -> str:
        out = self.dir / "server.out"
        return out.read_text(errors="replace")[-4000:] if out.exists() else ""

    def describe(self) -> str:
        return f"journal {self.journal.group(1) if self.journal else '?'}"

    @property
    def pid(self) -> int | None:
        """The process it started (the broker's CPU is that process's tree)."""
        return self.proc.pid if self.proc is not None else None

    def purge(self) -> None:
        """Drop leftovers of a failed phase (the artemis CLI's queue purge, over the core port)."""
        subprocess.run(
            [str(self.dir / "instance" / "bin" / "artemis"), "queue", "purge",
             "--name", ARTEMIS_QUEUE, "--url", f"tcp://127.0.0.1:{self.core_port}",
             "--user", "bench", "--password", "bench", "--silent"],
            env=self.env, capture_output=True, timeout=120, check=False,
        )  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def run_client(args_: list[str], tail: int) -> dict:
    """One rhea-bench.js phase: its JSON line, or {"error": ...} with the end of its output."""
    out = subprocess.run(
        ["node", str(CLIENT), *args_], capture_output=True, text=True, timeout=PHASE_TIMEOUT,
        check=False,
    )  # fmt: skip
    try:
        result: dict = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"ok": 0, "rate": 0.0, "error": (out.stderr or out.stdout)[-tail:] or "no output"}
    return result


def phase(
    kind: str,
    port: int,
    address: str,
    args: argparse.Namespace,
    auth: tuple[str, str],
    broker_pid: int | None = None,
) -> dict:
    """One throughput phase. With `broker_pid`, the result also holds the broker's CPU per
    message over the phase (`broker_cpu_us`: its process tree, connection set-up included)
    beside the client's own (`cpu_us`, `cpu_share`: rhea-bench.js, the timed window)."""
    before = tree_cpu_seconds(broker_pid) if broker_pid else 0.0
    result = run_client(
        [kind, str(port), address, str(args.count), str(args.size), str(args.credit), *auth], 500
    )
    if broker_pid and result.get("ok"):
        result["broker_cpu_us"] = (tree_cpu_seconds(broker_pid) - before) / result["ok"] * 1e6
    if result.get("error") is None and (result.get("ok") != args.count or result.get("duplicates")):
        result["error"] = f"{result.get('ok')}/{args.count}, {result.get('duplicates')} duplicates"
    return result


def latency_phase(port: int, address: str, args: argparse.Namespace, auth: tuple[str, str]) -> dict:
    return run_client(
        [
            "latency", str(port), address, str(args.latency_rate), str(args.latency_seconds),
            str(args.size), *auth,
        ],
        300,
    )  # fmt: skip


class Forwarder:
    """``bench/node/forwarder.js``: the in-memory forwarder, the floor of the client and the
    machine (no storage: it accepts at once and hands on what it holds)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["node", str(FORWARDER)], cwd=NODE_DIR, stdout=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "listening <port>" (or EOF if it failed)
        if not line.startswith("listening "):
            self.stop()
            raise SystemExit(f"compare: the forwarder did not start: {line!r}")
        self.port = int(line.split()[1])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Drop what it holds (a failed phase's leftovers): a new process on a new port."""
        self.stop()
        self.start()


# A fixed piece of CPU-bound Python work (dict stores and small bytes objects: interpreter work,
# as a broker's event loop does), the same every round.
MACHINE_WORK = (
    "import sys\nd = {}\nfor i in range(int(sys.argv[1])):\n"
    "    d[i & 1023] = (i * 3).to_bytes(8, 'little')\n"
)


class MachineProbe:
    """The machine's own round-to-round spread: the same fixed CPU work on every core at once
    (one process per core, as a broker and its client keep both cores busy), timed in each
    round beside the brokers. Nothing but the machine changes between its rounds, so its
    spread is what any CPU-bound broker inherits from this machine in a round of that length.
    Its size is set once at the start so that a round takes about `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.cores = os.cpu_count() or 2
        trial = 1_000_000
        self.iterations = max(trial, int(trial * seconds / self._time(trial, 1)))

    @staticmethod
    def _time(iterations: int, processes: int) -> float:
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen([sys.executable, "-c", MACHINE_WORK, str(iterations)])
            for _ in range(processes)
        ]
        for proc in procs:
            proc.wait(timeout=PHASE_TIMEOUT)
        return time.perf_counter() - t0

    def run(self) -> float:
        """One round: the work's rate per core (iterations/s), over the wall time of all."""
        return self.iterations / self._time(self.iterations, self.cores)


def spread(values: list[float]) -> str:
    """Round-to-round spread: max / min of the rounds (1.00 = identical rounds)."""
    return f"{max(values) / min(values):.2f}" if values and min(values) > 0 else "-"


def cpu_cells(result: dict) -> str:
    """A phase's CPU per message, for its round's line: the client's main thread (where rhea
    runs) and the broker's process tree, in us (both move with the machine's speed)."""
    if "main_us" not in result or "broker_cpu_us" not in result:
        return ""
    return f" ({result['main_us']:>4.1f}/{result['broker_cpu_us']:>5.1f} us)"


def cpu_medians(results: list[dict]) -> dict[str, float] | None:
    """Medians over the rounds of the CPU figures a phase reported (rhea-bench.js: cpu_us,
    cpu_share, main_us, main_share; phase(): broker_cpu_us); None when none did."""
    keys = ("cpu_us", "cpu_share", "main_us", "main_share", "broker_cpu_us")
    rows = [r for r in results if all(k in r for k in keys)]
    if not rows:
        return None
    return {k: statistics.median(r[k] for r in rows) for k in keys}


def print_cpu(targets: dict, cpu: dict[str, dict[str, list[dict]]]) -> dict[tuple[str, str], float]:
    """Where each phase's CPU went, per message: the client's (the whole Node.js process, and
    its main thread, where rhea runs, with that thread's share of one core) and the broker's
    (its process tree). The client's main thread cannot pass 1e6 / main us msg/s, and on this
    machine's cores client and broker together cannot pass cores * 1e6 / (client us + broker
    us): the lower of the two bounds what this client here gets from a broker of that cost. A
    main-thread share near 1.00 says the client, not the broker, was the limit. Returns the
    bounds by (target, phase)."""
    cores = os.cpu_count() or 2
    bounds: dict[tuple[str, str], float] = {}
    print("\nCPU per message, medians (us)  client  main thread (share)  broker  bound (msg/s)")
    for name in targets:
        for kind in ("send", "receive"):
            m = cpu_medians(cpu[name][kind])
            if m is None:
                continue
            bound = bounds[name, kind] = min(
                1e6 / m["main_us"], cores * 1e6 / (m["cpu_us"] + m["broker_cpu_us"])
            )
            print(
                f"  {name:<19} {kind:<8} {m['cpu_us']:>6.1f} {m['main_us']:>8.1f}"
                f" ({m['main_share']:.2f}) {m['broker_cpu_us']:>12.1f} {bound:>10.0f}"
            )
    return bounds


def print_summary(
    targets: dict,
    rates: dict[str, dict[str, list[float]]],
    cpu: dict[str, dict[str, list[dict]]],
    latencies: dict[str, list[dict]],
    machine: list[float],
    args: argparse.Namespace,
) -> None:
    """Medians of the rounds, spreads (and the machine's own), CPU per message, ratios to each
    peer, partitioned/plain, latency."""

    def med(name: str, kind: str) -> float:
        values = rates[name][kind]
        return statistics.median(values) if values else 0.0

    print(f"\nmedians of {args.rounds} rounds (msg/s)    send    receive   spread send  receive")
    for name in targets:
        print(
            f"  {name:<30} {med(name, 'send'):>8.0f} {med(name, 'receive'):>10.0f}"
            f" {spread(rates[name]['send']):>12} {spread(rates[name]['receive']):>8}"
        )
    if machine:
        print(
            f"  {MACHINE:<30} {'':>8} {'':>10} {spread(machine):>12}"
            f"   ({args.machine_seconds:g} s on each core a round: what a broker bound by CPU"
            " inherits from the machine)"
        )
    bounds = print_cpu(targets, cpu)
    for peer in ("artemis", "rabbitmq"):
        print(f"\nratio to {peer:<24}    send    receive")
        for name in ("sbemu", "sbemu-partitioned"):
            cells = []
            for kind in ("send", "receive"):
                base = med(peer, kind)
                cells.append(f"{med(name, kind) / base:>8.2f}x" if base else "       -")
            print(f"  {name:<30}{cells[0]} {cells[1]:>10}")
    for kind in ("send", "receive"):
        plain = med("sbemu", kind)
        if plain:
            print(f"  partitioned / plain {kind}: {med('sbemu-partitioned', kind) / plain:.2f}")
    # How far each sbemu rate is from what this client and machine allow at sbemu's own CPU
    # cost, and what twice RabbitMQ's rate would take.
    for name in ("sbemu", "sbemu-partitioned"):
        for kind in ("send", "receive"):
            bound, rate, twice = (
                bounds.get((name, kind)),
                med(name, kind),
                2 * med("rabbitmq", kind),
            )
            if bound and rate:
                print(
                    f"  {name} {kind}: {rate:.0f} msg/s = {rate / bound:.0%} of its CPU bound"
                    f" {bound:.0f}; 2.0x RabbitMQ = {twice:.0f} msg/s"
                )
    if latencies:
        print(f"\nlatency at {args.latency_rate} msg/s, medians of the rounds (ms)"
              "   p50      p99   p99 spread")  # fmt: skip
        for name, runs in latencies.items():
            p50 = statistics.median(r["p50_ms"] for r in runs)
            p99s = [r["p99_ms"] for r in runs]
            print(f"  {name:<40} {p50:>6.2f} {statistics.median(p99s):>8.2f} {spread(p99s):>8}")
        peers = [n for n in ("rabbitmq", "artemis") if n in latencies]
        if peers and "sbemu" in latencies:
            best = min(statistics.median(r["p99_ms"] for r in latencies[n]) for n in peers)
            for name in ("sbemu", "sbemu-partitioned"):
                if name in latencies:
                    p99 = statistics.median(r["p99_ms"] for r in latencies[name])
                    print(f"  {name} p99 / lowest peer p99: {p99 / best:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="messages per phase [20000]")
    parser.add_argument("--size", type=int, default=1024, help="body bytes [1024]")
    parser.add_argument(
        "--credit", type=int, default=500, help="send window / receive credit [500]"
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds [5]")
    parser.add_argument(
        "--latency-rate", type=int, default=1000, help="latency phase msg/s [1000; 0 = skip]"
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=10.0, help="latency phase length [10]"
    )
    parser.add_argument(
        "--machine-seconds", type=float, default=1.0,
        help="length of the machine's fixed CPU work in each round [1.0; 0 = skip]",
    )  # fmt: skip
    parser.add_argument("--keep-data", action="store_true", help="keep the temp directories")
    args = parser.parse_args(argv)
    if not CLIENT.exists() or not (NODE_DIR / "node_modules" / "rhea").exists():
        raise SystemExit("compare: run `make bench-compare` (installs rhea into bench/node)")
    if not (RABBIT_BIN / "rabbitmq-server").exists():
        raise SystemExit("compare: RabbitMQ not installed (apt-get install rabbitmq-server)")
    if not (ARTEMIS_HOME / "bin" / "artemis").exists():
        raise SystemExit("compare: Artemis not unpacked: run `make bench-compare`")

    load = os.getloadavg()
    print(f"bench-compare: {args.count} x {args.size} B durable, credit {args.credit}, "
          f"{args.rounds} rounds; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
          flush=True)  # fmt: skip
    workdir = Path(tempfile.mkdtemp(prefix="sbemu-compare-"))
    for sub in ("rabbit", "artemis", "sbemu"):
        (workdir / sub).mkdir()
    rabbit = Rabbit(workdir / "rabbit")
    artemis = Artemis(workdir / "artemis")
    sbemu = SbemuServer(workdir / "sbemu")
    targets = {
        "rabbitmq": (lambda: rabbit.port, f"/amq/queue/{RABBIT_QUEUE}", ("guest", "guest")),
        "artemis": (lambda: artemis.port, ARTEMIS_QUEUE, ("bench", "bench")),
        "sbemu": (lambda: sbemu.port, "bench", (SBEMU_USER, SBEMU_PASSWORD)),
        "sbemu-partitioned": (lambda: sbemu.port, "benchp", (SBEMU_USER, SBEMU_PASSWORD)),
    }
    floor = Forwarder()
    # The floor runs the throughput rounds too: the rate of the client against a broker that
    # costs next to nothing (its receive is bounded by the forwarder's own re-encoding in rhea).
    rounds_targets = {
        **targets,
        FLOOR: (lambda: floor.port, "bench", (SBEMU_USER, SBEMU_PASSWORD)),
    }
    # Whose CPU a phase charges to the broker: the process tree each one started.
    pids = {
        "rabbitmq": lambda: rabbit.pid,
        "artemis": lambda: artemis.pid,
        "sbemu": lambda: sbemu.proc.pid if sbemu.proc else None,
        "sbemu-partitioned": lambda: sbemu.proc.pid if sbemu.proc else None,
        FLOOR: lambda: floor.proc.pid if floor.proc else None,
    }
    # Leftovers of a failed phase must not feed the next round: each peer's own purge.
    purges = {"rabbitmq": rabbit.purge, "artemis": artemis.purge, FLOOR: floor.restart}
    rates: dict[str, dict[str, list[float]]] = {
        k: {"send": [], "receive": []} for k in rounds_targets
    }
    cpu: dict[str, dict[str, list[dict]]] = {k: {"send": [], "receive": []} for k in rounds_targets}
    failures: list[str] = []
    latencies: dict[str, list[dict]] = {}
    machine: list[float] = []  # MachineProbe rates, one a round
    try:
        rabbit.start()
        artemis.start()
        sbemu.start()
        floor.start()
        print(
            f"  rabbitmq on 127.0.0.1:{rabbit.port}, artemis on 127.0.0.1:{artemis.port} "
            f"({artemis.describe()}), sbemu on {sbemu.url}",
            flush=True,
        )
        probe = MachineProbe(args.machine_seconds) if args.machine_seconds > 0 else None
        slots = [*rounds_targets, MACHINE] if probe else list(rounds_targets)
        for rnd in range(1, args.rounds + 1):
            order = slots if rnd % 2 else list(reversed(slots))
            for name in order:
                if name == MACHINE:
                    assert probe is not None
                    machine.append(probe.run())
                    print(f"  round {rnd} {name:<26} {machine[-1]:>10.0f} iterations/s a core",
                          flush=True)  # fmt: skip
                    continue
                port, address, auth = rounds_targets[name]
                row = [f"  round {rnd} {name:<18}"]
                for kind in ("send", "receive"):
                    result = phase(kind, port(), address, args, auth, pids[name]())
                    if result.get("error"):
                        failures.append(f"round {rnd} {name} {kind}: {result['error']}")
                        row.append(f"{kind} FAILED ({result['error']})")
                        if name in purges:
                            purges[name]()
                        break
                    rates[name][kind].append(result["rate"])
                    cpu[name][kind].append(result)
                    row.append(f"{kind} {result['rate']:>8.0f} msg/s{cpu_cells(result)}")
                print("  ".join(row), flush=True)
        if args.latency_rate > 0:
            # Send-to-receive latency at a fixed offered rate, same client, alternating rounds
            # like the throughput; the in-memory forwarder shows the floor (client + machine).
            lat_targets = rounds_targets
            for rnd in range(1, args.rounds + 1):
                order = list(lat_targets) if rnd % 2 else list(reversed(lat_targets))
                for name in order:
                    port, address, auth = lat_targets[name]
                    lat = latency_phase(port(), address, args, auth)
                    if lat.get("error"):
                        failures.append(f"round {rnd} latency {name}: {lat['error']}")
                        print(f"  round {rnd} latency {name:<18} FAILED ({lat['error']})")
                        if name in purges:
                            purges[name]()
                        continue
                    latencies.setdefault(name, []).append(lat)
                    print(
                        f"  round {rnd} latency {name:<18} {args.latency_rate} msg/s: "
                        f"p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, "
                        f"max {lat['max_ms']:.2f} ms",
                        flush=True,
                    )
    finally:
        floor.stop()
        sbemu.stop()
        artemis.stop()
        rabbit.stop()
        if not args.keep_data:
            shutil.rmtree(workdir, ignore_errors=True)
    print_summary(rounds_targets, rates, cpu, latencies, machine, args)
    if failures:
        print("\nbench-compare: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
