"""The SASL layer, done here rather than by proton (sans-IO: bytes in, bytes out).

Why not proton: the python-qpid-proton wheel has no Cyrus SASL, so its server side can neither
offer the `MSSBCBS` mechanism the .NET SDK uses nor check PLAIN credentials. The exchange is
four frames [AMQP 5.3], so we run it ourselves and hand proton the byte stream from the
`AMQP 0 1 0 0` header on. Rules from the contract (section 1.2):
- offer MSSBCBS, ANONYMOUS and PLAIN; treat MSSBCBS exactly like ANONYMOUS and ignore the
  ANONYMOUS trace string; answer sasl-init at once with sasl-outcome (never a challenge);
- accept a connection that skips SASL and starts with the plain AMQP header (JS with a
  precomputed SAS token): authorisation then happens only through `$cbs`.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass

from . import codec

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
MECHANISMS = ("MSSBCBS", "ANONYMOUS", "PLAIN")
_FRAME = struct.Struct(">IBBH")
SASL_MECHANISMS = 0x40
SASL_INIT = 0x41
SASL_OUTCOME = 0x44
MAX_SASL_FRAME = 64 * 1024


class SaslState(enum.Enum):
    """Where the negotiation stands."""

    AWAIT_HEADER = "await-header"
    AWAIT_INIT = "await-init"
    DONE = "done"  # the rest of the stream is AMQP, for proton
    FAILED = "failed"  # outcome sent (or garbage seen); close after flushing


class SaslError(Exception):
    """The peer broke the SASL protocol."""


@dataclass(frozen=True, slots=True)
class SaslResult:
    """Who the peer said it was."""

    mechanism: str | None  # None: the peer skipped SASL
    hostname: str | None
    username: str | None  # PLAIN authcid (the SAS key name)


# (hostname, username, password) -> True if PLAIN credentials are valid
PlainCheck = Callable[[str | None, str, str], bool]


class SaslServer:
    """Feed bytes; read bytes to send; when `state` is DONE, `remainder` belongs to AMQP."""

    def __init__(self, check_plain: PlainCheck) -> None:
        self._check_plain = check_plain
        self._buf = bytearray()
        self.state = SaslState.AWAIT_HEADER
        self.output = bytearray()
        self.remainder = b""
        self.result: SaslResult | None = None

    def receive(self, data: bytes) -> None:
        """Consume peer bytes; may move the state on and queue output."""
        if self.state in (SaslState.DONE, SaslState.FAILED):
            raise SaslError("SASL negotiation is over")
        self._buf += data
        if self.state == SaslState.AWAIT_HEADER:
            if len(self._buf) < 8:
                if not (
                    SASL_HEADER.startswith(bytes(self._buf))
                    or AMQP_HEADER.startswith(bytes(self._buf))
                ):
                    self._fail_header()
                return
            header = bytes(self._buf[:8])
            if header == AMQP_HEADER:
                # No SASL layer at all: everything, header included, is for proton.
                self.result = SaslResult(None, None, None)
                self.remainder = bytes(self._buf)
                self._buf.clear()
                self.state = SaslState.DONE
                return
            if header != SASL_HEADER:
                self._fail_header()
                return
            del self._buf[:8]
            self.output += SASL_HEADER
            self.output += _frame(
                codec.enc_described(
                    SASL_MECHANISMS, codec.enc_list([codec.enc_symbol_array(list(MECHANISMS))])
                )
            )
            self.state = SaslState.AWAIT_INIT
        if self.state == SaslState.AWAIT_INIT:
            self._read_init()

    def _fail_header(self) -> None:
        # [AMQP 2.2] answer an unsupported header with the header we do support, then close.
        self.output += SASL_HEADER
        self.state = SaslState.FAILED

    def _read_init(self) -> None:
        while len(self._buf) >= 8:
            size, doff, ftype, _channel = _FRAME.unpack_from(self._buf)
            if size < 8 or size > MAX_SASL_FRAME or doff < 2 or ftype != 1:
                raise SaslError(f"malformed SASL frame (size={size}, doff={doff}, type={ftype})")
            if len(self._buf) < size:
                return
            body = bytes(self._buf[doff * 4 : size])
            del self._buf[:size]
            if not body:
                continue  # empty frame: allowed, carries nothing
            self._on_init(body)
            return

    def _on_init(self, body: bytes) -> None:
        try:
            value, _end = codec.decode(body, 0)
        except codec.DecodeError as exc:
            raise SaslError(f"undecodable SASL frame: {exc}") from exc
        if not isinstance(value, codec.Described) or value.descriptor not in (
            SASL_INIT,
            "amqp:sasl-init:list",
        ):
            raise SaslError("expected sasl-init")
        # [AMQP 5.3.3.2] sasl-init is a list; a described value of any other shape (fuzzing
        # found a float) is the peer breaking the protocol, not an internal error.
        if value.value is not None and not isinstance(value.value, list):
            raise SaslError("sasl-init is not a list")
        fields = list(value.value or []) + [None, None, None]
        mechanism = str(fields[0]) if fields[0] is not None else ""
        response = fields[1] if isinstance(fields[1], bytes | bytearray) else b""
        hostname = fields[2] if isinstance(fields[2], str) else None
        username = None
        ok = False
        if mechanism in ("ANONYMOUS", "MSSBCBS"):
            ok = True
        elif mechanism == "PLAIN":
            parts = bytes(response).split(b"\x00")
            if len(parts) == 3:
                try:
                    username = parts[1].decode("utf-8")
                    password = parts[2].decode("utf-8")
                except UnicodeDecodeError:
                    username = None
                else:
                    ok = self._check_plain(hostname, username, password)
        # sasl-outcome code: 0 ok, 1 auth (bad credentials or unsupported mechanism).
        self.output += _frame(
            codec.enc_described(
                SASL_OUTCOME, codec.enc_list([codec.enc_ubyte(0 if ok else 1), codec.enc_null()])
            )
        )
        if not ok:
            self.state = SaslState.FAILED
            return
        self.result = SaslResult(mechanism, hostname, username)
        self.remainder = bytes(self._buf)
        self._buf.clear()
        self.state = SaslState.DONE


def _frame(body: bytes) -> bytes:
    """A SASL frame (type 1, channel 0) around an encoded performative."""
    return _FRAME.pack(8 + len(body), 2, 1, 0) + body
