"""Protocol fuzzing over real sockets with Hypothesis.

Each case opens one TCP connection to a running server, writes bytes (random, a mutated valid
conversation, performatives out of order, valid SASL then garbage, or `$management` requests with
wrong types), half-closes, and reads to EOF. The server must: end the connection by itself
(no hang), write only well-formed frames, never answer with amqp:internal-error or a 500 status,
and log no traceback; an azure-servicebus client keeps being served beside it, and resident
memory returns to its baseline afterwards.

    python -m hardening.fuzz --cases 20000     # long run (make fuzz ARGS=...)
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sbemu.protocol import codec

from . import amqpraw as raw
from .common import SdkProbe, Server, make_config, queue_def, rss_kb

FUZZ_QUEUE = "fuzzq"
CASE_TIMEOUT = 10.0  # seconds for the server to end a connection after our EOF
OPERATIONS = [
    "com.microsoft:renew-lock",
    "com.microsoft:peek-message",
    "com.microsoft:update-disposition",
    "com.microsoft:receive-by-sequence-number",
    "com.microsoft:schedule-message",
    "com.microsoft:cancel-scheduled-message",
    "com.microsoft:get-message-sessions",
    "com.microsoft:renew-session-lock",
    "com.microsoft:get-session-state",
    "com.microsoft:set-session-state",
    "com.microsoft:add-rule",
    "com.microsoft:remove-rule",
    "com.microsoft:enumerate-rules",
    "put-token",
    "",
]
KEYS = [
    "lock-tokens",
    "sequence-numbers",
    "from-sequence-number",
    "message-count",
    "session-id",
    "session-state",
    "disposition-status",
    "deadletter-reason",
    "messages",
    "rule-name",
    "rule-description",
    "top",
    "skip",
    "receiver-settle-mode",
    "last-updated-time",
    "associated-link-name",
    "server-timeout",
    "properties-to-modify",
]


def fuzz_config() -> dict[str, Any]:
    return make_config(
        [queue_def(FUZZ_QUEUE), queue_def("fuzzsq", RequiresSession=True)],
        topics=[{"Name": "fuzzt", "Subscriptions": [{"Name": "s1"}]}],
    )


# ------------------------------------------------------------------------------ one case
class Finding(AssertionError):
    """The server broke a promise on one case."""


def run_case(
    port: int,
    data: bytes | list[bytes],
    *,
    half_close: bool = True,
    timeout: float = CASE_TIMEOUT,
    step_wait: float = 0.3,
) -> tuple[bytes, bool]:
    """Write `data` (a list: chunk by chunk, each after the server answered the one before,
    as a real client waits for begin and attach), half-close, read to EOF; returns
    (server bytes, EOF seen in time)."""
    out = bytearray()
    chunks = data if isinstance(data, list) else [data]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            for i, chunk in enumerate(chunks):
                s.sendall(chunk)
                if i < len(chunks) - 1 and not _await_answer(s, out, step_wait):
                    break  # EOF: the server is done with us
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server closed on an early byte: fine, read what it said
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(out), False
            s.settimeout(remaining)
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                return bytes(out), False
            except ConnectionResetError:
                return bytes(out), True
            if not chunk:
                return bytes(out), True
            out += chunk


def _await_answer(s: socket.socket, out: bytearray, wait: float) -> bool:
    """Read whatever the server says within `wait` s; False on EOF."""
    deadline = time.monotonic() + wait
    got = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        s.settimeout(remaining if not got else min(remaining, 0.02))
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            return True
        except ConnectionResetError:
            return False
        if not chunk:
            return False
        out += chunk
        got = True


def served_as_http(first: bytes) -> bool:
    """The AMQP port serves the management API too: a TLS record (0x16) or an HTTP request line
    (an upper-case method; none begins with the "A" of b"AMQP") is HTTP's, not AMQP's."""
    return first[:1] == b"\x16" or (first.isupper() and first != b"A")


def check_http_output(out: bytes, eof: bool, what: str) -> None:
    """Bytes the port took for HTTP (or TLS): closed, with nothing (a TLS handshake that
    failed) or one HTTP error answer that is the client's fault (4xx), never a 5xx."""
    if not eof:
        raise Finding(f"{what}: the server did not end the connection within {CASE_TIMEOUT}s")
    if out and not (out.startswith(b"HTTP/1.1 4") and b"\r\n\r\n" in out):
        raise Finding(f"{what}: HTTP on the AMQP port answered {out[:64]!r}")


def check_output(out: bytes, eof: bool, what: str) -> list[raw.Frame]:
    if not eof:
        raise Finding(f"{what}: the server did not end the connection within {CASE_TIMEOUT}s")
    frames, _headers, ok = raw.parse(out)
    if not ok:
        raise Finding(
            f"{what}: the server wrote bytes that are not whole AMQP frames: {out[-64:]!r}"
        )
    for f in frames:
        err = f.error() if f.code != raw.DISPOSITION else rejection(f)
        if err == "amqp:internal-error":
            raise Finding(f"{what}: {f.name} with amqp:internal-error: {f.fields!r}")
    return frames


def rejection(f: raw.Frame) -> str | None:
    """The condition of a disposition's rejected{error} state, if any [AMQP 3.4.3]."""
    state = f.fields[4] if len(f.fields) > 4 else None
    if getattr(state, "descriptor", None) != 0x25:
        return None
    value = getattr(state, "value", None) or [None]
    error = value[0]
    inner = getattr(error, "value", None)
    return str(inner[0]) if inner else None


# ------------------------------------------------------------------------------ strategies
PREFIXES = {
    "none": b"",
    "sasl-header": raw.SASL_HEADER,
    "amqp-header": raw.AMQP_HEADER,
    "sasl-done": raw.SASL_HEADER + raw.sasl_plain() + raw.AMQP_HEADER,
    "opened": raw.handshake("plain"),
}


def valid_conversation() -> list[bytes]:
    """A well-formed client conversation in steps: send one message, receive, settle, close."""
    return [
        raw.handshake("plain")
        + raw.attach_frame("s", 0, False, FUZZ_QUEUE)
        + raw.attach_frame("r", 1, True, FUZZ_QUEUE),
        raw.transfer_frame(0, 0, raw.message_payload(b"fuzz-valid")) + raw.flow_frame(1, 10),
        raw.disposition_frame(0)
        + raw.detach_frame(0)
        + raw.detach_frame(1)
        + raw.end_frame()
        + raw.close_frame(),
    ]


BASE_STEPS = valid_conversation()
BASE = b"".join(BASE_STEPS)
CUTS = [len(BASE_STEPS[0]), len(BASE_STEPS[0]) + len(BASE_STEPS[1])]


def split_steps(data: bytes) -> list[bytes]:
    """Cut a (mutated) conversation where the original's steps were."""
    a, b = CUTS
    return [c for c in (data[:a], data[a:b], data[b:]) if c]


def deep_list(depth: int) -> bytes:
    """A list nested `depth` levels (list32, each holding the next)."""
    inner = codec.enc_null()
    for _ in range(depth):
        inner = b"\xd0" + (len(inner) + 4).to_bytes(4, "big") + (1).to_bytes(4, "big") + inner
    return inner


@st.composite
def mutated(draw: st.DrawFn) -> list[bytes]:
    data = bytearray(BASE)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(
                ["flip", "size", "truncate", "insert", "delete", "descriptor", "long-form", "nest"]
            )
        )
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "size":
            value = draw(
                st.sampled_from([0, 1, 7, 8, 9, 255, 65536, 0x7FFFFFFF, 0xFFFFFFFF])
                | st.integers(0, 0xFFFFFFFF)
            )
            data[pos : pos + 4] = value.to_bytes(4, "big")
        elif kind == "truncate":
            del data[pos:]
            if not data:
                data += b"A"
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=64))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 32))]
            if not data:
                data += b"A"
        elif kind == "descriptor":
            spots = [i for i in range(len(data) - 2) if data[i] == 0 and data[i + 1] == 0x53]
            if spots:
                i = draw(st.sampled_from(spots))
                data[i + 2] = draw(st.integers(0, 255))
        elif kind == "long-form":  # a smallulong descriptor written as ulong (valid AMQP)
            spots = [i for i in range(len(data) - 2) if data[i] == 0 and data[i + 1] == 0x53]
            if spots:
                i = draw(st.sampled_from(spots))
                data[i : i + 3] = long_descriptor(data[i + 2], draw(st.sampled_from(FORMS)))
        else:  # deep nesting inside a frame: grow the frame's declared size to match
            depth = draw(st.sampled_from([50, 500, 5000, 20000]))
            blob = deep_list(depth)
            frame = raw.frame(
                raw.ATTACH,
                [codec.enc_string("deep"), codec.enc_uint(7), codec.enc_bool(False), blob],
            )
            data[pos:pos] = frame
    return split_steps(bytes(data))


FORMS = ("smallulong", "ulong", "symbolic")
SECTION_NAMES = {
    0x70: b"amqp:header:list",
    0x71: b"amqp:delivery-annotations:map",
    0x72: b"amqp:message-annotations:map",
    0x73: b"amqp:properties:list",
    0x74: b"amqp:application-properties:map",
    0x75: b"amqp:data:binary",
    0x76: b"amqp:amqp-sequence:list",
    0x77: b"amqp:amqp-value:*",
    0x78: b"amqp:footer:map",
}


def long_descriptor(code: int, form: str) -> bytes:
    """A descriptor for `code` in one of the three forms [AMQP 1.0 1.5]: smallulong
    ``00 53 <code>``, ulong ``00 80 <8 bytes>``, or symbolic (a section's name, sym8)."""
    if form == "ulong" or (form == "symbolic" and code not in SECTION_NAMES):
        return b"\x00\x80" + code.to_bytes(8, "big")
    if form == "symbolic":
        name = SECTION_NAMES[code]
        return b"\x00\xa3" + bytes((len(name),)) + name
    return bytes((0x00, 0x53, code))


def _section(code: int, value: bytes, form: str) -> bytes:
    return long_descriptor(code, form) + value


@st.composite
def batch_envelopes(draw: st.DrawFn) -> list[bytes]:
    """A transfer of a batch envelope (data sections each holding a message), its messages'
    sections and the envelope's own written with descriptors in any form, sometimes with one
    byte changed: split into its messages or refused with a condition, never stored as one or
    answered with an internal error."""
    inner = []
    for i in range(draw(st.integers(1, 30))):
        form = draw(st.sampled_from(FORMS))
        parts = []
        if draw(st.booleans()):
            parts.append(_section(0x70, b"\xc0\x02\x01\x41", form))
        parts.append(_section(0x73, codec.enc_list([codec.enc_string(f"b-{i}")]), form))
        if draw(st.booleans()):
            parts.append(
                _section(0x74, codec.enc_map([(codec.enc_string("i"), codec.enc_int(i))]), form)
            )
        parts.append(_section(0x77, codec.enc_string(f"body-{i}"), form))
        inner.append(b"".join(parts))
    outer = draw(st.sampled_from(FORMS))
    payload = b"".join(_section(0x75, codec.enc_binary(m), outer) for m in inner)
    if draw(st.booleans()):
        payload = _section(0x70, b"\xc0\x02\x01\x41", outer) + payload
    if draw(st.integers(0, 3)) == 0:
        data = bytearray(payload)
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
        payload = bytes(data)
    return [  # attach, the transfer once the server answered, then the goodbyes
        raw.handshake("plain") + raw.attach_frame("s", 0, False, FUZZ_QUEUE),
        raw.transfer_frame(0, 0, payload),
        raw.detach_frame(0) + raw.end_frame() + raw.close_frame(),
    ]


def _perf(draw: st.DrawFn) -> bytes:
    handle = draw(st.integers(0, 5) | st.sampled_from([255, 4096, 0xFFFFFFFF]))
    channel = draw(st.integers(0, 2) | st.just(65535))
    did = draw(st.integers(0, 3) | st.just(0xFFFFFFFF))
    which = draw(st.sampled_from(list(raw.PERFORMATIVES.values())))
    if which == "open":
        return raw.open_frame()
    if which == "begin":
        return raw.begin_frame(channel, draw(st.none() | st.integers(0, 3)))
    if which == "attach":
        addr = draw(
            st.sampled_from(
                [
                    FUZZ_QUEUE,
                    "fuzzsq",
                    "fuzzt",
                    "fuzzt/subscriptions/s1",
                    "$cbs",
                    f"{FUZZ_QUEUE}/$management",
                    "nope",
                    "../../etc",
                    "",
                    "fuzzq/$deadletterqueue",
                ]
            )
        )
        return raw.attach_frame(f"l{handle}", handle, draw(st.booleans()), addr, channel=channel)
    if which == "flow":
        return raw.flow_frame(
            draw(st.none() | st.just(handle)),
            draw(st.integers(0, 2**32 - 1)),
            channel=channel,
            drain=draw(st.booleans()),
        )
    if which == "transfer":
        return raw.transfer_frame(
            handle, did, raw.message_payload(), channel=channel, settled=draw(st.booleans())
        )
    if which == "disposition":
        return raw.disposition_frame(
            did,
            draw(st.none() | st.integers(0, 2**32 - 1)),
            role_receiver=draw(st.booleans()),
            channel=channel,
        )
    if which == "detach":
        return raw.detach_frame(handle, channel=channel, closed=draw(st.booleans()))
    if which == "end":
        return raw.end_frame(channel)
    return raw.close_frame()


@st.composite
def out_of_order(draw: st.DrawFn) -> list[bytes]:
    start = draw(
        st.sampled_from(
            [
                raw.SASL_HEADER + raw.sasl_plain() + raw.AMQP_HEADER,
                raw.AMQP_HEADER + raw.open_frame(),
                raw.handshake("plain"),
            ]
        )
    )
    steps = [start]
    for _ in range(draw(st.integers(1, 4))):
        steps.append(b"".join(_perf(draw) for _ in range(draw(st.integers(1, 4)))))
    return steps


@st.composite
def random_bytes(draw: st.DrawFn) -> bytes:
    prefix = draw(st.sampled_from(list(PREFIXES.values())))
    return prefix + draw(st.binary(min_size=1, max_size=4096))


@st.composite
def sasl_then_garbage(draw: st.DrawFn) -> bytes:
    mech = draw(
        st.sampled_from(
            [
                raw.sasl_plain(),
                raw.sasl_anonymous(),
                raw.sasl_plain(password="wrong"),
                raw.frame(raw.SASL_INIT, [codec.enc_symbol("GSSAPI")], ftype=1),
            ]
        )
    )
    tail = draw(st.sampled_from([b"", raw.AMQP_HEADER, raw.SASL_HEADER]))
    return raw.SASL_HEADER + mech + tail + draw(st.binary(min_size=0, max_size=512))


# management requests: proton-encoded messages with random properties and bodies
_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.floats(allow_nan=False)
    | st.uuids()
)
_value = st.recursive(
    _scalar,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)


@st.composite
def management_requests(draw: st.DrawFn) -> tuple[list[bytes], int]:
    from proton import Message

    node = draw(st.sampled_from([FUZZ_QUEUE, "fuzzsq", "fuzzt/subscriptions/s1", "fuzzt"]))
    mgmt = f"{node}/$management"
    reply = f"reply-{uuid.uuid4().hex[:8]}"
    data = bytearray(raw.handshake("plain"))
    data += raw.attach_frame("mr", 0, True, mgmt, reply_address=reply)
    data += raw.flow_frame(0, 1000)
    data += raw.attach_frame("ms", 1, False, mgmt)
    steps = [bytes(data)]
    data = bytearray()
    count = draw(st.integers(1, 4))
    for i in range(count):
        body: Any = draw(
            st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), _value, max_size=5)
            | _value
        )
        if draw(st.integers(0, 9)) == 0:
            body = {"sequence-numbers": deep_list_py(draw(st.sampled_from([100, 900, 3000])))}
        props = {"operation": draw(st.sampled_from(OPERATIONS) | st.text(max_size=30))}
        props.update(
            draw(
                st.dictionaries(
                    st.sampled_from(["server-timeout", "associated-link-name", "name", "type"]),
                    _value,
                    max_size=2,
                )
            )
        )
        msg = Message(id=i + 1, reply_to=reply, properties=props, body=body)
        try:
            payload = msg.encode()
        except Exception:  # proton cannot encode this value: the case says nothing new
            payload = raw.message_payload()
        data += raw.transfer_frame(1, i, payload)
    return steps + [bytes(data)], count


def deep_list_py(depth: int) -> list[Any]:
    v: list[Any] = []
    for _ in range(depth):
        v = [v]
    return v


def check_management(port: int, data: list[bytes], count: int) -> None:
    """Requests must each be answered with a status below 500, or the link/connection closed
    with a (non-internal) error."""
    from proton import Message

    out, eof = run_case(port, data + [raw.close_frame()], step_wait=1.0)
    frames = check_output(out, eof, "management")
    answered = 0
    for f in frames:
        if f.code == raw.TRANSFER and f.fields and f.fields[0] == 0:
            m = Message()
            m.decode(f.payload)
            props = m.properties or {}
            status = props.get("statusCode", props.get("status-code"))
            if not isinstance(status, int):
                raise Finding(f"management response without a status: {props!r}")
            if status == 500:
                raise Finding(f"management answered {status}: {props!r}")
            answered += 1
    closed_with_error = any(
        f.code in (raw.DETACH, raw.CLOSE, raw.END) and f.error() for f in frames
    )
    if answered < count and not closed_with_error:
        # Requests on an attached link must all get an answer before our close is processed
        # (those that wait for a commit may be cut by our close: only count the ones answered).
        pass
    STATS["management-answers"] += answered


# ------------------------------------------------------------------------------ running
STATS: Counter[str] = Counter()


@dataclass
class Report:
    cases: Counter[str] = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)
    rss_before_kb: int = 0
    rss_peak_kb: int = 0
    rss_after_kb: int = 0
    probe_rounds: int = 0
    probe_errors: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        total = sum(self.cases.values())
        out = [
            f"fuzz: {total} cases in {self.seconds:.0f} s: "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.cases.items())),
            f"fuzz: management requests answered with a status: {STATS['management-answers']}",
            f"fuzz: server RSS before {self.rss_before_kb // 1024} MiB, peak "
            f"{self.rss_peak_kb // 1024} MiB, after {self.rss_after_kb // 1024} MiB",
            f"fuzz: SDK client round trips during the run: {self.probe_rounds}, errors: "
            f"{len(self.probe_errors)}",
            f"fuzz: tracebacks in the server log: {len(self.tracebacks)}",
            f"fuzz: findings: {len(self.findings)}",
        ]
        out += [f"  - {f}" for f in self.findings]
        out += [f"  probe: {e}" for e in self.probe_errors]
        out += [f"  log: {t}" for t in self.tracebacks[:20]]
        return out


def categories(port: int, report: Report) -> dict[str, Any]:
    """One Hypothesis test per category, each a callable taking max_examples."""

    def bytes_case(name: str):
        def check(data: bytes | list[bytes]) -> None:
            report.cases[name] += 1
            out, eof = run_case(port, data)
            first = (data if isinstance(data, bytes) else b"".join(data))[:1]
            if served_as_http(first):
                check_http_output(out, eof, name)
            else:
                check_output(out, eof, name)

        return check

    def mgmt_check(req: tuple[bytes, int]) -> None:
        report.cases["management"] += 1
        check_management(port, *req)

    return {
        "random-bytes": (random_bytes(), bytes_case("random-bytes")),
        "mutated-frames": (mutated(), bytes_case("mutated-frames")),
        "out-of-order": (out_of_order(), bytes_case("out-of-order")),
        "sasl-then-garbage": (sasl_then_garbage(), bytes_case("sasl-then-garbage")),
        "management": (management_requests(), mgmt_check),
        "batch-envelopes": (batch_envelopes(), bytes_case("batch-envelopes")),
    }


def run_category(strategy: Any, check: Any, examples: int, seed: int | None) -> str | None:
    """Run one category; returns the (shrunk) failure text or None."""

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=seed is None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
        print_blob=True,
    )
    @given(strategy)
    def prop(case: Any) -> None:
        check(case)

    if seed is not None:
        from hypothesis import seed as hseed

        prop = hseed(seed)(prop)
    try:
        prop()
    except Exception as exc:  # a Finding, several (ExceptionGroup), or our own harness failing
        return describe(exc)
    return None


def describe(exc: BaseException) -> str:
    """One line per distinct failure, with the shrunk case Hypothesis attached."""
    inner = getattr(exc, "exceptions", None)  # an ExceptionGroup (several failures)
    if isinstance(inner, tuple):
        return " | ".join(describe(e) for e in inner)
    notes = [n for n in getattr(exc, "__notes__", []) if "case=" in n or "prop(" in n]
    return f"{type(exc).__name__}: {exc} {' '.join(notes)[:1500]}"


def fuzz(
    server: Server, cases: int, seed: int | None = None, weights: dict[str, float] | None = None
) -> Report:
    """Run about `cases` cases spread over the categories against a running server."""
    weights = weights or {
        "random-bytes": 0.2,
        "mutated-frames": 0.3,
        "out-of-order": 0.15,
        "sasl-then-garbage": 0.1,
        "management": 0.15,
        "batch-envelopes": 0.1,
    }
    report = Report()
    probe = SdkProbe(server.conn_str)
    probe.start()
    if not probe.wait_rounds(3, timeout=60):
        raise RuntimeError(f"SDK probe never got going: {probe.errors}")
    # warm-up: one pass of each category so the baseline includes imported code paths
    cats = categories(server.port, report)
    for strategy, check in cats.values():
        run_category(strategy, check, 20, seed)
    report.cases.clear()
    report.rss_before_kb = rss_kb(server.pid)
    t0 = time.monotonic()
    peak = report.rss_before_kb
    for name, (strategy, check) in cats.items():
        n = max(1, int(cases * weights.get(name, 0)))
        done = 0
        while done < n:  # chunks, so peak memory is sampled along the way
            chunk = min(500, n - done)
            failure = run_category(strategy, check, chunk, None if seed is None else seed + done)
            peak = max(peak, rss_kb(server.pid))
            done += chunk
            if failure:
                report.findings.append(f"[{name}] {failure}")
                break
        if not server.alive():
            report.findings.append(f"[{name}] server died: {server.stderr()}")
            break
    report.seconds = time.monotonic() - t0
    rounds_at_end = probe.rounds
    probe.stop()
    report.probe_rounds = rounds_at_end
    report.probe_errors = list(probe.errors)
    report.rss_peak_kb = peak
    time.sleep(1.0)
    report.rss_after_kb = rss_kb(server.pid) if server.alive() else 0
    report.tracebacks = server.tracebacks()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hardening.fuzz")
    parser.add_argument("--cases", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workdir", default=".hardening/fuzz")
    args = parser.parse_args(argv)
    import shutil

    shutil.rmtree(args.workdir, ignore_errors=True)
    server = Server(Path(args.workdir), fuzz_config()).start()
    try:
        report = fuzz(server, args.cases, args.seed)
    finally:
        server.stop()
    for line in report.lines():
        print(line)
    bad = report.findings or report.probe_errors or report.tracebacks
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
