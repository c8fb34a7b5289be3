"""In-memory harness for protocol tests: our sans-IO AmqpConnection paired with a python-qpid-proton
client engine, bytes pumped between them by hand, group commits run synchronously.

Nothing here opens a socket. Everything the server writes is kept in ``EnginePair.s2c`` and
everything fed to it in ``EnginePair.c2s`` so tests can inspect the raw frames (``frames()``)
and the raw AMQP types (``proton.Data``), which is what the SDK traps are about.
"""

from __future__ import annotations

import struct
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cproton_ffi import ffi as _ffi
from cproton_ffi import lib as _lib
from proton import Connection, Data, Delivery, Link, Message, Transport

from sbemu.auth.sas import make_sas_token
from sbemu.config import default_config
from sbemu.partitions.commits import GroupCommit
from sbemu.partitions.router import Router
from sbemu.partitions.specs import queue_spec
from sbemu.protocol import codec
from sbemu.protocol.connection import AmqpConnection, Services
from sbemu.protocol.services import namespace_info

NAMESPACE = "sbemulatorns"
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
HOST = "localhost"

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
_FRAME = struct.Struct(">IBBH")

# Performative codes [AMQP 2.7]
OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
# SASL codes [AMQP 5.3.3]
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = range(0x40, 0x45)
# Delivery states [AMQP 3.4]
RECEIVED, ACCEPTED, REJECTED, RELEASED, MODIFIED = range(0x23, 0x28)
SOURCE, TARGET = 0x28, 0x29
ERROR = 0x1D
# Message sections [AMQP 3.2]
HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES = range(
    0x70, 0x75
)
DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = range(0x75, 0x79)

# How many fields each performative has [AMQP 2.7] (trap 1: full-length lists).
PERFORMATIVE_FIELDS = {
    OPEN: 10,
    BEGIN: 8,
    ATTACH: 14,
    FLOW: 11,
    TRANSFER: 11,
    DISPOSITION: 6,
    DETACH: 3,
    END: 1,
    CLOSE: 1,
}


# ------------------------------------------------------------------------------ services


def make_services(data_dir: Path, config: Any = None) -> Services:
    """Router + Services for the (default) config's queues, on a fresh data directory."""
    cfg = config if config is not None else default_config()
    ns = cfg.namespaces[0]
    router = Router(Path(data_dir), lambda: None)
    for q in ns.queues:
        router.add_entity(queue_spec(ns, q))
    infos = {ns.name.lower(): namespace_info(ns)}
    return Services(router, infos, ns.name.lower())


def session_config() -> Any:
    """The default config plus a session-enabled queue 'queue.session'."""
    from sbemu.config import parse_config

    doc = {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": NAMESPACE,
                    "Queues": [
                        {"Name": "queue.1", "Properties": {}},
                        {"Name": "queue.session", "Properties": {"RequiresSession": True}},
                    ],
                }
            ],
            "Logging": {"Type": "Console"},
        }
    }
    return parse_config(doc, "<protocol tests>")


def sas_token(
    entity: str,
    *,
    key_name: str = KEY_NAME,
    key: str = KEY,
    ttl: int = 3600,
    now: float | None = None,
    host: str = HOST,
) -> str:
    """A SAS token signed the way the Python SDK signs it, for sb://host/<entity>."""
    expiry = int((now if now is not None else time.time()) + ttl)
    return make_sas_token(f"sb://{host}/{entity}", key_name, key, expiry)


def run_commits(router: Router, now_ms: int) -> bool:
    """One server turn (sbemu.partitions.commits), inline: dispatch pending views, commit every
    dirty partition synchronously, dispatch what the commits made ready."""
    router.run_pending(now_ms)
    did = bool(router.dirty)
    GroupCommit(router).commit_dirty()
    router.run_pending(now_ms)
    return did


# ------------------------------------------------------------------------------ frames


@dataclass
class Frame:
    """One AMQP/SASL frame (or a protocol header when ``header`` is set)."""

    ftype: int = 0
    channel: int = 0
    code: int | str | None = None
    fields: list[Any] | None = None
    payload: bytes = b""
    body: bytes = b""  # the encoded performative + payload
    header: bytes | None = None

    def field(self, i: int) -> Any:
        f = self.fields or []
        return f[i] if i < len(f) else None

    @property
    def perf_bytes(self) -> bytes:
        return self.body[: len(self.body) - len(self.payload)]


def parse_frames(buf: bytes | bytearray) -> list[Frame]:
    """Split a byte stream into headers and frames; performatives decoded with sbemu's codec."""
    buf = bytes(buf)
    pos = 0
    out: list[Frame] = []
    while pos < len(buf):
        if buf[pos : pos + 4] == b"AMQP":
            out.append(Frame(header=buf[pos : pos + 8]))
            pos += 8
            continue
        if len(buf) - pos < 8:
            break
        size, doff, ftype, channel = _FRAME.unpack_from(buf, pos)
        if size < 8 or len(buf) - pos < size:
            break
        body = buf[pos + doff * 4 : pos + size]
        pos += size
        if not body:
            out.append(Frame(ftype=ftype, channel=channel))
            continue
        perf, end = codec.decode(body, 0)
        assert isinstance(perf, codec.Described), perf
        out.append(
            Frame(
                ftype=ftype,
                channel=channel,
                code=perf.descriptor,
                fields=list(perf.value or []),
                payload=body[end:],
                body=body,
            )
        )
    return out


def frame_bytes(
    code: int, fields: list[bytes], *, channel: int = 0, ftype: int = 0, payload: bytes = b""
) -> bytes:
    """Encode one frame from pre-encoded field values."""
    body = codec.enc_described(code, codec.enc_list(fields)) + payload
    return _FRAME.pack(8 + len(body), 2, ftype, channel) + body


def sasl_init_frame(
    mechanism: str, initial_response: bytes | None = b"", hostname: str | None = HOST
) -> bytes:
    """A hand-made sasl-init frame (proton's client cannot speak MSSBCBS)."""
    return frame_bytes(
        SASL_INIT,
        [
            codec.enc_symbol(mechanism),
            codec.enc_binary(initial_response)
            if initial_response is not None
            else codec.enc_null(),
            codec.enc_string(hostname) if hostname is not None else codec.enc_null(),
        ],
        ftype=1,
    )


# ------------------------------------------------------------------------------ typed values


def data_of(encoded: bytes) -> tuple[Data, int]:
    """Decode the first AMQP value of ``encoded`` into a proton Data; returns (data, bytes used)."""
    d = Data()
    n = d.decode(encoded)
    d.rewind()
    d.next()
    return d, n


def message_sections(raw: bytes) -> dict[int, bytes]:
    """Encoded message sections by descriptor code. Asserts the descriptor is smallulong (trap 2)."""
    out: dict[int, bytes] = {}
    pos = 0
    while pos < len(raw):
        assert raw[pos] == 0x00 and raw[pos + 1] == 0x53, (
            f"section descriptor at {pos} is not a smallulong: {raw[pos : pos + 3].hex()}"
        )
        code = raw[pos + 2]
        _, n = data_of(raw[pos:])
        out[code] = raw[pos : pos + n]
        pos += n
    return out


def _enter_described_value(d: Data) -> None:
    assert d.type() == Data.DESCRIBED, d.type_name(d.type()) if d.type() else None
    d.enter()
    d.next()  # descriptor
    d.next()  # value


@dataclass(frozen=True)
class Typed:
    """A decoded value with its AMQP type code (proton ``Data.*`` constant)."""

    type: int
    value: Any

    @property
    def type_name(self) -> str:
        return Data.type_name(self.type)


def own(value: Any) -> Any:
    """Deep-copy memoryviews out of a proton Data (they point into its buffers, which die with it)."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {own(k): own(v) for k, v in value.items()}
    if isinstance(value, list):
        return [own(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(own(v) for v in value)
    return value


def typed_map(d: Data) -> dict[Any, tuple[Typed, Typed]]:
    """The map at the Data cursor: python key -> (typed key, typed value)."""
    assert d.type() == Data.MAP, Data.type_name(d.type())
    d.enter()
    out: dict[Any, tuple[Typed, Typed]] = {}
    while d.next():
        kt = d.type()
        k = own(d.get_object())
        d.next()
        vt = d.type()
        v = own(d.get_object())
        out[k] = (Typed(kt, k), Typed(vt, v))
    d.exit()
    return out


def section_map(raw_section: bytes) -> dict[Any, tuple[Typed, Typed]]:
    """A map-valued section (annotations, application-properties, amqp-value map)."""
    d, _ = data_of(raw_section)
    _enter_described_value(d)
    return typed_map(d)


def section_list(raw_section: bytes) -> list[Typed]:
    """A list-valued section (header, properties) as typed fields."""
    d, _ = data_of(raw_section)
    _enter_described_value(d)
    return typed_list(d)


def typed_list(d: Data) -> list[Typed]:
    if d.type() == Data.NULL:
        return []
    assert d.type() == Data.LIST, Data.type_name(d.type())
    d.enter()
    out = []
    while d.next():
        out.append(Typed(d.type(), own(d.get_object())))
    d.exit()
    return out


def perf_types(frame: Frame) -> list[Typed]:
    """Typed fields of a frame's performative."""
    d, _ = data_of(frame.perf_bytes)
    _enter_described_value(d)
    return typed_list(d)


def perf_field_map(frame: Frame, index: int) -> dict[Any, tuple[Typed, Typed]]:
    """The map-valued field ``index`` of a performative, with key and value types."""
    d, _ = data_of(frame.perf_bytes)
    _enter_described_value(d)
    assert d.type() == Data.LIST
    d.enter()
    for _ in range(index + 1):
        assert d.next(), f"performative has no field {index}"
    return typed_map(d)


def raw_tag(delivery: Delivery) -> bytes:
    """The delivery tag as raw bytes (the binding decodes tags as UTF-8)."""
    tag = _lib.pn_delivery_tag(delivery._impl)
    return bytes(_ffi.unpack(tag.start, tag.size)) if tag.size else b""  # empty: start is NULL


# ------------------------------------------------------------------------------ the pair


class EnginePair:
    """Server AmqpConnection + proton client engine, pumped in memory.

    sasl: "ANONYMOUS" / "PLAIN" (proton's SASL client), None (plain AMQP header, no SASL),
    or ("raw", mechanism, initial_response) for a hand-made SASL exchange (MSSBCBS).
    """

    def __init__(
        self,
        services: Services,
        *,
        sasl: Any = "ANONYMOUS",
        user: str = KEY_NAME,
        password: str = KEY,
        now: float | None = None,
        hostname: str = HOST,
        container: str = "test-client",
    ) -> None:
        self.services = services
        self.router: Router = services.router
        self.now = now if now is not None else time.time()
        self.server = AmqpConnection(services, self.now)
        self.c2s = bytearray()
        self.s2c = bytearray()
        self.server_closed_delivered = False
        self.raw_sasl_outcome: int | None = None
        self.transport = Transport()
        self.conn = Connection()
        self.conn.container = container
        self.conn.hostname = hostname
        if isinstance(sasl, tuple):
            _, mech, response = sasl
            self.raw_sasl_outcome = self._raw_sasl(mech, response, hostname)
        elif sasl is not None:
            if sasl == "PLAIN":
                self.conn.user = user
                self.conn.password = password
            s = self.transport.sasl()
            s.allowed_mechs(sasl)
            if sasl == "PLAIN":
                s.allow_insecure_mechs = True
        self.transport.bind(self.conn)
        self.session = None

    # -- raw SASL
    def _raw_sasl(self, mech: str, response: bytes | None, hostname: str) -> int | None:
        self.feed(SASL_HEADER + sasl_init_frame(mech, response, hostname))
        out = self.server.data_to_send()
        self.s2c += out
        frames = parse_frames(out)
        outcome = [f for f in frames if f.code == SASL_OUTCOME]
        return outcome[0].field(0) if outcome else None

    # -- byte pumping
    def feed(self, data: bytes) -> None:
        """Bytes to the server as if from the socket (recorded in c2s)."""
        self.c2s += data
        self.server.receive_data(bytes(data), self.now)

    def _to_client(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            cap = self.transport.capacity()
            if cap <= 0:
                return
            chunk = bytes(view[:cap])
            self.transport.push(chunk)
            view = view[len(chunk) :]

    def pump(self, rounds: int = 200) -> None:
        """Move bytes both ways and run commits until nothing moves."""
        for _ in range(rounds):
            moved = False
            pending = self.transport.pending()
            if pending > 0 and not self.server.closed:
                data = self.transport.peek(pending)
                self.transport.pop(pending)
                self.feed(data)
                moved = True
            if run_commits(self.router, int(self.now * 1000)):
                moved = True
            out = self.server.data_to_send()
            if out:
                self.s2c += out
                self._to_client(out)
                moved = True
            if self.server.closed and not self.server_closed_delivered:
                self.server_closed_delivered = True
                self.transport.close_tail()
                moved = True
            if not moved:
                return
        raise AssertionError("pump did not settle")

    def advance(self, seconds: float) -> None:
        """Move the clock (locks, token expiry)."""
        self.now += seconds
        self.router.on_timer(int(self.now * 1000))
        self.pump()

    # -- frames
    def frames(self) -> list[Frame]:
        """Everything the server sent so far."""
        return parse_frames(self.s2c)

    def client_frames(self) -> list[Frame]:
        return parse_frames(self.c2s)

    def server_perfs(self, code: int) -> list[Frame]:
        return [f for f in self.frames() if f.code == code]

    def mark(self) -> int:
        """A position in s2c; frames_since(mark) gives only what came after."""
        return len(self.s2c)

    def frames_since(self, mark: int) -> list[Frame]:
        # s2c is frame-aligned at every pump boundary, so parsing from a mark is safe.
        return parse_frames(self.s2c[mark:])

    def close(self) -> None:
        """Client close, then the socket goes away (the adapter calls connection_lost)."""
        self.conn.close()
        self.pump()
        self.server.connection_lost()

    # -- client helpers
    def open(self) -> EnginePair:
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()
        self.pump()
        return self

    def sender(
        self,
        target: str | None,
        *,
        source: str | None = None,
        name: str | None = None,
        settled: bool = False,
        rcv_second: bool = False,
    ) -> Link:
        snd = self.session.sender(name or f"snd-{uuid.uuid4()}")
        if rcv_second:  # what the Python SDK asks for [contract 3.1]
            snd.snd_settle_mode = Link.SND_UNSETTLED
            snd.rcv_settle_mode = Link.RCV_SECOND
        if target is not None:
            snd.target.address = target
        if source is not None:
            snd.source.address = source
        if settled:
            snd.snd_settle_mode = Link.SND_SETTLED
        snd.open()
        self.pump()
        return snd

    def receiver(
        self,
        source: str | None,
        *,
        target: str | None = None,
        name: str | None = None,
        credit: int = 0,
        peek_lock: bool = True,
        rcv_second: bool = True,
    ) -> Link:
        rcv = self.session.receiver(name or f"rcv-{uuid.uuid4()}")
        if source is not None:
            rcv.source.address = source
        if target is not None:
            rcv.target.address = target
        if peek_lock:
            rcv.snd_settle_mode = Link.SND_UNSETTLED
            rcv.rcv_settle_mode = Link.RCV_SECOND if rcv_second else Link.RCV_FIRST
        else:
            rcv.snd_settle_mode = Link.SND_SETTLED
            rcv.rcv_settle_mode = Link.RCV_FIRST
        rcv.open()
        if credit:
            rcv.flow(credit)
        self.pump()
        return rcv

    _tags = iter(range(1, 1 << 30))

    def send(self, snd: Link, message: Message | bytes, *, settled: bool = False) -> Delivery:
        data = message if isinstance(message, bytes) else message.encode()
        dlv = snd.delivery(struct.pack(">I", next(self._tags)))
        snd.send(data)
        snd.advance()
        if settled:
            dlv.settle()
        self.pump()
        return dlv

    def take(self, rcv: Link) -> list[tuple[Delivery, bytes]]:
        """Every complete delivery readable on a client receiver: (delivery, raw message bytes)."""
        out = []
        while True:
            dlv = rcv.current
            if dlv is None or not dlv.readable or dlv.partial:
                return out
            data = rcv.recv(dlv.pending)
            rcv.advance()
            out.append((dlv, data))

    def request(self, snd: Link, rcv: Link, message: Message) -> tuple[Message, bytes]:
        """Send a request on snd and take the single reply on rcv (reply link needs credit)."""
        if rcv.credit <= 0:
            rcv.flow(10)
        self.send(snd, message)
        got = self.take(rcv)
        assert len(got) == 1, f"expected one reply, got {len(got)}"
        dlv, raw = got[0]
        reply = Message()
        reply.decode(raw)
        dlv.settle()
        self.pump()
        return reply, raw

    # -- CBS
    def cbs_links(self) -> tuple[Link, Link]:
        """Python-style $cbs pair: source = target = $cbs on both links."""
        snd = self.sender("$cbs", source="$cbs")
        rcv = self.receiver("$cbs", target="$cbs", credit=10, peek_lock=False)
        return snd, rcv

    def put_token(
        self,
        token: str,
        audience: str,
        *,
        message_id: Any = None,
        links: tuple[Link, Link] | None = None,
    ) -> tuple[Message, bytes]:
        snd, rcv = links or self.cbs_links()
        req = Message(
            id=message_id if message_id is not None else uuid.uuid4(),
            properties={
                "operation": "put-token",
                "type": "jwt",
                "name": audience,
            },
            body=token,
        )
        return self.request(snd, rcv, req)

    def mgmt_links(self, entity: str) -> tuple[Link, Link]:
        """Python-style management pair: both termini are <entity>/$management."""
        node = f"{entity}/$management"
        snd = self.sender(node, source=node)
        rcv = self.receiver(node, target=node, credit=10, peek_lock=False)
        return snd, rcv

    def mgmt(
        self,
        links: tuple[Link, Link],
        operation: str,
        body: dict[Any, Any],
        *,
        associated_link: str | None = None,
    ) -> tuple[Message, bytes]:
        snd, rcv = links
        props: dict[str, Any] = {"operation": operation, "type": "entity-mgmt"}
        if associated_link:
            props["associated-link-name"] = associated_link
        req = Message(id=uuid.uuid4(), reply_to=snd.target.address, properties=props, body=body)
        return self.request(snd, rcv, req)
