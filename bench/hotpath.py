#!/usr/bin/env python
"""Where the server's CPU goes per message: ``make bench-profile`` (``bench/hotpath.py``).

A fixed workload on a real server: this script starts ``hotpath.py --serve`` as a child
process (an in-process ``sbemu.runtime.server.Server`` on a loopback port, uvloop, a temporary data
dir, the ``bench`` queue of bench/bench.py or its 16-partition ``benchp``) and drives it with
python-qpid-proton from this process in three phases on one queue:

* send: ``--count`` durable 1 KB messages, the link's credit window kept full, until every
  one is accepted (an acceptance leaves the server only after its LMDB commit);
* receive: one peek-lock receiver (prefetch 500) takes them all, settling none;
* settle: the receiver accepts them all (settled at once, as rhea's auto-accept and proton's
  ``accept()`` do) and closes.

Each phase ends with what it left to commit lazily (delivery records, settled completions)
committed at once rather than at the server's next timer tick.

The child measures only itself, between a ``start`` and a ``stop`` line the driver sends around
each phase. Three measurements (``--mode``):

* ``cpu``: the process's CPU time (user + system, all threads, getrusage) per message: the
  figure to read, noisy under load, so ``--rounds`` runs and medians;
* ``yappi``: the same CPU split by where it was spent (yappi, CPU clock, all threads):
  protocol (python-qpid-proton and its C engine, sbemu/protocol/ but its listener), broker
  (sbemu/partitions/ but the commit turn and store commit, py-lmdb reads), commit (the commit
  threads: LMDB transaction and fsync call, and the commit turn's bookkeeping on the loop),
  loop (asyncio/uvloop, the listener, socket calls, the server's turn) and other. The
  profiler's own overhead inflates the totals: the shares are applied to the ``cpu`` figures;
* ``callgrind``: the instruction count per message (valgrind --tool=callgrind, toggled per
  phase by client requests from the server process): repeatable on a busy machine, for before/after comparisons.
* ``modules`` (not part of ``all``): which of sbemu's modules each phase enters, grouped by the
  callback that entered them (the outermost sbemu frame of its thread's stack: the listener's
  read, the commit thread, a commit's completion, a timer), from a profile hook on every
  thread; ``--callgrind-count`` messages. The path of a message and its acknowledgement is the
  union over the callbacks it drives (the timers are listed apart: they run whatever moves).

``--mode all`` (the default) runs all three and prints one table: microseconds per message per
phase and part, and instructions per message. ``--json`` prints the figures as one JSON line.
To look closer: ``HOTPATH_TOP=1`` prints every profiled function's own time per phase (yappi
mode, on stderr with ``HOTPATH_DEBUG=1``, which also shows the server's stderr), and
``HOTPATH_KEEP=<dir>`` keeps each phase's callgrind dump there for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import KEY, KEY_NAME, TOPIC, _config  # noqa: E402 - bench/bench.py, beside this script

PHASES = ("send", "receive", "settle")
PARTS = ("protocol", "broker", "commit", "loop", "other")


# ------------------------------------------------------------------------------- the server side


def _part_of(module: str, name: str) -> str:
    """The part a profiled function belongs to, by its module path or builtin's name."""
    m = module.replace("\\", "/")
    if m.endswith("/sbemu/partitions/completions.py"):  # commit completions, as ever: protocol
        return "protocol"
    if "/sbemu/partitions/" in m:
        if m.endswith("/commits.py"):  # the store's reads and staging on the loop: broker
            return "commit"
        return "broker"
    if "/sbemu/protocol/" in m:
        return "loop" if m.endswith("/listener.py") else "protocol"
    if "/sbemu/runtime/server.py" in m:
        return "loop"
    if "/sbemu/" in m:
        return "other"
    if "/proton/" in m or "cproton" in m or "cproton" in name:
        return "protocol"
    if "lmdb" in m or "lmdb" in name or "Transaction" in name or "Environment" in name:
        return "broker"  # reads on the loop; the commit threads' share is counted apart
    if "asyncio" in m or "uvloop" in m or "uvloop" in name or "selectors" in m or "socket" in m:
        return "loop"
    if "threading" in m or "queue" in m:
        return "commit"
    return "other"


VALGRIND_H = "/usr/include/valgrind/callgrind.h"
CALLGRIND_C = """
#include <valgrind/callgrind.h>
void cg_on(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_off(void) { CALLGRIND_DUMP_STATS; CALLGRIND_STOP_INSTRUMENTATION; }
"""


def _callgrind_lib(workdir: Path) -> Path:
    """A two-function library making callgrind's client requests (zero + instrument on;
    dump + off), built with the system's C compiler and valgrind's header."""
    src, lib = workdir / "cgreq.c", workdir / "cgreq.so"
    src.write_text(CALLGRIND_C)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


class Probe:
    """What the child measures between `start` and `stop`."""

    def __init__(self, mode: str, cg_lib: str | None = None) -> None:
        self.mode = mode
        self.cpu0 = self.main0 = 0.0
        self.cg = None
        if cg_lib:
            import ctypes

            self.cg = ctypes.CDLL(cg_lib)

    @staticmethod
    def _cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime

    def start(self) -> None:
        if self.mode == "yappi":
            import yappi

            yappi.clear_stats()
            yappi.set_clock_type("cpu")
            yappi.start(builtins=True, profile_threads=False)  # the loop's thread only
        if self.mode == "modules":
            TRACE.roots.clear()
            TRACE.active = True
            sys.setprofile(TRACE)  # the loop's thread (the others had it from their start)
        self.cpu0 = self._cpu()
        self.main0 = time.thread_time()  # start() and stop() run on the loop's thread
        if self.cg is not None:
            self.cg.cg_on()

    def stop(self) -> dict[str, Any]:
        if self.cg is not None:
            self.cg.cg_off()
        main = time.thread_time() - self.main0
        cpu = self._cpu() - self.cpu0
        out: dict[str, Any] = {"cpu_s": cpu, "main_s": main}
        if self.mode == "modules":
            sys.setprofile(None)
            TRACE.active = False
            out["roots"] = {k: sorted(v) for k, v in sorted(TRACE.roots.items())}
        if self.mode == "yappi":
            import yappi

            yappi.stop()
            out["parts"] = _parts(yappi.get_func_stats())
            if os.environ.get("HOTPATH_TOP"):
                print("top-end", file=sys.stderr)
            out["per_call_s"] = yappi_cost_per_call()
            # the loop thread's time no profiled function holds: uvloop's C code and system
            # calls under a run_forever entered before profiling began (not inflated)
            out["unheld_s"] = max(0.0, main - sum(v[0] for v in out["parts"].values()))
        return out


class ModuleTrace:
    """A profile hook (sys.setprofile / threading.setprofile): the sbemu modules whose
    functions are called while `active`, by the callback that entered them."""

    def __init__(self) -> None:
        self.active = False
        self.roots: dict[str, set[str]] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or not self.active:
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("sbemu"):
            return
        root, f = frame, frame.f_back
        while f is not None:
            if f.f_globals.get("__name__", "").startswith("sbemu"):
                root = f
            f = f.f_back
        key = f"{root.f_globals['__name__']}:{root.f_code.co_qualname}"
        self.roots.setdefault(key, set()).add(module)


TRACE = ModuleTrace()


def _calls(n: int) -> None:
    empty, lst = _empty, []
    for i in range(n):
        empty()
        lst.append(i)


def _empty() -> None:
    pass


def yappi_cost_per_call(n: int = 100_000) -> float:
    """What yappi (CPU clock, builtins) adds to the profiled time per call it counts: the
    same loop of a Python call and a builtin call, timed plain and profiled."""
    import yappi

    t0 = time.thread_time()
    _calls(n)
    plain = time.thread_time() - t0
    yappi.clear_stats()
    yappi.set_clock_type("cpu")
    yappi.start(builtins=True, profile_threads=False)
    _calls(n)
    yappi.stop()
    stats = yappi.get_func_stats()
    held = sum(st.tsub for st in stats if st.name in ("_calls", "_empty", "append") or
               "append" in st.name)  # fmt: skip
    yappi.clear_stats()
    return max(0.0, held - plain) / (2 * n)


def _by_caller(stat: Any) -> bool:
    """A builtin or generated function whose time is its caller's (len, list.append, a
    dataclass __init__), unless it is one of the engines named in _part_of."""
    if not (stat.builtin or stat.module in ("<string>", "builtins")):
        return False
    return _part_of(stat.module, stat.name) == "other"


def _parts(stats: Any) -> dict[str, list[float]]:
    """The loop thread's CPU per part as yappi saw it, [seconds, calls]: each function's own
    time plus that of the builtins it called. The driver takes the profiler's cost per call
    out and gives the loop what no function holds (uvloop's C code and its system calls,
    under a run_forever entered before profiling began)."""
    parts = {p: [0.0, 0] for p in PARTS}
    for st in stats:
        if _by_caller(st):
            continue
        kids = [c for c in st.children if _by_caller(c)]
        part = parts[_part_of(st.module, st.name)]
        part[0] += st.tsub + sum(c.tsub for c in kids)
        part[1] += st.ncall + sum(c.ncall for c in kids)
        if os.environ.get("HOTPATH_TOP"):
            own = st.tsub + sum(c.tsub for c in kids)
            print(f"top {own:.4f} {st.ncall} {st.module.split('/')[-1]}:{st.name}", file=sys.stderr)
    return parts


async def _serve(args: argparse.Namespace) -> None:
    import threading

    from sbemu.config import load_config

    try:
        from sbemu.runtime.server import Server
    except ImportError:  # a tree from before runtime/ (comparisons across commits)
        from sbemu.server import Server  # type: ignore[no-redef]

    if args.profiler == "modules":
        threading.setprofile(TRACE)  # the threads the server starts (commits, timers)

    server = Server(
        load_config(args.config),
        data_dir=Path(args.data_dir),
        host="127.0.0.1",
        port=0,
        admin_port=0,
    )
    await server.start()
    try:
        from sbemu.cli.gcpolicy import tune_for_serving
    except ImportError:  # a tree from before it (comparisons across commits)
        pass
    else:
        tune_for_serving()  # as `sbemu serve` does once started
    probe = Probe(args.profiler, args.cg_lib)
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()

    def command() -> None:
        line = sys.stdin.readline().strip()
        if line == "start":
            probe.start()
            print("started", flush=True)
        elif line == "stop":
            loop.create_task(stop())
        else:  # "quit" or the driver went away
            stopped.set()

    async def stop() -> None:
        # what the phase left to commit lazily (delivery records, settled completions) is
        # the phase's: commit it now rather than at the next timer tick
        assert server.router is not None
        server.router.flush_lazy()
        server.wake()
        # polled, not spun: each poll is loop work the phase would be charged for (at 0.5 ms
        # a slow fsync under callgrind cost thousands of polls, the settle figure's spread)
        while server.commit_loop is not None and server.commit_loop.busy():
            await asyncio.sleep(0.01)
        print(json.dumps(probe.stop()), flush=True)

    loop.add_reader(sys.stdin.fileno(), command)
    print(f"port {server.amqp_port}", flush=True)
    await stopped.wait()
    loop.remove_reader(sys.stdin.fileno())
    await server.stop()


# ------------------------------------------------------------------------------- the driver


class Child:
    """The server process and its start/stop line protocol."""

    def __init__(self, workdir: Path, mode: str, queue_name: str) -> None:
        self.mode = mode
        self.cg_out = workdir / "callgrind.out"
        cmd = [
            sys.executable, __file__, "--serve", "--config", str(workdir / "config.json"),
            "--data-dir", str(workdir / f"data-{mode}-{queue_name}-{time.monotonic_ns()}"),
            "--profiler", mode if mode in ("yappi", "modules") else "none",
        ]  # fmt: skip
        if mode == "callgrind":
            cmd = [
                "valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={self.cg_out}", *cmd,
                "--cg-lib", str(_callgrind_lib(workdir)),
            ]  # fmt: skip
        self.stderr_path = workdir / "server.stderr"
        with open(self.stderr_path, "a") as stderr:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True
            )
        line = self._line(timeout_hint="start")
        m = re.match(r"port (\d+)", line)
        if not m:
            raise SystemExit(f"hotpath: server did not start: {line}{self._stderr()}")
        self.port = int(m.group(1))

    def _stderr(self) -> str:
        self.proc.kill()
        self.proc.wait()
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def _line(self, timeout_hint: str) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"hotpath: server exited ({timeout_hint}):\n{self._stderr()}")
        return line

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def start(self) -> None:
        self._send("start")
        self._line("start")

    def stop(self) -> dict[str, Any]:
        self._send("stop")
        result = json.loads(self._line("stop"))
        if self.mode == "callgrind":
            result["instructions"] = _last_dump_total(self.cg_out)
        return result

    def close(self) -> None:
        try:
            self._send("quit")
            self.proc.wait(timeout=120)
        except Exception:  # noqa: BLE001 - a child that does not stop is killed
            self.proc.kill()
            self.proc.wait()
        if os.environ.get("HOTPATH_DEBUG"):
            sys.stderr.write(self.stderr_path.read_text(errors="replace"))


def _last_dump_total(base: Path) -> int:
    """The instruction count of callgrind's newest dump (base.<pid>.<n> or base.<n>)."""
    dumps = sorted(base.parent.glob(base.name + "*"), key=lambda p: p.stat().st_mtime_ns)
    for path in reversed(dumps):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
                if os.environ.get("HOTPATH_KEEP"):  # the dumps, for callgrind_annotate
                    shutil.copy(path, os.environ["HOTPATH_KEEP"])
                path.unlink()
                return total
    raise SystemExit(f"hotpath: no callgrind dump under {base}")


def _drive(
    child: Child, count: int, size: int, address: str, source: str
) -> dict[str, dict[str, Any]]:
    """Send, receive and settle `count` messages; the child's figures per phase."""
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    url = f"amqp://127.0.0.1:{child.port}"
    payload = os.urandom(size)
    results: dict[str, dict[str, Any]] = {}
    errors: list[str] = []

    def connect(container: Any) -> Any:
        return container.connect(
            url, user=KEY_NAME, password=KEY, sasl_enabled=True, allowed_mechs="PLAIN"
        )

    class Sender(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(auto_settle=True)
            self.sent = self.accepted = 0

        def on_start(self, event: Any) -> None:
            self.conn = connect(event.container)
            event.container.create_sender(self.conn, address)

        def on_link_opened(self, event: Any) -> None:
            child.start()

        def on_sendable(self, event: Any) -> None:
            sender = event.sender
            while sender.credit and self.sent < count:
                msg = Message(id=f"m-{self.sent}", body=payload, durable=True)
                msg.inferred = True
                msg.properties = {"i": self.sent}
                sender.send(msg)
                self.sent += 1

        def on_accepted(self, event: Any) -> None:
            self.accepted += 1
            if self.accepted == count:
                results["send"] = child.stop()
                self.conn.close()

        def on_rejected(self, event: Any) -> None:
            errors.append(f"rejected: {event.delivery.remote.condition}")
            self.conn.close()

    class Receiver(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=500, auto_accept=False)
            self.deliveries: list[Any] = []

        def on_start(self, event: Any) -> None:
            child.start()
            self.conn = connect(event.container)
            event.container.create_receiver(self.conn, source)

        def on_message(self, event: Any) -> None:
            self.deliveries.append(event.delivery)
            if len(self.deliveries) == count:
                results["receive"] = child.stop()
                child.start()
                for delivery in self.deliveries:
                    self.accept(delivery)
                self.conn.close()

        def on_connection_closed(self, event: Any) -> None:
            results["settle"] = child.stop()

    Container(Sender()).run()
    if errors:
        raise SystemExit(f"hotpath: {errors[0]}")
    Container(Receiver()).run()
    return results


def _per_message(results: dict[str, dict[str, Any]], count: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase, r in results.items():
        row: dict[str, Any] = {
            "cpu_us": r["cpu_s"] * 1e6 / count,
            "main_us": r["main_s"] * 1e6 / count,
        }
        if "parts" in r:
            row["parts"] = {k: [v[0] * 1e6 / count, v[1] / count] for k, v in r["parts"].items()}
            row["per_call_us"] = r["per_call_s"] * 1e6
            row["unheld_us"] = r["unheld_s"] * 1e6 / count
        if "instructions" in r:
            row["instructions"] = r["instructions"] / count
        if "roots" in r:
            row["roots"] = r["roots"]
        out[phase] = row
    return out


def _run(mode: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    child = Child(workdir, mode, args.queue)
    try:
        count = args.callgrind_count if mode in ("callgrind", "modules") else args.count
        # the topic: sent to bencht (5 subscriptions, bench/bench.py), received from `all`
        source = f"{args.queue}/subscriptions/all" if args.queue == TOPIC else args.queue
        return _per_message(_drive(child, count, args.size, args.queue, source), count)
    finally:
        child.close()


def _split(cpu_us: float, main_us: float, prof: dict[str, Any] | None) -> dict[str, float]:
    """A phase's CPU per message per part: the loop thread's by the profile, less the
    profiler's cost per call it counted (measured by yappi_cost_per_call), scaled to the
    plain run's loop thread once the time no function holds (uvloop's C code) is given to
    the loop; the other threads (commit workers) are commit."""
    if prof is None:
        return {}
    parts, per_call = prof["parts"], prof["per_call_us"]
    held = {k: max(0.0, v[0] - per_call * v[1]) for k, v in parts.items()}
    unheld = min(prof["unheld_us"], main_us)
    total = sum(held.values()) or 1.0
    us = {k: v * (main_us - unheld) / total for k, v in held.items()}
    us["loop"] += unheld
    us["commit"] += max(0.0, cpu_us - main_us)
    return us


def _table(summary: dict[str, dict[str, Any]], calib: float | None) -> str:
    lines = [
        "| per message | CPU us | loop thread | " + " | ".join(PARTS) + " | instructions | "
        "instructions as us |",
        "|---|---|---|" + "---|" * len(PARTS) + "---|---|",
    ]
    for phase in PHASES:
        row = summary.get(phase, {})
        us, parts = row.get("cpu_us", float("nan")), row.get("parts_us", {})
        cells = " | ".join(f"{parts[p]:.1f}" if p in parts else "" for p in PARTS)
        ins = row.get("instructions")
        ins_s = f"{ins / 1000:,.0f}k" if ins else ""
        ins_us = f"{ins / calib:.1f}" if ins and calib else ""
        main = row.get("main_us", float("nan"))
        lines.append(f"| {phase} | {us:.1f} | {main:.1f} | {cells} | {ins_s} | {ins_us} |")
    return "\n".join(lines)


# the server's periodic work (expiries, idle entities, heap, stats), listed apart by
# --mode modules: it runs whether messages move or not
TIMERS = ("Server._on_timer",)


def _print_modules(args: argparse.Namespace) -> int:
    """``--mode modules``: each phase's callbacks and the sbemu modules each entered."""
    with tempfile.TemporaryDirectory(prefix="sbemu-hotpath-") as tmp:
        workdir = Path(tmp)
        (workdir / "config.json").write_text(json.dumps(_config()))
        phases = _run("modules", args, workdir)
    if args.json:
        print(json.dumps({p: row["roots"] for p, row in phases.items()}))
        return 0
    for phase in PHASES:
        roots = phases[phase]["roots"]
        path = [m for root, m in roots.items() if not root.endswith(TIMERS)]
        print(
            f"{phase}: {len(set().union(*path))} modules under {len(path)} callbacks "
            f"(the server's timers apart)"
        )
        for root, modules in roots.items():
            print(
                f"  {root} ({len(modules)}): {' '.join(m.removeprefix('sbemu.') for m in modules)}"
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--mode", choices=("all", "cpu", "yappi", "callgrind", "modules"), default="all"
    )
    ap.add_argument(
        "--queue",
        default="bench",
        help="bench (plain), benchp (16 partitions) or bencht (the topic of bench/bench.py: sent "
        "to it, 5 subscriptions with SQL and correlation filters; received from its 'all')",
    )
    ap.add_argument("--count", type=int, default=5_000, help="messages per cpu/yappi run")
    ap.add_argument("--callgrind-count", type=int, default=2_000, help="messages under callgrind")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3, help="cpu runs (medians)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    ap.add_argument("--profiler", default="none", help=argparse.SUPPRESS)
    ap.add_argument("--cg-lib", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        import uvloop

        uvloop.run(_serve(args))
        return 0

    if args.mode == "modules":
        return _print_modules(args)
    modes = ("cpu", "yappi", "callgrind") if args.mode == "all" else (args.mode,)
    if "callgrind" in modes and not (
        shutil.which("valgrind") and shutil.which("cc") and Path(VALGRIND_H).exists()
    ):
        raise SystemExit(
            "hotpath: callgrind mode needs valgrind and a C compiler (apt-get install valgrind gcc)"
        )
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in PHASES}
    prof: dict[str, Any] = {}
    instr: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="sbemu-hotpath-") as tmp:
        workdir = Path(tmp)
        config = _config()
        for q in config["UserConfig"]["Namespaces"][0]["Queues"]:
            q["Properties"]["LockDuration"] = "PT5M"  # callgrind is ~50x slower
        (workdir / "config.json").write_text(json.dumps(config))
        for mode in modes:
            for _ in range(args.rounds if mode == "cpu" else 1):
                for phase, row in _run(mode, args, workdir).items():
                    if mode == "cpu":
                        runs[phase].append(row)
                    elif mode == "yappi":
                        prof[phase] = row
                    else:
                        instr[phase] = row["instructions"]
    summary: dict[str, dict[str, Any]] = {}
    for phase in PHASES:
        row = {}
        base = runs[phase] or ([prof[phase]] if phase in prof else [])  # yappi alone: its own
        if base:
            row["cpu_us"] = statistics.median(r["cpu_us"] for r in base)
            row["main_us"] = statistics.median(r["main_us"] for r in base)
            row["parts_us"] = _split(row["cpu_us"], row["main_us"], prof.get(phase))
        if phase in instr:
            row["instructions"] = instr[phase]
        summary[phase] = row
    # calibration: instructions per CPU microsecond, the same phases run natively
    both = [p for p in PHASES if p in instr and "cpu_us" in summary[p]]
    calib = sum(instr[p] for p in both) / sum(summary[p]["cpu_us"] for p in both) if both else None
    if args.json:
        print(json.dumps({"queue": args.queue, "count": args.count, "phases": summary,
                          "instructions_per_us": calib}))  # fmt: skip
    else:
        print(f"queue {args.queue}: {args.count} x {args.size} B messages ({args.callgrind_count} "
              f"under callgrind); server CPU us per message, medians of {args.rounds} runs; "
              f"rounds: {json.dumps({p: [round(r['cpu_us'], 1) for r in v] for p, v in runs.items()})}")  # fmt: skip
        if calib:
            print(f"calibration: {calib:,.0f} instructions per CPU us")
        print(_table(summary, calib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
