"""The AMQP wire format the dashboard's message explorer shows and sends messages in.

admin/ does not import protocol/ (they are siblings): the explorer names what it needs in a
Protocol (sbemu.admin.explorer.WireCodec) and the server hands it WIRE_CODEC from here, built on
protocol.messages and protocol.sections, so a message the explorer peeks or sends has exactly
the bytes an AMQP client would get or send.
"""

from __future__ import annotations

from ..partitions import IncomingMessage, MessageRecord
from . import sections
from .messages import encode_delivery, encode_record, to_incoming


class WireCodec:
    """sbemu.admin.explorer.WireCodec over the protocol side's encoders."""

    def encode_peeked(self, rec: MessageRecord, partition_id: int | None) -> bytes:
        """A stored message as a peek delivers it (with its state)."""
        return encode_delivery(rec, partition_id, None, with_state=True)

    def encode_record(self, rec: MessageRecord) -> bytes:
        """A stored message as it was sent (for a resubmit)."""
        return encode_record(rec, [])

    def read_properties(self, data: bytes) -> dict[str, object]:
        """The properties section of an encoded message, as a dict."""
        return sections.read_properties(data)

    def to_incoming(self, data: bytes, for_topic: bool) -> IncomingMessage:
        """Encoded message bytes as a send hands them to the router; sections.SectionError (a
        ValueError) when the bytes are not a well-formed message."""
        return to_incoming(sections.scan_message(data, quotas=False), for_topic)


WIRE_CODEC = WireCodec()
