"""The AMQP 1.0 values that have no Python type of their own ([AMQP 1.0 1.6], types.xml):
symbol, timestamp and described values, and the error a malformed encoding raises. The
decoder (protocol/decoder.py) builds them, the encoder (protocol/encoder.py) recognises them;
``sbemu.protocol.codec`` exports them with both."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["DecodeError", "Described", "Symbol", "Timestamp"]


class DecodeError(ValueError):
    """Raised for truncated, malformed or unknown AMQP encodings."""


class Symbol(str):
    """An AMQP symbol (ASCII name from a constrained domain), distinct from string."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


class Timestamp(int):
    """An AMQP timestamp: signed milliseconds since the Unix epoch."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Timestamp({int.__repr__(self)})"


class Described(NamedTuple):
    """A described value: ``descriptor`` is an int (ulong code) or a Symbol."""

    descriptor: Any
    value: Any
